package wasm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/experimental/sys"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

func TestReplayIsByteForByte(t *testing.T) {
	tier := newTier(t, NewConfig())
	g := guest(t)
	ctx := context.Background()
	job := airlock.Job{Kind: airlock.KindWasm, Module: g, Argv: []string{"time"}}
	first, err := tier.Run(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	// Replaying with the recorded clock and seed gives the same bytes.
	job.Clock, job.Seed = first.Clock, first.Seed
	again, err := tier.Run(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	if first.Stdout != again.Stdout {
		t.Fatalf("replay differs:\n%q\n%q", first.Stdout, again.Stdout)
	}
	if !strings.HasPrefix(first.Stdout, first.Clock.Format("2006-01-02T15:04:05")) {
		t.Fatalf("time %q is not the recorded clock %v", first.Stdout, first.Clock)
	}
	// Another seed changes the random number; the times stay on the pinned
	// clock (a few ticks apart: the Go runtime's own clock reads depend on
	// its random state).
	job.Seed++
	other, err := tier.Run(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	a, b := strings.Fields(first.Stdout), strings.Fields(other.Stdout)
	if a[0][:19] != b[0][:19] || a[2] == b[2] {
		t.Fatalf("seed %d vs %d: %q vs %q", first.Seed, job.Seed, first.Stdout, other.Stdout)
	}
}

func TestEntryFunction(t *testing.T) {
	tier := newTier(t, NewConfig())
	add := corpusWAT(t, "add")
	ctx := context.Background()
	res, err := tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: add, Entry: "add", Argv: []string{"40", "2"}})
	if err != nil || res.Value != int64(42) {
		t.Fatalf("add via argv: %v %#v", err, res.Value)
	}
	for name, job := range map[string]airlock.Job{
		"missing export":   {Entry: "sub", Argv: []string{"1", "2"}},
		"too few args":     {Entry: "add", Argv: []string{"1"}},
		"not a number":     {Entry: "add", Argv: []string{"1", "x"}},
		"float for an i64": {Entry: "add", Input: map[string]any{"args": []any{1.5, int64(2)}}},
		"args not a list":  {Entry: "add", Input: map[string]any{"args": "1 2"}},
		"no _start":        {},
	} {
		job.Kind, job.Module = airlock.KindWasm, add
		_, err := tier.Run(ctx, job)
		var inv *airlock.InvalidJob
		if !errors.As(err, &inv) {
			t.Errorf("%s: want *airlock.InvalidJob, got %T %v", name, err, err)
		}
	}
}

func TestAdmit(t *testing.T) {
	tier := newTier(t, NewConfig())
	for name, job := range map[string]airlock.Job{
		"other kind":  {Kind: airlock.KindExpr, Code: "1"},
		"spawn":       {Kind: airlock.KindWasm, Grants: airlock.Grants{Spawn: true}},
		"session":     {Kind: airlock.KindWasm, Lifecycle: airlock.LifecycleSession, Session: "s"},
		"/proc grant": {Kind: airlock.KindWasm, Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{"/proc/self"}}}},
		"root grant":  {Kind: airlock.KindWasm, Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{"/"}}}},
		"/sys grant":  {Kind: airlock.KindWasm, Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{"/sys"}}}},
		"/dev/ grant": {Kind: airlock.KindWasm, Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{"/dev/shm"}}}},
	} {
		var na *airlock.NotAdmitted
		if err := tier.Admit(job); !errors.As(err, &na) || na.Tier != Name {
			t.Errorf("%s: want *airlock.NotAdmitted, got %v", name, err)
		}
	}
	ok := airlock.Job{Kind: airlock.KindWasm, Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{"/usr/share"}}}}
	if err := tier.Admit(ok); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = tier.Admit(ok) }); n != 0 {
		t.Fatalf("Admit allocates %v times on success", n)
	}
}

