package wasm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

func runGuest(t *testing.T, tier *Tier, fs airlock.FSGrant, argv ...string) airlock.Result {
	t.Helper()
	job := airlock.Job{Kind: airlock.KindWasm, Module: guest(t), Argv: argv, Grants: airlock.Grants{FS: fs}}
	if err := tier.Admit(job); err != nil {
		t.Fatalf("admit: %v", err)
	}
	res, err := tier.Run(context.Background(), job)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return res
}

func TestReadGrantAtGuestPath(t *testing.T) {
	tier := newTier(t, NewConfig())
	dir, _ := tiertest.GrantTree(t)
	fs := airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: "/data"}}
	if res := runGuest(t, tier, fs, "read", "/data/sub/data.txt"); res.Stdout != "granted\n" {
		t.Errorf("read at guest path: %+v", res)
	}
	// Not at its host path any more.
	if res := runGuest(t, tier, fs, "read", filepath.Join(dir, "sub", "data.txt")); res.ExitCode == 0 {
		t.Errorf("grant still readable at its host path: %q", res.Stdout)
	}
	// Escapes stay contained: '..' and a link pointing out.
	for _, p := range []string{"/data/../data/out", "/data/out", "/data/sub/../../secret"} {
		if res := runGuest(t, tier, fs, "read", p); res.ExitCode == 0 || strings.Contains(res.Stdout, "SECRET") {
			t.Errorf("read %s escaped: %+v", p, res)
		}
	}
	// At "/", the preopen wasi-libc and Rust programs look for.
	root := airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: "/"}}
	if res := runGuest(t, tier, root, "read", "/sub/data.txt"); res.Stdout != "granted\n" {
		t.Errorf("read at /: %+v", res)
	}
}

func TestReadGrantAtRootNeedsNoScratch(t *testing.T) {
	tier := newTier(t, NewConfig())
	dir, _ := tiertest.GrantTree(t)
	job := airlock.Job{Kind: airlock.KindWasm, Module: []byte{0}, Files: map[string]string{"a": "b"},
		Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: "/"}}}}
	var na *airlock.NotAdmitted
	if err := tier.Admit(job); !errors.As(err, &na) || !strings.Contains(na.Reason, "scratch") {
		t.Fatalf("grant at / with files: %v", err)
	}
}

func TestCopyGrantIsWritable(t *testing.T) {
	tier := newTier(t, NewConfig())
	dir, secret := tiertest.GrantTree(t)
	fs := airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: "/work"}, Copy: []string{dir}}
	if res := runGuest(t, tier, fs, "write", "/work/sub/data.txt", "changed"); res.Stdout != "changed\n" || res.ExitCode != 0 {
		t.Errorf("write into the copy: %+v", res)
	}
	if res := runGuest(t, tier, fs, "read", "/work/sub/data.txt"); res.Stdout != "granted\n" {
		t.Errorf("copy not fresh per run: %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "data.txt")); string(b) != "granted\n" {
		t.Errorf("host file changed: %q", b)
	}
	if res := runGuest(t, tier, fs, "read", "/work/out"); res.ExitCode == 0 || strings.Contains(res.Stdout, "SECRET") {
		t.Errorf("link out of the copy followed: %+v", res)
	}
	if b, _ := os.ReadFile(secret); string(b) != "SECRET\n" {
		t.Errorf("secret changed: %q", b)
	}
	// Copied at its own path when no guest path is given.
	own := airlock.FSGrant{Read: []string{dir}, Copy: []string{dir}}
	if res := runGuest(t, tier, own, "write", filepath.Join(dir, "new.txt"), "x"); res.Stdout != "x\n" {
		t.Errorf("write into the copy at its own path: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.txt")); err == nil {
		t.Error("the copy's new file reached the host")
	}
}

