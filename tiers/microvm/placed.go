package microvm

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

// checkPlaced runs the context's placed-files check (airlock.CheckPlaced:
// an approval bound to the job's digest) over the files as the guest will
// receive them. The files are decoded from payload — the very bytes of the
// Job frame — and written into a directory of their own under stateDir
// (marked like a VM's, so the orphan sweep removes it after a crash),
// removed again before it returns; so a file whose content changed
// anywhere on its way to the guest (after approval, or in the encoding) is
// refused before the job is sent.
func checkPlaced(ctx context.Context, stateDir string, payload []byte) (err error) {
	var sent struct {
		Files map[string][]byte `json:"files"`
	}
	if err := json.Unmarshal(payload, &sent); err != nil {
		return fmt.Errorf("decoding the job frame: %w", err)
	}
	dir := filepath.Join(stateDir, vmNamePrefix+"placed-"+newID())
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("placing files for inspection: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := writeOwner(dir); err != nil {
		return fmt.Errorf("placing files for inspection: %w", err)
	}
	placed := filepath.Join(dir, "files")
	if err := os.Mkdir(placed, 0o700); err != nil {
		return fmt.Errorf("placing files for inspection: %w", err)
	}
	root, err := os.OpenRoot(placed)
	if err != nil {
		return fmt.Errorf("placing files for inspection: %w", err)
	}
	defer root.Close()
	for name, data := range sent.Files {
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o700); err != nil {
				return fmt.Errorf("placing %s for inspection: %w", name, err)
			}
		}
		if err := root.WriteFile(name, data, 0o600); err != nil {
			return fmt.Errorf("placing %s for inspection: %w", name, err)
		}
	}
	return airlock.CheckPlaced(ctx, placed)
}

// jobFor encodes job for the guest (see encodeJob) and runs the placed-
// files check over the encoding.
func (t *Tier) jobFor(ctx context.Context, job *airlock.Job, n *wire.Net) ([]byte, error) {
	payload, err := encodeJob(job, n)
	if err != nil {
		return nil, err
	}
	if err := checkPlaced(ctx, t.cfg.stateDir, payload); err != nil {
		return nil, err
	}
	return payload, nil
}
