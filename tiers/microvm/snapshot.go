package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A snapshot is a VM saved (QMP stop + migrate) while its agent waits for
// a job. The stream is written into an anonymous memory file that only
// this process holds (no path on disk), which is then sealed: the kernel
// refuses every later write, truncation or growth through any descriptor,
// this process's included. Each restore hands a new VMM a read-only
// descriptor of it; before that the seals and the size are checked again.
// Each restored VM gets fresh host entropy and the job's clock with its
// job (see the agent), so no two runs share random numbers.
type snapshot struct {
	f    *os.File // the sealed memory file
	size int64
	key  vmKey
	img  *heldImage // the image whose disk the guest had (held while the snapshot exists)
}

// vmKey is what makes VMs interchangeable: their guest memory and the
// image whose disk is their job root ("": the host view). A snapshot or a
// spare VMM of one key never serves another.
type vmKey struct {
	mem    int64
	digest string
}

// snapshotSeals are the seals a snapshot must carry to be restored.
const snapshotSeals = unix.F_SEAL_WRITE | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// ErrSnapshotTampered is wrapped by restores whose snapshot is no longer
// the one that was made (its seals or its size changed).
var ErrSnapshotTampered = errors.New("snapshot is not the one that was made")

// withFd calls fn with the memory file's descriptor, which stays open
// (Close waits) until fn returns; a snapshot dropped by Close is an error.
func (s *snapshot) withFd(fn func(fd int) error) error {
	rc, err := s.f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return fmt.Errorf("the snapshot was dropped: %w", err)
	}
	return ferr
}

// check verifies that the snapshot is still sealed and of its size.
func (s *snapshot) check() error {
	return s.withFd(func(fd int) error {
		seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrSnapshotTampered, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("%w: %v", ErrSnapshotTampered, err)
		}
		if seals&snapshotSeals != snapshotSeals || st.Size != s.size {
			return fmt.Errorf("%w: seals %#x, %d bytes (made with %d)", ErrSnapshotTampered, seals, st.Size, s.size)
		}
		return nil
	})
}

// reader opens a read-only descriptor of the snapshot with its own offset.
func (s *snapshot) reader() (f *os.File, err error) {
	err = s.withFd(func(fd int) error {
		f, err = os.Open(fmt.Sprintf("/proc/self/fd/%d", fd))
		return err
	})
	return f, err
}

// snapshotFor returns the tier's snapshot for a memory size and image (nil:
// the host view), making it on first use.
func (t *Tier) snapshotFor(ctx context.Context, mem int64, h *heldImage) (*snapshot, error) {
	key := vmKey{mem, digestOf(h)}
	t.snapMu.Lock()
	defer t.snapMu.Unlock()
	if s := t.snaps[key]; s != nil {
		return s, nil
	}
	s, err := t.makeSnapshot(ctx, mem, h)
	if err != nil {
		return nil, fmt.Errorf("making a snapshot: %w", err)
	}
	if h != nil {
		h.ref()
	}
	s.key, s.img = key, h
	t.snaps[key] = s
	return s, nil
}

func (t *Tier) makeSnapshot(ctx context.Context, mem int64, h *heldImage) (_ *snapshot, err error) {
	fd, err := unix.MemfdCreate("airlock-snapshot", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memory file: %w", err)
	}
	f := os.NewFile(uintptr(fd), "airlock-snapshot")
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	v, err := t.launch(ctx, vmSpec{memMB: mem, vcpus: t.cfg.vcpus, qmp: true, img: h})
	if err != nil {
		return nil, err
	}
	defer v.kill()
	if err := v.awaitReady(ctx, t.cfg.bootTimeout); err != nil {
		return nil, err
	}
	if _, err := v.qmp.do("stop", nil); err != nil {
		return nil, err
	}
	if _, err := v.qmp.doFile("getfd", map[string]any{"fdname": "snap"}, f); err != nil {
		return nil, err
	}
	if _, err := v.qmp.do("migrate", map[string]any{"uri": "fd:snap"}); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(t.cfg.bootTimeout)
	for {
		raw, err := v.qmp.do("query-migrate", nil)
		if err != nil {
			return nil, err
		}
		var st struct {
			Status string `json:"status"`
			Error  string `json:"error-desc"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return nil, err
		}
		if st.Status == "completed" {
			break
		}
		if st.Status == "failed" || st.Status == "cancelled" {
			return nil, fmt.Errorf("migration %s: %s", st.Status, st.Error)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("migration did not complete within %v", t.cfg.bootTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	v.kill() // QEMU's descriptor goes with it
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, snapshotSeals); err != nil {
		return nil, fmt.Errorf("sealing the snapshot: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Size == 0 {
		return nil, errors.New("the migration wrote nothing")
	}
	return &snapshot{f: f, size: st.Size}, nil
}

// restore starts a VM from the tier's snapshot for mem and image h and lets
// it run once the stream has been verified.
func (t *Tier) restore(ctx context.Context, mem int64, h *heldImage) (*vm, error) {
	s, err := t.snapshotFor(ctx, mem, h)
	if err != nil {
		return nil, err
	}
	return t.restoreFrom(ctx, s)
}

func (t *Tier) restoreFrom(ctx context.Context, s *snapshot) (_ *vm, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	src, err := s.reader()
	if err != nil {
		return nil, fmt.Errorf("opening the snapshot: %w", err)
	}
	defer src.Close()
	// A VMM launched ahead of time for this memory size saves QEMU's own
	// start (loading its libraries and the kernel image) from the restore;
	// the next one is launched now, for the restore after this.
	v := t.spares.take(ctx, s.key)
	t.spares.fill(t, s.key.mem, s.img)
	if v == nil {
		if v, err = t.launch(ctx, t.spareSpec(s.key.mem, s.img)); err != nil {
			return v, err
		}
	}
	defer func() {
		if err != nil {
			v.kill()
		}
	}()
	if _, err := v.qmp.doFile("getfd", map[string]any{"fdname": "snap"}, src); err != nil {
		return v, fmt.Errorf("restoring: %w (%s)", err, v.diag())
	}
	if _, err := v.qmp.do("migrate-incoming", map[string]any{"uri": "fd:snap"}); err != nil {
		return v, fmt.Errorf("restoring: %w (%s)", err, v.diag())
	}
	// The VM stays paused until cont; wait until QEMU has loaded the stream.
	deadline := time.Now().Add(t.cfg.bootTimeout)
	for {
		st, err := v.qmp.status()
		if err != nil {
			return v, fmt.Errorf("restoring: %w (%s)", err, v.diag())
		}
		if st != "inmigrate" {
			if st != "paused" {
				return v, fmt.Errorf("restored VM is %q, not paused", st)
			}
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return v, fmt.Errorf("restore did not finish in time")
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Checked again now that QEMU has read it: what ran is what was made.
	if err := s.check(); err != nil {
		return v, err
	}
	if _, err := v.qmp.do("cont", nil); err != nil {
		return v, err
	}
	return v, nil
}

// dropSnapshots removes the tier's snapshot files.
func (t *Tier) dropSnapshots() {
	t.snapMu.Lock()
	defer t.snapMu.Unlock()
	for k, s := range t.snaps {
		s.f.Close()
		if s.img != nil {
			s.img.unref()
		}
		delete(t.snaps, k)
	}
}