func TestModuleRefusals(t *testing.T) {
	ctx := context.Background()
	small := newTier(t, NewConfig().WithMaxModuleBytes(1000))
	_, err := small.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: guest(t)})
	var st *airlock.Stop
	if !errors.As(err, &st) || st.Reason != airlock.StopMemory || !strings.Contains(st.Detail, "cap of 1000") {
		t.Fatalf("oversized module: %v", err)
	}
	tier := newTier(t, NewConfig())
	for name, mod := range map[string][]byte{
		"garbage":         []byte("#!/bin/sh\necho pwned\n"),
		"truncated":       corpusWAT(t, "add")[:20],
		"bad version":     append([]byte("\x00asm\x02\x00\x00\x00"), corpusWAT(t, "add")[8:]...),
		"section overrun": []byte("\x00asm\x01\x00\x00\x00\x04\xff\xff\xff\xff\x0f\x01"),
	} {
		_, err := tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: mod})
		if airlock.KindOf(err) != airlock.ErrCompile {
			t.Errorf("%s: want a compile error, got %T %v", name, err, err)
		}
	}
	_, err = tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: guest(t), Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{"/no/such/dir"}}}})
	if airlock.KindOf(err) != airlock.ErrInvalid {
		t.Fatalf("missing grant dir: %v", err)
	}
	_, err = tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: guest(t), Grants: airlock.Grants{FS: airlock.FSGrant{ScratchMB: 1}}, Files: map[string]string{"big": strings.Repeat("x", 2<<20)}})
	if airlock.KindOf(err) != airlock.ErrInvalid {
		t.Fatalf("files larger than the scratch: %v", err)
	}
}

func TestCompileTimeout(t *testing.T) {
	tier := newTier(t, NewConfig().WithCompileTimeout(time.Nanosecond))
	_, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindWasm, Module: guest(t)})
	var st *airlock.Stop
	if !errors.As(err, &st) || st.Reason != airlock.StopTimeout || !strings.Contains(st.Detail, "compiling") {
		t.Fatalf("want a compile timeout, got %v", err)
	}
}

// TestCompilesAreBounded: a compile cannot be interrupted, so callers
// that give up (at the compile timeout, or cancelled) must not leave
// compiles of distinct modules piling up behind them: at most one per
// CPU runs at once, and one that every caller gave up on before it
// started never runs.
func TestCompilesAreBounded(t *testing.T) {
	tier := newTier(t, NewConfig().WithCompileTimeout(time.Millisecond))
	e := tier.e
	// Every slot taken: no compile can start.
	for range cap(e.slots) {
		e.slots <- struct{}{}
	}
	for i := range 20 {
		mod := wat(t, fmt.Sprintf(`(module (func (export "f") (result i32) (i32.const %d)))`, i))
		_, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindWasm, Module: mod, Entry: "f"})
		var st *airlock.Stop
		if !errors.As(err, &st) || st.Reason != airlock.StopTimeout {
			t.Fatalf("module %d with no compile slot free: %v", i, err)
		}
	}
	for range cap(e.slots) {
		<-e.slots
	}
	e.compiles.Wait()
	e.mu.Lock()
	n, pending := e.lru.Len(), len(e.inflight)
	e.mu.Unlock()
	if n != 0 || pending != 0 {
		t.Fatalf("%d modules compiled and %d pending after every caller gave up before they started", n, pending)
	}
	// The engine still compiles for a caller that waits.
	fresh := newTier(t, NewConfig())
	if _, err := fresh.Run(context.Background(), airlock.Job{Kind: airlock.KindWasm, Module: corpusWAT(t, "add"), Entry: "add", Argv: []string{"1", "2"}}); err != nil {
		t.Fatal(err)
	}
}

