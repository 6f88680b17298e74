package process

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/statedir"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// A base directory another user made is refused: its owner could replace
// the scratch and /etc directories the tier makes there with links.
func TestForeignBaseDirRefused(t *testing.T) {
	newTestTier(t, bothTiers[0], testConfig(t)) // skips where the tier cannot run at all
	tier, err := New(testConfig(t).WithBaseDir(testenv.ForeignDir(t)))
	if err == nil {
		tier.Close()
	}
	if !statedir.IsRefused(err) {
		t.Errorf("a tier in another user's directory: %v", err)
	}
}

// So is a workspace directory another user made: the tier hands its
// entries to sandbox users as root.
func TestForeignWorkspaceDirRefused(t *testing.T) {
	tier := newTestTier(t, bothTiers[0], testConfig(t).WithWorkspaceDir(testenv.ForeignDir(t)))
	s, err := tier.OpenSession(context.Background(), airlock.SessionOptions{Workspace: "w"})
	if err == nil {
		s.Close()
	}
	if !statedir.IsRefused(err) {
		t.Errorf("a workspace in another user's directory: %v", err)
	}
}
