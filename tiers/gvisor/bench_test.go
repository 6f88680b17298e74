package gvisor

import (
	"context"

	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/egresstest"
	"github.com/airlock-sandbox/airlock/internal/testing/imagetest"
)

// medians records per-iteration times and reports their median, which is
// what docs/gvisor.md quotes (means are skewed by a busy shared machine).
type medians []time.Duration

func (m *medians) time(fn func()) {
	start := time.Now()
	fn()
	*m = append(*m, time.Since(start))
}

func (m medians) median() time.Duration {
	if len(m) == 0 {
		return 0
	}
	s := append(medians(nil), m...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// BenchmarkCold compares a cold job through the tier with a raw `runsc run`
// of the same bundle (same flags, same spec), both running /bin/true. Each
// iteration runs both, alternating which goes first, so that both see the
// same load on a shared machine; it reports both medians and their ratio.
// The tier's clean-up, which runs after the result is returned, is waited
// for outside the timed region.
func BenchmarkCold(b *testing.B) {
	tier := newTier(b, NewConfig())
	job, err := tier.cfg.limits.Prepare(cmdJob("/bin/true"))
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	id := tier.newID()
	bd := tier.newBundle(id, &job, nil)
	bd.args, bd.env, bd.scratch = job.Argv, jobEnv(nil), filepath.Join(dir, "scratch")
	if err := writeFiles(bd.scratch, nil, sandboxUID); err != nil {
		b.Fatal(err)
	}
	if err := bd.write(dir); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = (cgroup{path: "/" + id}).remove() }()
	raw := func() {
		cmd := exec.Command(tier.runsc, append(tier.runscFlags(false, 0), "run", "--bundle", dir, id)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("runsc run: %v: %s", err, out)
		}
	}
	viaTier := func() {
		if _, err := tier.Run(context.Background(), job); err != nil {
			b.Fatal(err)
		}
	}
	var mr, mt medians
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			mr.time(raw)
			mt.time(viaTier)
		} else {
			mt.time(viaTier)
			mr.time(raw)
		}
		i++
		b.StopTimer()
		tier.bg.Wait()
		b.StartTimer()
	}
	r, t := mr.median(), mt.median()
	b.ReportMetric(ms(r), "raw-median-ms")
	b.ReportMetric(ms(t), "tier-median-ms")
	b.ReportMetric(float64(t)/float64(r), "tier/raw")
}

// BenchmarkColdImage compares a cold /bin/true in the host view with the
// same in a busybox image, through one tier whose resolver serves both;
// alternating which goes first in each iteration, as BenchmarkCold does.
// It reports both medians and their ratio.
func BenchmarkColdImage(b *testing.B) {
	r := imagetest.New(b)
	r.Add("busybox", imagetest.Busybox(b, "bench"), image.Config{})
	r.AllowHost()
	tier := newTier(b, NewConfig().WithImages(r))
	host, img := cmdJob("/bin/true"), cmdJob("/bin/true")
	host.Image, img.Image = image.Host, "busybox"
	run := func(job airlock.Job) func() {
		return func() {
			if res, err := tier.Run(context.Background(), job); err != nil || res.ExitCode != 0 {
				b.Fatalf("%v %+v", err, res)
			}
		}
	}
	var mh, mi medians
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			mh.time(run(host))
			mi.time(run(img))
		} else {
			mi.time(run(img))
			mh.time(run(host))
		}
		b.StopTimer()
		tier.bg.Wait()
		b.StartTimer()
	}
	b.ReportMetric(ms(mh.median()), "host-median-ms")
	b.ReportMetric(ms(mi.median()), "image-median-ms")
	b.ReportMetric(float64(mi.median())/float64(mh.median()), "image/host")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkPooled measures claim-to-result for /bin/true through the warm
// pool: before each claim, outside the timed region, WaitWarm waits for the
// pool to be full and the previous sandbox's destruction is waited for, so
// each iteration is one claim of a ready sandbox. Its peer, timed in the
// same iteration just before the claim (so that neither overlaps the other's
// clean-up or refill), is `runsc exec` of /bin/true into an already running
// sandbox, the cheapest way to run a program in gVisor without an agent.
// It reports both medians and their ratio.
func BenchmarkPooled(b *testing.B) {
	tier := newTier(b, NewConfig().WithPool(1, 1))
	job := cmdJob("/bin/true")
	peer, err := tier.newAgentSandbox(modeServe, airlock.FSGrant{}, nil, func() {})
	if err != nil {
		b.Fatal(err)
	}
	defer tier.destroyLater(peer)
	var claim, exe medians
	for b.Loop() {
		b.StopTimer()
		warm(b, tier)
		tier.bg.Wait()
		b.StartTimer()
		exe.time(func() {
			cmd := exec.Command(tier.runsc, "--root", tier.state, "exec", "--user", "65534:65534", "--cwd", "/", peer.id, "/bin/true")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("runsc exec: %v: %s", err, out)
			}
		})
		claim.time(func() {
			if _, err := tier.Run(context.Background(), job); err != nil {
				b.Fatal(err)
			}
		})
	}
	b.ReportMetric(ms(claim.median()), "claim-median-ms")
	b.ReportMetric(ms(exe.median()), "exec-median-ms")
	b.ReportMetric(float64(claim.median())/float64(exe.median()), "claim/exec")
	if st := tier.Stats(); st.Misses > 0 {
		b.Fatalf("some runs missed the pool: %+v", st)
	}
}

// BenchmarkEgress measures what the egress wiring costs a pooled job:
// /bin/true claimed from the pool without and with a net grant (gateway,
// CA, forwarder in the agent), alternating in each iteration so both see
// the same load; reports both medians and their ratio.
func BenchmarkEgress(b *testing.B) {
	o := egresstest.StartOrigin(b, "origin.test")
	tier := newTier(b, NewConfig().WithEgress(egress.Config{Hosts: o.Pins}).WithPool(1, 1))
	plain := cmdJob("/bin/true")
	granted := cmdJob("/bin/true")
	granted.Grants.Net = []airlock.NetRule{o.Rule("origin.test")}
	var without, with medians
	for i := 0; b.Loop(); i++ {
		for k := range 2 {
			job, m := plain, &without
			if (i+k)%2 == 1 {
				job, m = granted, &with
			}
			b.StopTimer()
			warm(b, tier)
			b.StartTimer()
			m.time(func() {
				if res, err := tier.Run(context.Background(), job); err != nil || res.ExitCode != 0 {
					b.Fatalf("%v %+v", err, res)
				}
			})
		}
	}
	b.ReportMetric(ms(without.median()), "plain-median-ms")
	b.ReportMetric(ms(with.median()), "net-median-ms")
	if without.median() > 0 {
		b.ReportMetric(float64(with.median())/float64(without.median()), "net/plain")
	}
}