func TestCompiledCacheIsBounded(t *testing.T) {
	tier := newTier(t, NewConfig().WithMaxCompiled(2))
	ctx := context.Background()
	mods := [][]byte{corpusWAT(t, "add"), corpusWAT(t, "clock"), corpusWAT(t, "random"), corpusWAT(t, "add")}
	entries := []string{"add", "reads", "rand", "add"}
	for i, m := range mods {
		job := airlock.Job{Kind: airlock.KindWasm, Module: m, Entry: entries[i]}
		if entries[i] == "add" {
			job.Argv = []string{"1", "2"}
		}
		if _, err := tier.Run(ctx, job); err != nil {
			t.Fatalf("module %d: %v", i, err)
		}
		tier.e.mu.Lock()
		n := tier.e.lru.Len()
		tier.e.mu.Unlock()
		if n > 2 {
			t.Fatalf("%d compiled modules cached, cap 2", n)
		}
	}
}

func TestConfigIsImmutable(t *testing.T) {
	base := NewConfig()
	_ = base.WithMaxModuleBytes(1).WithCacheDir("/x").WithClockTick(time.Hour)
	if base.maxModuleBytes != DefaultMaxModuleBytes || base.cacheDir != "" || base.clockTick != DefaultClockTick {
		t.Fatal("a With method changed its receiver")
	}
	for name, cfg := range map[string]Config{
		"zero module bytes": base.WithMaxModuleBytes(0),
		"zero compile time": base.WithCompileTimeout(0),
		"zero table":        base.WithMaxTableElements(0),
		"zero cache":        base.WithMaxCompiled(0),
		"negative tick":     base.WithClockTick(-1),
	} {
		if _, err := New(cfg); airlock.KindOf(err) != airlock.ErrInvalid {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestInspectTables(t *testing.T) {
	// (table 2 10 funcref) keeps its own maximum; (table 0 funcref) gets
	// what is left of the cap, which all tables share; a minimum above the
	// cap is refused.
	mod := wat(t, `(module (table 0 funcref) (table 2 10 funcref) (memory 3))`)
	out, info, err := inspect(mod, 100)
	if err != nil {
		t.Fatal(err)
	}
	if info.memMinPages != 3 || info.tableMin != 2 {
		t.Fatalf("info %+v", info)
	}
	_, info2, err := inspect(out, 100)
	if err != nil || info2 != info {
		t.Fatalf("rewritten module does not re-read: %v %+v", err, info2)
	}
	lims := tableLimits(t, out)
	if len(lims) != 2 || !lims[0].hasMax || lims[0].max != 90 || lims[1].max != 10 {
		t.Fatalf("rewritten tables %+v", lims)
	}
	var te *tableError
	if _, _, err := inspect(mod, 1); !errors.As(err, &te) {
		t.Fatalf("minimum 2 above cap 1: %v", err)
	}
	// Tables within the cap one by one, but not together: their minimums
	// are refused, and their maximums are cut to what is left, in order.
	if _, _, err := inspect(wat(t, `(module (table 60 funcref) (table 60 funcref))`), 100); !errors.As(err, &te) {
		t.Fatalf("minimums 60 + 60 above cap 100: %v", err)
	}
	out, _, err = inspect(wat(t, `(module (table 10 80 funcref) (table 10 80 funcref) (table 0 funcref))`), 100)
	if err != nil {
		t.Fatal(err)
	}
	if lims := tableLimits(t, out); len(lims) != 3 || lims[0].max != 80 || lims[1].max != 20 || lims[2].max != 0 {
		t.Fatalf("rewritten tables %+v", lims)
	}
	if _, _, err := inspect([]byte("\x00asm\x01\x00\x00\x00\x04\x05\x01\x70\x01\x02\x01"), 100); err == nil {
		t.Fatal("a maximum below the minimum was accepted")
	}
	in := wat(t, `(module (table 1 5 funcref))`)
	unchanged, _, err := inspect(in, 100)
	if err != nil || &unchanged[0] != &in[0] {
		t.Fatalf("a module within the caps was copied or refused: %v", err)
	}
}

func tableLimits(t *testing.T, mod []byte) []limits {
	t.Helper()
	for off := 8; off < len(mod); {
		size, n, _ := uleb(mod[off+1:])
		body := mod[off+1+n : off+1+n+int(size)]
		if mod[off] == sectionTable {
			l, err := readLimits(body, true)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		off += 1 + n + int(size)
	}
	return nil
}

func FuzzInspect(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x04\x04\x01\x70\x00\x00"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x05\x03\x01\x00\x01"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x04\xff\xff\xff\xff\x0f\x01"))
	f.Add(localsModule(2, 3))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x08\x01\x00\x0a\x06\x01\x04\x00\x10\x00\x0b"))
	f.Fuzz(func(t *testing.T, mod []byte) {
		out, _, err := inspect(mod, 1000)
		if err != nil {
			return
		}
		// A rewritten module inspects again to the same bytes.
		again, _, err := inspect(out, 1000)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not idempotent: %v", err)
		}
		// The call-stack guard reads whatever inspect lets through
		// without panicking, and what it writes is sections all the way.
		if guarded, ok, err := guardStack(out); err == nil && ok {
			if _, _, err := guardStack(guarded); err != nil && !strings.Contains(err.Error(), "reserves") {
				t.Fatalf("guarded module does not parse: %v", err)
			}
		}
	})
}

func TestMemFS(t *testing.T) {
	m := newMemFS(1100, 0)
	must(t, m.put("dir/a.txt", []byte("hello")))
	if errno := m.Mkdir("dir/sub", 0o755); errno != 0 {
		t.Fatal(errno)
	}
	f, errno := m.OpenFile("dir/sub/b", sys.O_CREAT|sys.O_RDWR, 0o644)
	if errno != 0 {
		t.Fatal(errno)
	}
	if n, errno := f.Write([]byte("0123456789")); n != 10 || errno != 0 {
		t.Fatal(n, errno)
	}
	if _, errno := f.Seek(2, io.SeekStart); errno != 0 {
		t.Fatal(errno)
	}
	buf := make([]byte, 3)
	if n, _ := f.Read(buf); string(buf[:n]) != "234" {
		t.Fatalf("read %q", buf[:n])
	}
	// The size cap: 3 nodes, their names and 15 bytes of contents are
	// charged against 1100; 100 more bytes do not fit.
	if _, errno := f.Write(make([]byte, 100)); errno != errNoSpace {
		t.Fatalf("write past the cap: %v", errno)
	}
	if errno := f.Truncate(1000); errno != errNoSpace {
		t.Fatalf("truncate past the cap: %v", errno)
	}
	if errno := m.Rename("dir/sub/b", "dir/c"); errno != 0 {
		t.Fatal(errno)
	}
	if errno := m.Rename("dir", "dir/sub/inside"); errno != sys.EINVAL {
		t.Fatalf("moving a directory into itself: %v", errno)
	}
	d, _ := m.OpenFile("dir", sys.O_RDONLY, 0)
	ents, _ := d.Readdir(-1)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "a.txt,c,sub" {
		t.Fatalf("readdir %v", names)
	}
	if errno := m.Rmdir("dir"); errno != sys.ENOTEMPTY {
		t.Fatalf("rmdir non-empty: %v", errno)
	}
	if errno := f.Close(); errno != 0 { // an open file's contents stay charged
		t.Fatal(errno)
	}
	if errno := m.Unlink("dir/c"); errno != 0 {
		t.Fatal(errno)
	}
	if want := int64(3*nodeCost + len("dir") + len("a.txt") + len("sub") + 5); m.used != want {
		t.Fatalf("used %d after unlink, want %d", m.used, want)
	}
	// Empty files are charged too: creating them runs out.
	full := false
	for i := 0; i < 10 && !full; i++ {
		_, errno := m.OpenFile(fmt.Sprintf("empty-%d", i), sys.O_CREAT|sys.O_WRONLY, 0o644)
		full = errno == errNoSpace
	}
	if !full {
		t.Fatal("ten empty files fit in what remains of 1100 bytes")
	}
	// No way out and no links.
	for _, p := range []string{"../x", "dir/../../x", "/../x"} {
		if _, errno := m.OpenFile(p, sys.O_RDONLY, 0); errno == 0 {
			t.Errorf("%s opened", p)
		}
	}
	if errno := m.Symlink("/etc/passwd", "dir/link"); errno != sys.EPERM {
		t.Fatalf("symlink: %v", errno)
	}
	if errno := m.Link("dir/a.txt", "dir/hard"); errno != sys.EPERM {
		t.Fatalf("link: %v", errno)
	}
	if st, errno := m.Stat("dir"); errno != 0 || !st.Mode.IsDir() || st.Mode&fs.ModePerm != 0o755 {
		t.Fatalf("stat dir: %v %v", st.Mode, errno)
	}
	if _, errno := m.OpenFile("dir/a.txt", sys.O_CREAT|sys.O_EXCL|sys.O_WRONLY, 0o644); errno != sys.EEXIST {
		t.Fatalf("O_EXCL on an existing file: %v", errno)
	}
}

func TestCacheDirMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0o777))
	if _, err := New(NewConfig().WithCacheDir(dir)); airlock.KindOf(err) != airlock.ErrInvalid {
		t.Fatalf("world-writable cache accepted: %v", err)
	}
	// Below a directory others may write (without the sticky bit), the
	// cache could be replaced whole.
	if _, err := New(NewConfig().WithCacheDir(filepath.Join(dir, "cache"))); airlock.KindOf(err) != airlock.ErrInvalid {
		t.Fatalf("cache below a world-writable directory accepted: %v", err)
	}
	must(t, os.Chmod(dir, 0o700))
	tier, err := New(NewConfig().WithCacheDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	_ = tier.Close()
	// A cache directory another user made.
	if _, err := New(NewConfig().WithCacheDir(testenv.ForeignDir(t))); airlock.KindOf(err) != airlock.ErrInvalid {
		t.Fatalf("another user's cache directory accepted: %v", err)
	}
}

func TestNonFunctionImportsRefused(t *testing.T) {
	tier := newTier(t, NewConfig())
	for kind, src := range map[string]string{
		"global": `(module (import "env" "g" (global i32)) (func (export "_start")))`,
		"table":  `(module (import "airlock" "t" (table 1 funcref)) (func (export "_start")))`,
		"memory": `(module (import "env" "memory" (memory 1)) (func (export "_start")))`,
	} {
		_, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindWasm, Module: wat(t, src)})
		var ce *airlock.ErrorInfo
		if !errors.As(err, &ce) || ce.Kind != airlock.ErrCompile || !strings.Contains(ce.Message, "imports "+kind) {
			t.Errorf("%s import: %T %v", kind, err, err)
		}
	}
	_, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindWasm, Module: wat(t, `(module (func (export "_start") unreachable))`)})
	var ce *airlock.ErrorInfo
	if !errors.As(err, &ce) || ce.Kind != airlock.ErrRuntime || !strings.Contains(ce.Message, "unreachable") {
		t.Fatalf("trap: %T %v", err, err)
	}
}

