package microvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// TestSnapshotFreshEntropy restores the same snapshot twice: the two runs
// must read different random numbers (the agent mixes host entropy into
// the pool and reseeds the CRNG before each job).
func TestSnapshotFreshEntropy(t *testing.T) {
	tier := shared.get(t, WarmSnapshot)
	job := command("od", "-An", "-N32", "-tx1", "/dev/urandom")
	var outs []string
	for range 2 {
		res, err := tier.Run(context.Background(), job)
		if err != nil || res.ExitCode != 0 || len(strings.Fields(res.Stdout)) != 32 {
			t.Fatalf("%v %+v", err, res)
		}
		outs = append(outs, res.Stdout)
	}
	if outs[0] == outs[1] {
		t.Fatalf("two restores of one snapshot read the same random bytes: %s", outs[0])
	}
}

// TestSnapshotTampered attacks the snapshot: every way to change it
// through a descriptor (write, write at an offset, truncate, grow, a
// shared writable mapping) must fail, and the job still runs as made; a
// snapshot substituted without the seals, or of another size, is refused
// before any VM runs it.
func TestSnapshotTampered(t *testing.T) {
	tier := shared.get(t, WarmSnapshot)
	job := command("sh", "-c", "echo ran")
	if res, err := tier.Run(context.Background(), job); err != nil || res.Stdout != "ran\n" {
		t.Fatalf("untampered run: %v %+v", err, res)
	}
	mem := max(memFor(mustPrepare(t, job)), tier.baseMem())
	tier.snapMu.Lock()
	s := tier.snaps[vmKey{mem: mem}]
	tier.snapMu.Unlock()
	if s == nil {
		t.Fatalf("no snapshot for %d MB", mem)
	}
	var rw *os.File
	if err := s.withFd(func(fd int) (err error) {
		rw, err = os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_RDWR, 0)
		return err
	}); err != nil {
		t.Fatalf("opening the snapshot for writing (the open is allowed; the writes are not): %v", err)
	}
	defer rw.Close()
	attacks := map[string]func() error{
		"write":    func() error { _, err := rw.Write([]byte{0xff}); return err },
		"write at": func() error { _, err := rw.WriteAt([]byte{0xff}, s.size/2); return err },
		"truncate": func() error { return rw.Truncate(s.size - 4096) },
		"grow":     func() error { return rw.Truncate(s.size + 4096) },
		"append":   func() error { _, err := rw.WriteAt([]byte{0}, s.size); return err },
		"mmap": func() error {
			b, err := unix.Mmap(int(rw.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err == nil {
				b[0] ^= 0xff
				_ = unix.Munmap(b)
			}
			return err
		},
	}
	for name, attack := range attacks {
		if err := attack(); err == nil {
			t.Errorf("%s: the sealed snapshot accepted it", name)
		}
	}
	if err := s.check(); err != nil {
		t.Fatalf("after the attacks: %v", err)
	}
	if res, err := tier.Run(context.Background(), job); err != nil || res.Stdout != "ran\n" {
		t.Fatalf("run after the attacks: %v %+v", err, res)
	}

	// A snapshot swapped for one without the seals, or cut short.
	orig, err := s.reader()
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(orig)
	orig.Close()
	if err != nil || int64(len(data)) != s.size {
		t.Fatalf("reading the snapshot: %d bytes, %v", len(data), err)
	}
	for name, c := range map[string]struct {
		data []byte
		seal bool
	}{
		"unsealed":  {data, false},
		"truncated": {data[:len(data)-4096], true},
	} {
		t.Run(name, func(t *testing.T) {
			fd, err := unix.MemfdCreate("fake", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
			if err != nil {
				t.Fatal(err)
			}
			f := os.NewFile(uintptr(fd), "fake")
			defer f.Close()
			if _, err := f.Write(c.data); err != nil {
				t.Fatal(err)
			}
			if c.seal {
				if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, snapshotSeals); err != nil {
					t.Fatal(err)
				}
			}
			fake := &snapshot{f: f, size: s.size, key: s.key}
			v, err := tier.restoreFrom(context.Background(), fake)
			if v != nil {
				v.kill()
			}
			if !errors.Is(err, ErrSnapshotTampered) {
				t.Fatalf("restore of a swapped snapshot: %v", err)
			}
		})
	}
	assertNoVMs(t, tier)
}

func mustPrepare(t *testing.T, job airlock.Job) *airlock.Job {
	t.Helper()
	j, err := airlock.DefaultLimitPolicy().Prepare(job)
	if err != nil {
		t.Fatal(err)
	}
	return &j
}

// TestSpareVMM checks the VMM launched ahead for restores: WaitWarm leaves
// exactly one, a run uses it (and a new one replaces it), and Close leaves
// nothing of the tier's in its state directory.
func TestSpareVMM(t *testing.T) {
	tier, err := New(testConfig().WithWarm(WarmSnapshot).WithStateDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := tier.Available(); err != nil {
		tiertest.Unavailable(t, Name, err)
	}
	defer tier.Close()
	ctx := context.Background()
	spares := func() (names []string) {
		ents, _ := os.ReadDir(tier.cfg.stateDir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), vmNamePrefix+spareID) {
				names = append(names, e.Name())
			}
		}
		return names
	}
	if err := tier.WaitWarm(ctx); err != nil {
		t.Fatal(err)
	}
	first := spares()
	if len(first) != 1 {
		t.Fatalf("after WaitWarm: spare VMMs %v, want one", first)
	}
	if res, err := tier.Run(ctx, command("true")); err != nil || res.ExitCode != 0 {
		t.Fatalf("%v %+v", err, res)
	}
	if err := tier.WaitWarm(ctx); err != nil {
		t.Fatal(err)
	}
	tier.reapers.Wait()
	second := spares()
	if len(second) != 1 || second[0] == first[0] {
		t.Fatalf("after a run: spare VMMs %v (before: %v), want one new one", second, first)
	}
	tier.Close()
	ents, _ := os.ReadDir(tier.cfg.stateDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), vmNamePrefix) {
			t.Errorf("left after Close: %s", e.Name())
		}
	}
}
