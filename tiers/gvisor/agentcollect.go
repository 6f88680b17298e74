package gvisor

import (
	"net"

	"github.com/airlock-sandbox/airlock/internal/collect"
	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
)

// sendCollected reads the files the job's collect patterns name from the
// scratch, now that every process of the job is gone, and sends them in
// one Files frame (the host checks them again: see collect.Accept).
func sendCollected(conn net.Conn, patterns []string) {
	got, err := collect.Path(scratchDir, patterns, collect.MaxBytes)
	if err != nil {
		got.Skipped = []string{err.Error()}
	}
	_ = frame.WriteJSON(conn, frame.Files, collect.ToWire(got))
}