// TestMemFSUnlinkedOpenFile: a file removed (or renamed over) while open
// stays charged until its last descriptor closes, so that truncating it
// through the descriptor cannot give the scratch back twice and let a
// guest hold more than the cap.
func TestMemFSUnlinkedOpenFile(t *testing.T) {
	const limit = 4096
	for _, how := range []string{"unlink", "rename"} {
		m := newMemFS(limit, 0)
		f, errno := m.OpenFile("a", sys.O_CREAT|sys.O_RDWR, 0o644)
		if errno != 0 {
			t.Fatal(errno)
		}
		if _, errno := f.Write(make([]byte, 2048)); errno != 0 {
			t.Fatal(how, errno)
		}
		switch how {
		case "unlink":
			errno = m.Unlink("a")
		case "rename":
			must(t, m.put("b", nil))
			errno = m.Rename("b", "a")
		}
		if errno != 0 {
			t.Fatal(how, errno)
		}
		if errno := f.Truncate(0); errno != 0 {
			t.Fatal(how, errno)
		}
		if _, errno := f.Pwrite(make([]byte, 2048), 0); errno != 0 {
			t.Fatal(how, errno)
		}
		g, errno := m.OpenFile("c", sys.O_CREAT|sys.O_RDWR, 0o644)
		if errno != 0 {
			t.Fatal(how, errno)
		}
		if _, errno := g.Write(make([]byte, 2048)); errno != errNoSpace {
			t.Fatalf("%s: 2 KiB open but unlinked plus 2 KiB more fit in %d bytes (used %d)", how, limit, m.used)
		}
		if errno := f.Close(); errno != 0 {
			t.Fatal(how, errno)
		}
		if _, errno := g.Write(make([]byte, 2048)); errno != 0 {
			t.Fatalf("%s: the closed file's bytes were not given back: %v (used %d)", how, errno, m.used)
		}
	}
}

