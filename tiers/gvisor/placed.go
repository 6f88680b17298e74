package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/place"
)

// stage places a job's files for an agent sandbox and runs the context's
// placed-files check (airlock.CheckPlaced: approvals recompute the job's
// digest there) over them. An agent sandbox's scratch lives in gVisor's
// memory, out of the host's sight, so the files are placed in a host
// directory first, checked there, and read back from it: the bytes handed
// to the agent are exactly the bytes that passed the check. The directory
// is removed before stage returns. Without a check, nothing is staged.
func (t *Tier) stage(ctx context.Context, id string, files map[string]string) (map[string]string, error) {
	if !airlock.HasPlacedCheck(ctx) {
		return files, nil // no check to make: the files go to the agent as they are
	}
	if len(files) == 0 {
		// Nothing to place: the check sees the tier's empty directory.
		return nil, airlock.CheckPlaced(ctx, t.empty)
	}
	dir := filepath.Join(t.base, "sb", id, "placed")
	defer os.RemoveAll(dir)
	if err := writeFiles(dir, files, sandboxUID); err != nil {
		return nil, fmt.Errorf("placing files: %w", err)
	}
	if err := airlock.CheckPlaced(ctx, dir); err != nil {
		return nil, err
	}
	placed := make(map[string]string, len(files))
	for name := range files {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("placing files: %w", err)
		}
		placed[name] = string(data)
	}
	return placed, nil
}

// writeFiles places the job's files under dir (made if missing), owned by
// uid: on the host, in a cold run's scratch and in stage's directory, and
// in an agent sandbox by the agent, whose scratch outlives a session's
// jobs. A link, hard link or special file an earlier job left where a
// file goes refuses the placement before anything is written (see
// internal/place, which needs no openat2: gVisor may lack it).
func writeFiles(dir string, files map[string]string, uid int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chown(dir, uid, uid); err != nil {
		return err
	}
	return place.Files(dir, files, place.Options{FileMode: 0o755, DirMode: 0o755, Owner: &place.Owner{UID: uid, GID: uid}})
}
