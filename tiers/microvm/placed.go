package microvm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/place"
	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

// checkPlaced runs the context's placed-files check (airlock.CheckPlaced:
// an approval bound to the job's digest) over the files as the guest will
// receive them. The files are decoded from payload — the very bytes of the
// Job frame — and written into a directory of their own under the state
// directory (marked like a VM's, so the orphan sweep removes it after a
// crash), removed again before it returns; so a file whose content changed
// anywhere on its way to the guest (after approval, or in the encoding) is
// refused before the job is sent. A frame without files is checked against
// the tier's one empty directory, which saves a job without files the
// host's file system work, and a context without a check all of it.
func (t *Tier) checkPlaced(ctx context.Context, payload []byte) (err error) {
	if !airlock.HasPlacedCheck(ctx) {
		return nil // nothing to inspect: the files go to the guest only
	}
	var sent struct {
		Files map[string][]byte `json:"files"`
	}
	if err := json.Unmarshal(payload, &sent); err != nil {
		return fmt.Errorf("decoding the job frame: %w", err)
	}
	if len(sent.Files) == 0 {
		empty, err := t.emptyPlaced()
		if err != nil {
			return fmt.Errorf("placing files for inspection: %w", err)
		}
		return airlock.CheckPlaced(ctx, empty)
	}
	dir, placed, err := t.placedDir("placed-")
	if err != nil {
		return fmt.Errorf("placing files for inspection: %w", err)
	}
	defer os.RemoveAll(dir)
	// The directory is fresh, but the files go through the one placement
	// every tier shares (internal/place), which follows nothing.
	if err := place.Files(placed, sent.Files, place.Options{FileMode: 0o600, DirMode: 0o700}); err != nil {
		return fmt.Errorf("placing files for inspection: %w", err)
	}
	return airlock.CheckPlaced(ctx, placed)
}

// placedDir makes <state>/airlock-vm-<kind><id> with its owner file and
// an empty files/ directory in it; it returns both paths.
func (t *Tier) placedDir(kind string) (dir, files string, err error) {
	dir = filepath.Join(t.cfg.stateDir, vmNamePrefix+kind+newID())
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", "", err
	}
	files = filepath.Join(dir, "files")
	if err := writeOwner(dir); err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	if err := os.Mkdir(files, 0o700); err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, files, nil
}

// emptyPlaced returns the tier's empty placed-files directory, made on
// first use (again after Close, which removes it). It is never written
// after it is made.
func (t *Tier) emptyPlaced() (string, error) {
	t.emptyMu.Lock()
	defer t.emptyMu.Unlock()
	if t.emptyDir == "" {
		dir, files, err := t.placedDir("empty-")
		if err != nil {
			return "", err
		}
		if err := os.Chmod(files, 0o500); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
		t.emptyDir = dir
	}
	return filepath.Join(t.emptyDir, "files"), nil
}

// dropEmptyPlaced removes the empty placed-files directory.
func (t *Tier) dropEmptyPlaced() {
	t.emptyMu.Lock()
	defer t.emptyMu.Unlock()
	if t.emptyDir != "" {
		os.RemoveAll(t.emptyDir)
		t.emptyDir = ""
	}
}

// jobFor encodes job for the guest (see encodeJob) and runs the placed-
// files check over the encoding.
func (t *Tier) jobFor(ctx context.Context, job *airlock.Job, n *wire.Net, reads []readDisk) ([]byte, error) {
	payload, err := encodeJob(job, n, reads)
	if err != nil {
		return nil, err
	}
	if err := t.checkPlaced(ctx, payload); err != nil {
		return nil, err
	}
	return payload, nil
}