// TestMemFSRenameCharged: a rename to a longer name is charged like any
// name, so renaming many short names to long ones cannot push the scratch
// past its cap.
func TestMemFSRenameCharged(t *testing.T) {
	m := newMemFS(nodeCost+10, 0)
	must(t, m.put("a", nil))
	if errno := m.Rename("a", strings.Repeat("n", 200)); errno != errNoSpace {
		t.Fatalf("rename past the cap: %v (used %d of %d)", errno, m.used, m.limit)
	}
	if errno := m.Rename("a", "short"); errno != 0 {
		t.Fatal(errno)
	}
	if m.used != nodeCost+5 {
		t.Fatalf("used %d", m.used)
	}
}

// TestMemFSRefusedRenameGivesNothingBack: a rename refused for moving a
// directory into itself leaves the count as it was, even when its target
// exists.
func TestMemFSRefusedRenameGivesNothingBack(t *testing.T) {
	m := newMemFS(1<<20, 0)
	must(t, m.putDir("d/sub/x"))
	before := m.used
	for i := 0; i < 3; i++ {
		if errno := m.Rename("d", "d/sub/x"); errno != sys.EINVAL {
			t.Fatalf("moving a directory into itself: %v", errno)
		}
	}
	if m.used != before {
		t.Fatalf("used %d after refused renames, was %d", m.used, before)
	}
}

