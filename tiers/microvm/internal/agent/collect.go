package agent

import (
	"io"

	"github.com/airlock-sandbox/airlock/internal/collect"
	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
)

// sendCollected reads the files the job's collect patterns name from the
// scratch, now that the job's cgroup is empty, and sends them in one
// Files frame (the host checks them again: see collect.Accept).
func sendCollected(port io.Writer, patterns []string) {
	got, err := collect.Path(scratchDir, patterns, collect.MaxBytes)
	if err != nil {
		got.Skipped = []string{err.Error()}
	}
	_ = frame.WriteJSON(port, frame.Files, collect.ToWire(got))
}
