package wasm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/airlock-sandbox/airlock"
)

// WASI errno values (preview 1) the probe tests expect.
const (
	wasiESUCCESS = 0
	wasiEBADF    = 8
	wasiEEXIST   = 20
	wasiEINVAL   = 28
	wasiEISDIR   = 31
	wasiENOENT   = 44
	wasiENOTDIR  = 54
	wasiEPERM    = 63
)

// probeCase is one call of an export of testdata/wasiprobe.wat: its
// arguments, the paths it reads from stdin (one per line), and the result
// WASI requires.
type probeCase struct {
	export string
	args   []string
	paths  []string
	want   int64
}

func (c probeCase) String() string {
	return fmt.Sprintf("%s(%s) %q", c.export, strings.Join(c.args, ","), c.paths)
}

// probeTier runs a probe case through the tier, with files as the job's
// files (the scratch at "/").
func probeTier(t *testing.T, tier *Tier, files map[string]string, c probeCase) int64 {
	t.Helper()
	res, err := tier.Run(context.Background(), airlock.Job{
		Kind:   airlock.KindWasm,
		Module: watFile(t, filepath.Join("testdata", "wasiprobe.wat")),
		Entry:  c.export,
		Argv:   c.args,
		Stdin:  strings.Join(c.paths, "\n"),
		Files:  files,
	})
	if err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	return res.Value.(int64)
}

// probeRaw runs a probe case on raw wazero with the same files in a host
// directory preopened at "/": the host file system's answer, which the
// scratch should give too.
func probeRaw(t *testing.T, files map[string]string, c probeCase) int64 {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(content), 0o644))
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	mod, err := rt.InstantiateWithConfig(ctx, watFile(t, filepath.Join("testdata", "wasiprobe.wat")),
		wazero.NewModuleConfig().
			WithStdin(strings.NewReader(strings.Join(c.paths, "\n"))).
			WithFSConfig(wazero.NewFSConfig().WithDirMount(dir, "/")))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close(ctx)
	params := make([]uint64, len(c.args))
	for i, a := range c.args {
		var n int32
		if _, err := fmt.Sscan(a, &n); err != nil {
			t.Fatal(err)
		}
		params[i] = uint64(uint32(n))
	}
	out, err := mod.ExportedFunction(c.export).Call(ctx, params...)
	if err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	return int64(int32(out[0]))
}

// TestWASITrailingSlash: a path ending in "/" names a directory, so on a
// regular file path_open, path_filestat_get and path_unlink_file answer
// ENOTDIR, and the unlink leaves the file alone.
func TestWASITrailingSlash(t *testing.T) {
	tier := newTier(t, NewConfig())
	files := map[string]string{"file": "x", "dir/inner": "y"}
	for _, c := range []probeCase{
		{"open", []string{"0"}, []string{"file/"}, wasiENOTDIR},
		{"open", []string{"0"}, []string{"dir/inner/"}, wasiENOTDIR},
		{"open", []string{"0"}, []string{"dir/"}, wasiESUCCESS},
		{"open", []string{"0"}, []string{"missing/"}, wasiENOENT},
		{"open", []string{"1"}, []string{"new/"}, wasiEISDIR}, // O_CREAT of a directory name
		{"stat", nil, []string{"file/"}, wasiENOTDIR},
		{"stat", nil, []string{"dir/"}, wasiESUCCESS},
		{"stat", nil, []string{"file"}, wasiESUCCESS},
		// 100 * unlink's errno + stat's errno of the file afterwards.
		{"unlink", nil, []string{"file/", "file"}, wasiENOTDIR * 100},
		{"unlink", nil, []string{"dir/", "dir"}, wasiEISDIR * 100},
		{"unlink", nil, []string{"file", "file"}, wasiENOENT},
	} {
		if got := probeTier(t, tier, files, c); got != c.want {
			t.Errorf("tier %v = %d, want %d", c, got, c.want)
		}
		if got := probeRaw(t, files, c); got != c.want {
			t.Errorf("raw wazero on a host directory %v = %d, want %d", c, got, c.want)
		}
	}
	// path_rename reaches the file system the same way (the probe has no
	// export for it).
	m := newMemFS(1<<20, 0)
	must(t, m.put("file", []byte("x")))
	must(t, m.put("dir/inner", []byte("y")))
	for _, c := range []struct {
		from, to string
		want     sys.Errno
	}{
		{"file/", "other", sys.ENOTDIR},
		{"file", "other/", sys.ENOTDIR},
		{"dir/", "dir2/", 0},
		{"file", "other", 0},
	} {
		if errno := m.Rename(c.from, c.to); errno != c.want {
			t.Errorf("rename %q %q: %v, want %v", c.from, c.to, errno, c.want)
		}
	}
}