// TestMemFSHugeOffset: a write at an offset whose end does not fit in an
// int64 is refused, not a slice panic.
func TestMemFSHugeOffset(t *testing.T) {
	m := newMemFS(1<<20, 0)
	f, errno := m.OpenFile("a", sys.O_CREAT|sys.O_RDWR, 0o644)
	if errno != 0 {
		t.Fatal(errno)
	}
	for _, off := range []int64{math.MaxInt64 - 4, math.MaxInt64} {
		if _, errno := f.Pwrite(make([]byte, 16), off); errno == 0 {
			t.Fatalf("pwrite at %d succeeded", off)
		}
	}
	if _, errno := f.Seek(math.MaxInt64-4, io.SeekStart); errno == 0 {
		if _, errno := f.Write(make([]byte, 16)); errno == 0 {
			t.Fatal("write past the largest offset succeeded")
		}
	}
}

// TestMemFSReaddirBatches: a directory read in batches lists each entry
// once, in order, leaves out one removed during the pass, and a seek to
// its start begins a new pass that sees the entries added since.
func TestMemFSReaddirBatches(t *testing.T) {
	m := newMemFS(1<<20, 0)
	for _, n := range []string{"e", "a", "d", "c", "b"} {
		must(t, m.put("dir/"+n, nil))
	}
	d, errno := m.OpenFile("dir", sys.O_RDONLY, 0)
	if errno != 0 {
		t.Fatal(errno)
	}
	read := func(n int) string {
		ents, errno := d.Readdir(n)
		if errno != 0 {
			t.Fatal(errno)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name)
		}
		return strings.Join(names, ",")
	}
	if got := read(2); got != "a,b" {
		t.Fatalf("first batch %q", got)
	}
	if errno := m.Unlink("dir/c"); errno != 0 {
		t.Fatal(errno)
	}
	must(t, m.put("dir/bb", nil))
	if got := read(2); got != "d,e" {
		t.Fatalf("second batch %q (c was removed; bb came after the pass began)", got)
	}
	if got := read(2); got != "" {
		t.Fatalf("past the end %q", got)
	}
	if _, errno := d.Seek(0, io.SeekStart); errno != 0 {
		t.Fatal(errno)
	}
	if got := read(-1); got != "a,b,bb,d,e" {
		t.Fatalf("a new pass %q", got)
	}
}

