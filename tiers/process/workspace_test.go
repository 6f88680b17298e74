package process

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// One session at a time holds a workspace: a second one is refused while
// the first is open (its jobs could change the tree while the second
// takes it over), and opens once the first has closed.
func TestWorkspaceHeldByOneSession(t *testing.T) {
	tier := newTestTier(t, bothTiers[0], testConfig(t))
	ctx := context.Background()
	s1, err := tier.OpenSession(ctx, airlock.SessionOptions{Workspace: "held"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tier.OpenSession(ctx, airlock.SessionOptions{Workspace: "held"})
	var na *airlock.NotAdmitted
	if !errors.As(err, &na) || !strings.Contains(na.Reason, "workspace held is open in another session") {
		t.Fatalf("a second session of an open workspace: %v", err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := tier.OpenSession(ctx, airlock.SessionOptions{Workspace: "held"})
	if err != nil {
		t.Fatalf("the workspace after its session closed: %v", err)
	}
	s2.Close()
}

// Handing a workspace to a session's uid never reaches outside it, even
// while something swaps a directory of the tree for a link to a host
// directory under the walk (which a path-based walk follows).
func TestChownTreeStaysInside(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "chown to another user needs root")
	}
	victim := t.TempDir()
	host := filepath.Join(victim, "host.txt")
	must(t, os.WriteFile(host, []byte("x"), 0o644))
	ws := t.TempDir()
	sub := filepath.Join(ws, "sub")
	must(t, os.MkdirAll(filepath.Join(sub, "d"), 0o755))
	for _, name := range []string{"a", "b", "c"} {
		must(t, os.WriteFile(filepath.Join(sub, "d", name), nil, 0o644))
	}
	must(t, os.Symlink(victim, filepath.Join(sub, "alt")))
	// The swap: sub/d is now the directory, now the link, never absent.
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done }) // before TempDir's removal
	go func() {
		defer close(done)
		d, alt := filepath.Join(sub, "d"), filepath.Join(sub, "alt")
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE)
		}
	}()
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; i < 2000 && time.Now().Before(deadline); i++ {
		f, err := os.Open(ws)
		must(t, err)
		_ = chownTree(f, 65534) // an entry gone under the walk may fail it; what matters is where it reached
		f.Close()
		var st syscall.Stat_t
		must(t, syscall.Stat(host, &st))
		if st.Uid != 0 {
			t.Fatalf("after %d walks a host file outside the workspace belongs to uid %d", i+1, st.Uid)
		}
	}
	var st syscall.Stat_t
	for _, name := range []string{"d", "alt"} {
		must(t, syscall.Lstat(filepath.Join(sub, name), &st))
		if st.Uid != 65534 {
			t.Errorf("%s itself was not handed over (uid %d)", name, st.Uid)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
