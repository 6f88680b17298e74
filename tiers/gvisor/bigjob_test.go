package gvisor

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
)

// TestFilesAboveTheFrame: a job whose files do not fit one job frame (48
// MiB of JSON) runs as it would without a pool: a claimed sandbox is left
// for a cold start, which places the files on the host. A job only the
// agent can run (it collects), or a session's run, is an invalid job that
// says why, not a lost sandbox; the session goes on.
func TestFilesAboveTheFrame(t *testing.T) {
	big := strings.Repeat("a", frame.MaxJob+1)
	tier := newTier(t, NewConfig().WithPool(1, 1))
	warm(t, tier)
	job := cmdJob("sh", "-c", "wc -c < big")
	job.Files = map[string]string{"big": big}
	res, err := tier.Run(context.Background(), job)
	if err != nil || strings.TrimSpace(res.Stdout) != itoa(len(big)) {
		t.Fatalf("a %d-byte file with a pool: %v, stdout %q", len(big), err, res.Stdout)
	}

	job.Collect = []string{"out"}
	_, err = tier.Run(context.Background(), job)
	var inv *airlock.InvalidJob
	if !errors.As(err, &inv) || inv.Field != "files" {
		t.Errorf("a %d-byte file for the agent: %v, want an invalid job on files", len(big), err)
	}

	s, err := tier.OpenSession(context.Background(), airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	job.Collect = nil
	if _, err := s.Run(context.Background(), job); !errors.As(err, &inv) || inv.Field != "files" {
		t.Errorf("a %d-byte file in a session: %v, want an invalid job on files", len(big), err)
	}
	if res, err := s.Run(context.Background(), cmdJob("echo", "on")); err != nil || res.Stdout != "on\n" {
		t.Errorf("the session after the refusal: %v %+v", err, res)
	}
}