// localsModule is a module of n functions, each declaring locals i32
// locals in a body of a few bytes.
func localsModule(n int, locals uint32) []byte {
	m := []byte("\x00asm\x01\x00\x00\x00")
	section := func(id byte, body []byte) {
		m = append(m, id)
		m = binary.AppendUvarint(m, uint64(len(body)))
		m = append(m, body...)
	}
	section(1, []byte{1, 0x60, 0, 0}) // type 0: [] -> []
	funcs := binary.AppendUvarint(nil, uint64(n))
	for range n {
		funcs = append(funcs, 0)
	}
	section(3, funcs)
	body := append(binary.AppendUvarint([]byte{1}, uint64(locals)), 0x7f, 0x0b) // (local i32 × locals) end
	code := binary.AppendUvarint(nil, uint64(n))
	for range n {
		code = binary.AppendUvarint(code, uint64(len(body)))
		code = append(code, body...)
	}
	section(10, code)
	return m
}

// TestLocalsAreBounded: wazero's decoder expands a function's declared
// locals into one byte each before validating anything, so a body of a
// few bytes declaring 2^32-1 locals costs the host gigabytes (100 million
// took 3 GB and 17 s). Such modules are refused before wazero sees them:
// one function above the per-function limit, and many functions each
// within it but together above the module's. (Larger counts are refused
// the same way; the test keeps to counts that a regression would survive.)
func TestLocalsAreBounded(t *testing.T) {
	ctx := context.Background()
	tier := newTier(t, NewConfig())
	for name, mod := range map[string][]byte{
		"one function":   localsModule(1, maxFunctionLocals+1),
		"many functions": localsModule(minModuleLocals/40000+1, 40000),
	} {
		_, err := tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: mod, Entry: "none"})
		if airlock.KindOf(err) != airlock.ErrCompile || !strings.Contains(err.Error(), "locals") {
			t.Errorf("%s (%d bytes): want a compile error about locals, got %v", name, len(mod), err)
		}
	}
	// Within both bounds: compiled (and then refused for its entry).
	_, err := tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: localsModule(2, maxFunctionLocals), Entry: "none"})
	if airlock.KindOf(err) != airlock.ErrInvalid {
		t.Fatalf("a module within the bounds: %v", err)
	}
}

// TestMemFSTruncateFrees: a file truncated after a write gives its bytes
// back to the scratch, so the memory behind them must be freed too: many
// files each written to the whole scratch and truncated to nothing hold
// no more than the scratch's size.
func TestMemFSTruncateFrees(t *testing.T) {
	const limit = 1 << 20
	m := newMemFS(limit, 0)
	for i := range 64 {
		f, errno := m.OpenFile(fmt.Sprint("f", i), sys.O_CREAT|sys.O_RDWR, 0o644)
		if errno != 0 {
			t.Fatal(errno)
		}
		if _, errno := f.Write(make([]byte, limit/2)); errno != 0 {
			t.Fatal(i, errno)
		}
		for _, size := range []int64{1, 0} {
			if errno := f.Truncate(size); errno != 0 {
				t.Fatal(errno)
			}
		}
		must(t, errnoErr(f.Close()))
	}
	var held int
	for _, n := range m.root.children {
		held += cap(n.data)
	}
	if held > limit {
		t.Fatalf("files truncated to nothing hold %d bytes of a %d-byte scratch", held, limit)
	}
}