// TestWASIDotFromDot: a directory opened as "." is the preopen itself, and
// "." from it is that directory again (wazero joins the two names).
func TestWASIDotFromDot(t *testing.T) {
	tier := newTier(t, NewConfig())
	files := map[string]string{"file": "x", "dir/inner": "y"}
	for _, c := range []probeCase{
		{"open_in_dot", []string{"2"}, []string{"."}, wasiESUCCESS}, // O_DIRECTORY
		{"open_in_dot", []string{"0"}, []string{"."}, wasiESUCCESS},
		{"open_in_dot", []string{"2"}, []string{"./"}, wasiESUCCESS},
		{"open_in_dot", []string{"0"}, []string{"file"}, wasiESUCCESS},
		{"open_in_dot", []string{"0"}, []string{"dir/inner"}, wasiESUCCESS},
		{"open_in_dot", []string{"0"}, []string{"missing"}, wasiENOENT},
	} {
		if got := probeTier(t, tier, files, c); got != c.want {
			t.Errorf("tier %v = %d, want %d", c, got, c.want)
		}
		if got := probeRaw(t, files, c); got != c.want {
			t.Errorf("raw wazero on a host directory %v = %d, want %d", c, got, c.want)
		}
	}
}

// TestWASILinks: the scratch has no links, and says so as POSIX does for a
// file system without them (EPERM), but only once the arguments are
// valid: a bad descriptor, a missing source, an existing target, a missing
// directory or a non-directory with a trailing slash answer as on a host
// file system, and readlink of anything answers EINVAL (not a link) or
// ENOENT.
func TestWASILinks(t *testing.T) {
	tier := newTier(t, NewConfig())
	files := map[string]string{"file": "x", "dir/inner": "y"}
	for _, c := range []struct {
		probeCase
		host bool // the host's answer is the same (links exist there)
	}{
		{probeCase{"link", []string{"3", "3"}, []string{"file", "link"}, wasiEPERM}, false},
		{probeCase{"link", []string{"3", "3"}, []string{"file", "dir/link"}, wasiEPERM}, false},
		{probeCase{"link", []string{"3", "3"}, []string{"dir", "link"}, wasiEPERM}, true},
		{probeCase{"link", []string{"9", "3"}, []string{"file", "link"}, wasiEBADF}, true},
		{probeCase{"link", []string{"3", "9"}, []string{"file", "link"}, wasiEBADF}, true},
		{probeCase{"link", []string{"3", "3"}, []string{"missing", "link"}, wasiENOENT}, true},
		{probeCase{"link", []string{"3", "3"}, []string{"file/", "link"}, wasiENOTDIR}, true},
		{probeCase{"link", []string{"3", "3"}, []string{"file", "file"}, wasiEEXIST}, true},
		{probeCase{"link", []string{"3", "3"}, []string{"file", "dir"}, wasiEEXIST}, true},
		{probeCase{"link", []string{"3", "3"}, []string{"file", "."}, wasiEEXIST}, true},
		{probeCase{"link", []string{"3", "3"}, []string{"file", "link/"}, wasiENOENT}, true},
		{probeCase{"link", []string{"3", "3"}, []string{"file", "missing/link"}, wasiENOENT}, true},
		{probeCase{"link", []string{"3", "3"}, []string{"file", "file/link"}, wasiENOTDIR}, true},
		{probeCase{"symlink", []string{"3"}, []string{"target", "link"}, wasiEPERM}, false},
		{probeCase{"symlink", []string{"3"}, []string{"/etc/passwd", "dir/link"}, wasiEPERM}, false},
		{probeCase{"symlink", []string{"9"}, []string{"target", "link"}, wasiEBADF}, true},
		{probeCase{"symlink", []string{"3"}, []string{"target", "file"}, wasiEEXIST}, true},
		{probeCase{"symlink", []string{"3"}, []string{"target", "dir"}, wasiEEXIST}, true},
		{probeCase{"symlink", []string{"3"}, []string{"target", "missing/link"}, wasiENOENT}, true},
		{probeCase{"symlink", []string{"3"}, []string{"target", "file/link"}, wasiENOTDIR}, true},
		{probeCase{"readlink", nil, []string{"file"}, wasiEINVAL}, true},
		{probeCase{"readlink", nil, []string{"dir"}, wasiEINVAL}, true},
		{probeCase{"readlink", nil, []string{"missing"}, wasiENOENT}, true},
	} {
		if got := probeTier(t, tier, files, c.probeCase); got != c.want {
			t.Errorf("tier %v = %d, want %d", c.probeCase, got, c.want)
		}
		if !c.host {
			continue
		}
		if got := probeRaw(t, files, c.probeCase); got != c.want {
			t.Errorf("raw wazero on a host directory %v = %d, want %d", c.probeCase, got, c.want)
		}
	}
}

