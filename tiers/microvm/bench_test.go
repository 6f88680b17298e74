package microvm

import (
	"context"
	"github.com/airlock-sandbox/airlock/internal/cpio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/imagetest"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

// BenchmarkStart measures /bin/true from call to result, side by side:
//
//	cold-vs-bare  alternately: bare QEMU with the tier's own command line
//	              (machine, kernel and its command line, devices, the
//	              control port's socket), the same initramfs, whose /init is
//	              replaced (by an appended cpio) with a busybox script that
//	              runs /bin/true and powers off (no agent: no modules
//	              loaded, the port never opened), and the tier booting a
//	              fresh VM
//	snapshot  the tier restoring its snapshot (made before the timer
//	          starts) into the VMM it launched ahead
//	pool      the tier claiming a pooled VM; WaitWarm, untimed, before each
//	          claim, so the claim is measured, not the refill
//
// Each reports medians in ms; run with -benchtime=Nx.
func BenchmarkStart(b *testing.B) {
	job := command("/bin/true")
	ctx := context.Background()
	// bare and cold alternate within one loop, so that both see the same
	// load on a shared machine; the ratio of their medians is reported.
	b.Run("cold-vs-bare", func(b *testing.B) {
		tier := benchTier(b, testConfig())
		steps := observeSteps(tier)
		initrd := bareInitrd(b, tier)
		dir := b.TempDir()
		args := bareArgs(tier.qemuArgs("bench", dir, vmSpec{memMB: tier.baseMem(), vcpus: 1}), initrd)
		// The control port's socket, as for the tier's VMs: QEMU connects
		// to it as it starts; with no agent, nothing flows.
		ln, err := net.Listen("unix", filepath.Join(dir, "ctl.sock"))
		if err != nil {
			b.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
			}
		}()
		var bare, cold []time.Duration
		for b.Loop() {
			start := time.Now()
			bctx, cancel := context.WithTimeout(ctx, tier.cfg.bootTimeout)
			cmd := exec.CommandContext(bctx, tier.assets.qemu, args...)
			console := &tail{n: 2048}
			cmd.Stdout, cmd.Stderr = console, console
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			err := cmd.Run()
			cancel()
			if err != nil {
				b.Fatalf("bare QEMU: %v (console: %s)", err, console)
			}
			bare = append(bare, time.Since(start))
			start = time.Now()
			benchRun(b, tier, ctx, job)
			cold = append(cold, time.Since(start))
		}
		reportPair(b, "bare", bare, "cold", cold)
		steps.report(b)
	})
	b.Run("snapshot", func(b *testing.B) {
		tier := benchTier(b, testConfig().WithWarm(WarmSnapshot))
		steps := observeSteps(tier)
		if err := tier.WaitWarm(ctx); err != nil {
			b.Fatal(err)
		}
		measure(b, func() { benchRun(b, tier, ctx, job) })
		steps.report(b)
	})
	b.Run("pool", benchPool)
}

func benchPool(b *testing.B) {
	ctx := context.Background()
	job := command("/bin/true")
	tier := benchTier(b, testConfig().WithWarm(WarmSnapshot).WithPool(1))
	steps := observeSteps(tier)
	var durs []time.Duration
	for b.Loop() {
		b.StopTimer()
		if err := tier.WaitWarm(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		benchRun(b, tier, ctx, job)
		durs = append(durs, time.Since(start))
	}
	reportMedian(b, durs)
	steps.report(b)
}

// guestSteps collects, from the guest's own timestamps, where a run's time
// went inside the VM: kernel (from the kernel's start to the agent's first
// instruction), agent (from there to Ready: mounts, staging, modules, the
// port), job (from the Job frame read to the job's output drained).
type guestSteps struct {
	mu                  sync.Mutex
	kernel, agent, jobs []time.Duration
}

func observeSteps(tier *Tier) *guestSteps {
	g := &guestSteps{}
	tier.observe = g.add
	return g
}

func (g *guestSteps) add(marks []wire.Mark) {
	at := map[string]int64{}
	for _, m := range marks {
		at[m.Step] = m.US
	}
	span := func(from, to string) (time.Duration, bool) {
		a, okA := at[from]
		z, okZ := at[to]
		return time.Duration(z-a) * time.Microsecond, okA && okZ && z >= a
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if at["init"] > 0 {
		g.kernel = append(g.kernel, time.Duration(at["init"])*time.Microsecond)
	}
	if d, ok := span("init", "port"); ok {
		g.agent = append(g.agent, d)
	}
	if d, ok := span("job", "drained"); ok {
		g.jobs = append(g.jobs, d)
	}
}

func (g *guestSteps) report(b *testing.B) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range []struct {
		name string
		d    []time.Duration
	}{{"guest-kernel-ms", g.kernel}, {"guest-agent-ms", g.agent}, {"guest-job-ms", g.jobs}} {
		if len(s.d) > 0 {
			b.ReportMetric(ms(median(s.d)), s.name)
		}
	}
}

func benchTier(b *testing.B, cfg Config) *Tier {
	tier, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tier.Close() })
	if err := tier.Available(); err != nil {
		tiertest.Unavailable(b, Name, err)
	}
	return tier
}