func errnoErr(e sys.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

// TestExitCodesAreTheGuests: wazero ends a run whose context is done with
// two reserved exit codes; a guest passing those values to proc_exit
// itself exits with them like with any other code, rather than ending in
// a runtime error about a context that never ended.
func TestExitCodesAreTheGuests(t *testing.T) {
	tier := newTier(t, NewConfig())
	for _, code := range []uint32{1, 256, 0xefffffff, 0xffffffff} {
		mod := wat(t, fmt.Sprintf(`(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory 1)
  (func (export "_start") (call $exit (i32.const %d))))`, int32(code)))
		res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindWasm, Module: mod})
		if err != nil || res.ExitCode != int(int32(code)) {
			t.Errorf("proc_exit(%#x): exit code %d, %v", code, res.ExitCode, err)
		}
	}
}

// The scratch is held in the airlock process's memory: a job may not ask
// for more of it than limits.memory_mb (1 TiB of scratch_mb would let a
// guest fill the host's memory), whether the router asks or the tier is
// run directly.
func TestScratchWithinMemory(t *testing.T) {
	tier := newTier(t, NewConfig())
	def := airlock.DefaultLimitPolicy().Default.MemoryMB
	big := airlock.Job{Kind: airlock.KindWasm, Module: guest(t), Grants: airlock.Grants{FS: airlock.FSGrant{ScratchMB: def + 1}}}
	var na *airlock.NotAdmitted
	if err := tier.Admit(big); !errors.As(err, &na) || !strings.Contains(na.Reason, "limits.memory_mb") {
		t.Errorf("scratch_mb above the default memory: %v", err)
	}
	if _, err := tier.Run(context.Background(), big); !errors.As(err, &na) {
		t.Errorf("run with scratch_mb above memory_mb: %v", err)
	}
	big.Limits.MemoryMB = def + 1
	if err := tier.Admit(big); err != nil {
		t.Errorf("scratch_mb within memory_mb: %v", err)
	}
	if _, err := tier.Run(context.Background(), big); err != nil {
		t.Errorf("run with scratch_mb within memory_mb: %v", err)
	}
}

// TestDefaultCacheDirWithoutHome: a user whose cache directory cannot be
// made (a home that does not exist, as for nobody) gets no on-disk cache,
// and the tier still runs; a cache directory that exists but is unsafe is
// still named, for the tier to refuse.
func TestDefaultCacheDirWithoutHome(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(blocker, nil, 0o600))
	gone := filepath.Join(blocker, "home") // below a file: no one can make it
	t.Setenv(CacheDirEnv, "")
	for _, v := range []string{"XDG_CACHE_HOME", "HOME", "LocalAppData"} {
		t.Setenv(v, gone)
	}
	if d := DefaultCacheDir(); d != "" {
		t.Fatalf("DefaultCacheDir() = %q under a home that cannot exist; want none", d)
	}
	tier, err := New(NewConfig().WithCacheDir(DefaultCacheDir()))
	if err != nil {
		t.Fatalf("no user's cache directory: the tier is not built: %v", err)
	}
	_ = tier.Close()

	if runtime.GOOS == "windows" {
		return
	}
	base := t.TempDir()
	for _, v := range []string{"XDG_CACHE_HOME", "HOME", "LocalAppData"} {
		t.Setenv(v, base)
	}
	d := DefaultCacheDir()
	if d == "" {
		t.Fatal("DefaultCacheDir() is empty with a usable home")
	}
	if _, err := os.Stat(d); err == nil {
		t.Error("DefaultCacheDir made the directory: choosing it has no side effect")
	}
	must(t, os.MkdirAll(d, 0o700))
	must(t, os.Chmod(d, 0o777))
	if _, err := New(NewConfig().WithCacheDir(DefaultCacheDir())); airlock.KindOf(err) != airlock.ErrInvalid {
		t.Fatalf("a world-writable default cache was accepted or dropped: %v", err)
	}
}
