package microvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// A snapshot is a VM saved (QMP stop + migrate to a file) while its agent
// waits for a job. Each restore streams the file into a new QEMU started
// with -incoming, hashing it on the way: only when the stream's SHA-256
// equals the digest taken when the snapshot was made does the VM continue.
// The digest lives in this process's memory, so a file swapped or edited
// on disk is refused, not run. Each restored VM gets fresh host entropy
// and the job's clock with its job (see the agent), so no two runs share
// random numbers.
type snapshot struct {
	dir    string
	path   string
	digest string // hex SHA-256 of the file
	size   int64
	mem    int64
}

// ErrSnapshotTampered is wrapped by restores whose snapshot does not match
// the digest recorded when it was made.
var ErrSnapshotTampered = errors.New("snapshot does not match its digest")

// snapshotFor returns the tier's snapshot for a memory size, making it on
// first use.
func (t *Tier) snapshotFor(ctx context.Context, mem int64) (*snapshot, error) {
	t.snapMu.Lock()
	defer t.snapMu.Unlock()
	if s := t.snaps[mem]; s != nil {
		return s, nil
	}
	s, err := t.makeSnapshot(ctx, mem)
	if err != nil {
		return nil, fmt.Errorf("making a snapshot: %w", err)
	}
	t.snaps[mem] = s
	return s, nil
}

func (t *Tier) makeSnapshot(ctx context.Context, mem int64) (_ *snapshot, err error) {
	dir := filepath.Join(t.cfg.stateDir, vmNamePrefix+"snap-"+newID())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if err := writeOwner(dir); err != nil {
		return nil, err
	}
	v, err := t.launch(ctx, vmSpec{memMB: mem, vcpus: t.cfg.vcpus, qmp: true})
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
	path := filepath.Join(dir, "vm.snap")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	_, err = v.qmp.doFile("getfd", map[string]any{"fdname": "snap"}, f)
	f.Close()
	if err != nil {
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
	v.kill()
	digest, err := hashFile(path)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	return &snapshot{dir: dir, path: path, digest: digest, size: st.Size(), mem: mem}, nil
}

// restore starts a VM from the tier's snapshot for mem and lets it run once
// the stream has been verified.
func (t *Tier) restore(ctx context.Context, mem int64) (*vm, error) {
	s, err := t.snapshotFor(ctx, mem)
	if err != nil {
		return nil, err
	}
	return t.restoreFrom(ctx, s)
}

func (t *Tier) restoreFrom(ctx context.Context, s *snapshot) (_ *vm, err error) {
	src, err := os.Open(s.path)
	if err != nil {
		return nil, fmt.Errorf("opening the snapshot: %w", err)
	}
	defer src.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	verified := make(chan error, 1)
	go func() {
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(pw, h), src)
		pw.Close()
		switch {
		case err != nil:
			verified <- err
		case n != s.size || hex.EncodeToString(h.Sum(nil)) != s.digest:
			verified <- ErrSnapshotTampered
		default:
			verified <- nil
		}
	}()
	v, err := t.launch(ctx, vmSpec{memMB: s.mem, vcpus: t.cfg.vcpus, qmp: true, input: pr, paused: true})
	pr.Close()
	if err != nil {
		pw.Close() // a copier blocked on a dead reader gets EPIPE
		<-verified
		return v, err
	}
	defer func() {
		if err != nil {
			v.kill()
			// QEMU may have choked on a damaged stream before the copier
			// finished hashing it: judge the file itself.
			if d, herr := hashFile(s.path); herr == nil && d != s.digest && !errors.Is(err, ErrSnapshotTampered) {
				err = fmt.Errorf("%w: %v", ErrSnapshotTampered, err)
			}
		}
	}()
	// The VM is paused until cont; wait until QEMU has loaded the stream.
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
	select {
	case err := <-verified:
		if err != nil {
			return v, fmt.Errorf("restoring: %w", err)
		}
	case <-time.After(2 * time.Second):
		// QEMU finished loading but did not consume the whole file: the
		// stream carries more than the snapshot that was made.
		v.kill()
		<-verified
		return v, fmt.Errorf("restoring: %w (trailing data)", ErrSnapshotTampered)
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
		os.RemoveAll(s.dir)
		delete(t.snaps, k)
	}
}
