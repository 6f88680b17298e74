//go:build unix

package wasm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/hostpath"
)

// TestGrantSpecialFiles: opening a named pipe blocks until a writer comes,
// in a system call the run's wall clock cannot interrupt, and a device
// can block a read the same way; a grant shows only regular files and
// directories, so a pipe someone left in a granted directory neither
// holds a run past its deadline nor reaches the host's devices.
func TestGrantSpecialFiles(t *testing.T) {
	tier := newTier(t, NewConfig())
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0o755))
	fifo := filepath.Join(dir, "pipe")
	must(t, syscall.Mkfifo(fifo, 0o666))
	must(t, os.Chmod(fifo, 0o666))
	done := make(chan airlock.Result, 1)
	go func() {
		job := airlock.Job{Kind: airlock.KindWasm, Module: guest(t), Argv: []string{"read", dir + "/pipe"},
			Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{dir}}}, Limits: airlock.Limits{WallMS: 2000}}
		res, _ := tier.Run(context.Background(), job)
		done <- res
	}()
	select {
	case res := <-done:
		if res.ExitCode == 0 || !strings.Contains(strings.ToLower(res.Stdout), "permission denied") {
			t.Fatalf("reading a pipe in a grant: %+v", res)
		}
	case <-time.After(20 * time.Second):
		// Still blocked long after its wall clock: let it go, and fail.
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		<-done
		t.Fatal("a run opening a pipe in a grant was still blocked 20 s after its 2 s wall clock")
	}
}

// TestGrantThroughLink: a read grant named through a symbolic link, once
// resolved as every caller resolves grants (hostpath), is found at the
// path it was named by.
func TestGrantThroughLink(t *testing.T) {
	tier := newTier(t, NewConfig())
	base, err := os.MkdirTemp("/var/tmp", "airlock-link-") // not under /tmp: see hostpath
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	must(t, os.Mkdir(filepath.Join(base, "data"), 0o755))
	must(t, os.WriteFile(filepath.Join(base, "data", "f.txt"), []byte("through the link"), 0o644))
	link := filepath.Join(base, "link")
	must(t, os.Symlink("data", link))
	roots, err := hostpath.NewRoots([]string{link}, nil)
	must(t, err)
	job := airlock.Job{Kind: airlock.KindWasm, Module: guest(t), Argv: []string{"read", link + "/f.txt"},
		Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{link}}}}
	must(t, roots.ResolveFS(&job.Grants.FS))
	res, err := tier.Run(context.Background(), job)
	must(t, err)
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "through the link") {
		t.Fatalf("reading through the link's path: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}
