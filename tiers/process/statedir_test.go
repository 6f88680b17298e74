package process

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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

// A local user (nobody) who links the default base directory's name in a
// shared temporary directory to a directory of root's, before root's
// airlock first runs, is refused: the tier used the name, which the user
// could point at a directory of their own once it had been checked.
func TestLinkedBaseDirRefused(t *testing.T) {
	newTestTier(t, bothTiers[0], testConfig(t)) // skips where the tier cannot run at all
	tmp := testenv.SharedTmp(t)
	roots := filepath.Join(filepath.Dir(tmp), "roots")
	if err := os.Mkdir(roots, 0o711); err != nil {
		t.Fatal(err)
	}
	testenv.AsNobody(t, `ln -s "$2" "$1/airlock-process"`, tmp, roots)
	t.Setenv("TMPDIR", tmp)
	tier, err := New(testConfig(t).WithBaseDir(NewConfig().baseDir))
	if err == nil {
		tier.Close()
	}
	if !statedir.IsRefused(err) || !strings.Contains(err.Error(), "airlock-process is a symbolic link") {
		t.Errorf("a base directory another user linked: %v", err)
	}
}