func benchRun(b *testing.B, tier *Tier, ctx context.Context, job airlock.Job) {
	res, err := tier.Run(ctx, job)
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("%v %+v", err, res)
	}
}

func measure(b *testing.B, fn func()) {
	var durs []time.Duration
	for b.Loop() {
		start := time.Now()
		fn()
		durs = append(durs, time.Since(start))
	}
	reportMedian(b, durs)
}

func reportMedian(b *testing.B, durs []time.Duration) {
	if len(durs) > 0 {
		b.ReportMetric(ms(median(durs)), "median-ms")
	}
}

// reportPair reports the medians of a peer and of what is compared with
// it, in ms, and their ratio ("second/first").
func reportPair(b *testing.B, first string, a []time.Duration, second string, c []time.Duration) {
	ma, mc := median(a), median(c)
	b.ReportMetric(ms(ma), first+"-median-ms")
	b.ReportMetric(ms(mc), second+"-median-ms")
	b.ReportMetric(float64(mc)/float64(ma), second+"/"+first)
}

func median(durs []time.Duration) time.Duration {
	s := slices.Clone(durs)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// bareInitrd is the tier's base initramfs with a second archive appended
// whose /init runs /bin/true and powers the machine off.
func bareInitrd(b *testing.B, tier *Tier) string {
	base, err := os.ReadFile(tier.assets.initrd)
	if err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(b.TempDir(), "bare.cpio")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(base); err != nil {
		b.Fatal(err)
	}
	c := cpio.NewWriter(f)
	c.Add(cpio.Entry{Name: "init", Mode: cpio.File | 0o755, Data: []byte("#!/bin/busybox sh\n/bin/true\n/bin/busybox poweroff -f\n")})
	if err := c.Close(); err != nil {
		b.Fatal(err)
	}
	return p
}

// bareArgs swaps the bare initramfs into the tier's command line; all else
// (machine, kernel command line, devices, sandbox) stays as the tier has it.
func bareArgs(args []string, initrd string) []string {
	out := slices.Clone(args)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == "-initrd" {
			out[i+1] = initrd
		}
	}
	return out
}

// BenchmarkJobFor measures the host's work before a VM is acquired:
// encoding the Job frame alone (the raw step) and encoding plus the
// placed-files check over it (a directory written and removed, the
// context's check run), for a job with two small files and no check set,
// and for the same job without files (checked against the tier's empty
// directory).
func BenchmarkJobFor(b *testing.B) {
	tier := benchTier(b, testConfig())
	job, err := tier.cfg.limits.Prepare(command("sh", "run.sh"))
	if err != nil {
		b.Fatal(err)
	}
	job.Files = map[string]string{"run.sh": "echo hi\n", "data/in.txt": "some input\n"}
	ctx := context.Background()
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			if _, err := encodeJob(&job, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode+check", func(b *testing.B) {
		for b.Loop() {
			if _, err := tier.jobFor(ctx, &job, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	bare := job
	bare.Files = nil
	b.Run("encode+check/no-files", func(b *testing.B) {
		for b.Loop() {
			if _, err := tier.jobFor(ctx, &bare, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkImageStart measures /bin/true from call to result on cold
// boots, alternately in one loop: from the initramfs (the host view) and
// from an image's disk (a busybox root: the agent also loads the block
// and file system drivers, mounts the disk and its overlay, and the job
// is chrooted). The disk is built before the timer starts. Reports the
// medians in ms and their ratio (image/initramfs); run with
// -benchtime=Nx.
func BenchmarkImageStart(b *testing.B) {
	r := imagetest.New(b)
	r.Add("busybox", imagetest.Busybox(b, "airlock-bench"), image.Config{})
	r.AllowHost()
	tier := benchTier(b, testConfig().WithImages(r))
	if _, err := findMkfsErofs(); err != nil {
		tiertest.Unavailable(b, Name, err)
	}
	ctx := context.Background()
	h, _, err := tier.imageFor(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	defer h.unref()
	host, img := command("/bin/true"), command("/bin/true")
	host.Image = image.Host
	var initramfs, disk []time.Duration
	for b.Loop() {
		start := time.Now()
		benchRun(b, tier, ctx, host)
		initramfs = append(initramfs, time.Since(start))
		start = time.Now()
		benchRun(b, tier, ctx, img)
		disk = append(disk, time.Since(start))
	}
	reportPair(b, "initramfs", initramfs, "image", disk)
}