func TestCopyGrantOverScratch(t *testing.T) {
	tier := newTier(t, NewConfig())
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	job := airlock.Job{Kind: airlock.KindWasm, Module: guest(t), Argv: []string{"hello"},
		Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{dir}, Copy: []string{dir}, ScratchMB: 1}}}
	_, err := tier.Run(context.Background(), job)
	var inv *airlock.InvalidJob
	if !errors.As(err, &inv) || inv.Field != "grants.fs.copy" || !strings.Contains(inv.Reason, "scratch") {
		t.Fatalf("copy over scratch_mb: %v", err)
	}
}

// A WASI program that, as wasi-libc does, reads its first preopen finds a
// read grant placed at "/" there.
func TestPreopenAtRoot(t *testing.T) {
	tier := newTier(t, NewConfig())
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("from the grant"), 0o644); err != nil {
		t.Fatal(err)
	}
	job := airlock.Job{Kind: airlock.KindWasm, Module: watFile(t, filepath.Join("testdata", "preopen.wat")),
		Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: "/"}}}}
	res, err := tier.Run(context.Background(), job)
	if err != nil || res.ExitCode != 0 || res.Stdout != "/\nfrom the grant" {
		t.Fatalf("preopen at /: %v %+v", err, res)
	}
	// Without a guest path the first preopen is the grant's host path.
	job.Grants.FS.At = nil
	res, err = tier.Run(context.Background(), job)
	if err != nil || res.Stdout != dir+"\nfrom the grant" {
		t.Fatalf("preopen at the host path: %v %+v", err, res)
	}
}

// A grant shows a WASM job what a user with no claim on its files may
// read, as the OS tiers' unprivileged sandbox users see it, whichever user
// airlock runs as: not a file only its owner may read, nor anything in a
// directory others may not enter; a copy leaves both out.
func TestGrantShowsWhatOthersMayRead(t *testing.T) {
	tier := newTier(t, NewConfig())
	dir, _ := tiertest.GrantTree(t) // holds "private", mode 0600
	closed := filepath.Join(dir, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(closed, "open.txt"), []byte("CLOSED\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, fs := range []airlock.FSGrant{
		{Read: []string{dir}, At: map[string]string{dir: "/data"}},
		{Read: []string{dir}, At: map[string]string{dir: "/data"}, Copy: []string{dir}},
	} {
		if res := runGuest(t, tier, fs, "read", "/data/x"); res.Stdout != "granted\n" {
			t.Errorf("a file others may read (copy %v): %+v", fs.Copy != nil, res)
		}
		for _, p := range []string{"/data/private", "/data/closed/open.txt"} {
			if res := runGuest(t, tier, fs, "read", p); res.ExitCode == 0 || strings.Contains(res.Stdout, "PRIVATE") || strings.Contains(res.Stdout, "CLOSED") {
				t.Errorf("read %s (copy %v): %+v", p, fs.Copy != nil, res)
			}
		}
	}
	// A copy of a directory the job could not list is refused.
	job := airlock.Job{Kind: airlock.KindWasm, Module: guest(t), Argv: []string{"hello"},
		Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{closed}, Copy: []string{closed}}}}
	_, err := tier.Run(context.Background(), job)
	var inv *airlock.InvalidJob
	if !errors.As(err, &inv) || !strings.Contains(inv.Reason, "could not list it") {
		t.Fatalf("copy of a closed directory: %v", err)
	}
}

// A copy grant reads no more of a file than still fits in the scratch: a
// huge file is refused without being read into the host's memory.
func TestCopyGrantReadsNoMoreThanFits(t *testing.T) {
	tier := newTier(t, NewConfig())
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "huge"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(256 << 20); err != nil { // sparse: nothing on disk
		t.Fatal(err)
	}
	f.Close()
	job := airlock.Job{Kind: airlock.KindWasm, Module: guest(t), Argv: []string{"hello"},
		Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{dir}, Copy: []string{dir}, ScratchMB: 1}}}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = tier.Run(context.Background(), job)
	runtime.ReadMemStats(&after)
	var inv *airlock.InvalidJob
	if !errors.As(err, &inv) || !strings.Contains(inv.Reason, "does not fit") {
		t.Fatalf("copy of a 256 MiB file into 1 MiB: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("refusing the copy allocated %d MiB", grew>>20)
	}
}