// TestJobEnv: a job's env is the guest's environment, beside its secrets,
// and leaves the job hermetic.
func TestJobEnv(t *testing.T) {
	tier := newTier(t, NewConfig())
	job := airlock.Job{Kind: airlock.KindWasm, Module: guest(t), Argv: []string{"env", "MODE"},
		Env: map[string]string{"MODE": "plain", "EMPTY": ""}}
	if !job.Grants.Hermetic() {
		t.Fatal("a job with only env is not hermetic")
	}
	res, err := tier.Run(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if want := "EMPTY=\nMODE=plain\ncanary: plain\n"; res.Stdout != want {
		t.Errorf("stdout %q, want %q", res.Stdout, want)
	}
	job.Grants.Secrets = map[string]string{"TOKEN": "s"}
	if res, err = tier.Run(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if want := "EMPTY=\nMODE=plain\nTOKEN=s\ncanary: plain\n"; res.Stdout != want {
		t.Errorf("with a secret: stdout %q, want %q", res.Stdout, want)
	}
	job.Grants.Secrets = map[string]string{"MODE": "s"}
	var inv *airlock.InvalidJob
	if _, err := tier.Run(context.Background(), job); !errors.As(err, &inv) {
		t.Errorf("a name in env and in grants.secrets: want InvalidJob, got %v", err)
	}
}

// TestWASIPwriteHugeOffset: fd_pwrite at an offset whose end does not fit
// in an int64 answers an errno, not a Go panic in the scratch.
func TestWASIPwriteHugeOffset(t *testing.T) {
	tier := newTier(t, NewConfig())
	res, err := tier.Run(context.Background(), airlock.Job{
		Kind: airlock.KindWasm,
		Module: wat(t, `(module
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_pwrite" (func $pwrite (param i32 i32 i32 i64 i32) (result i32)))
  (memory 1)
  (data (i32.const 0) "a")
  (func (export "go") (result i32)
    (if (call $open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 1) (i64.const -1) (i64.const -1) (i32.const 0) (i32.const 100))
      (then (return (i32.const -1))))
    (i32.store (i32.const 200) (i32.const 300))
    (i32.store (i32.const 204) (i32.const 16))
    (call $pwrite (i32.load (i32.const 100)) (i32.const 200) (i32.const 1) (i64.const 0x7ffffffffffffffb) (i32.const 400))))`),
		Entry: "go",
		Files: map[string]string{"x": "y"},
	})
	if err != nil {
		t.Fatalf("fd_pwrite at 2^63-5: %v", err)
	}
	if errno := res.Value.(int64); errno == wasiESUCCESS || errno == -1 {
		t.Fatalf("fd_pwrite at 2^63-5 answered %d", errno)
	}
}
