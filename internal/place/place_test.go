//go:build linux

package place

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var opts = Options{FileMode: 0o644, DirMode: 0o755}

func put(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRefusals: each thing an earlier job can leave in a scratch refuses
// the whole placement with a one-line error naming the file; nothing it
// points at changes, and no other file of the placement is written.
func TestRefusals(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, scratch, outside string)
		place string
		want  string
	}{
		{"link as the final name", func(t *testing.T, s, _ string) {
			put(t, filepath.Join(s, "run.sh"), "intact")
			os.Symlink("run.sh", filepath.Join(s, "data.txt"))
		}, "data.txt", "data.txt is a symbolic link"},
		{"link as a parent directory", func(t *testing.T, s, _ string) {
			os.Mkdir(filepath.Join(s, "real"), 0o755)
			put(t, filepath.Join(s, "real/x.txt"), "intact")
			os.Symlink("real", filepath.Join(s, "lib"))
		}, "lib/x.txt", "lib is a symbolic link"},
		{"link deeper on the way", func(t *testing.T, s, o string) {
			os.MkdirAll(filepath.Join(s, "a/b"), 0o755)
			os.Symlink(o, filepath.Join(s, "a/b/c"))
		}, "a/b/c/d/x.txt", "a/b/c is a symbolic link"},
		{"dangling link", func(t *testing.T, s, o string) {
			os.Symlink(filepath.Join(o, "made.txt"), filepath.Join(s, "data.txt"))
		}, "data.txt", "data.txt is a symbolic link"},
		{"link to a file outside", func(t *testing.T, s, o string) {
			os.Symlink(filepath.Join(o, "outside.txt"), filepath.Join(s, "data.txt"))
		}, "data.txt", "data.txt is a symbolic link"},
		{"link to a directory outside", func(t *testing.T, s, o string) {
			os.Symlink(o, filepath.Join(s, "lib"))
		}, "lib/outside.txt", "lib is a symbolic link"},
		{"hard link to a file outside", func(t *testing.T, s, o string) {
			if err := os.Link(filepath.Join(o, "outside.txt"), filepath.Join(s, "data.txt")); err != nil {
				t.Fatal(err)
			}
		}, "data.txt", "data.txt is a hard link (2 names share the file)"},
		{"hard link in the scratch", func(t *testing.T, s, _ string) {
			put(t, filepath.Join(s, "run.sh"), "intact")
			os.Link(filepath.Join(s, "run.sh"), filepath.Join(s, "data.txt"))
		}, "data.txt", "data.txt is a hard link"},
		{"fifo where a file is expected", func(t *testing.T, s, _ string) {
			if err := unix.Mkfifo(filepath.Join(s, "data.txt"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "data.txt", "data.txt exists and is not a regular file (a FIFO)"},
		{"directory where a file is expected", func(t *testing.T, s, _ string) {
			os.Mkdir(filepath.Join(s, "data.txt"), 0o755)
		}, "data.txt", "data.txt exists and is not a regular file (a directory)"},
		{"file where a directory is needed", func(t *testing.T, s, _ string) {
			put(t, filepath.Join(s, "lib"), "intact")
		}, "lib/x.txt", "lib is not a directory (a regular file)"},
		{"fifo where a directory is needed", func(t *testing.T, s, _ string) {
			unix.Mkfifo(filepath.Join(s, "lib"), 0o644)
		}, "lib/x.txt", "lib is not a directory (a FIFO)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			scratch, outside := t.TempDir(), t.TempDir()
			put(t, filepath.Join(outside, "outside.txt"), "intact")
			c.setup(t, scratch, outside)
			before := snapshot(t, scratch)
			// aa.txt sorts before the refused name, zz/z.txt after it.
			files := map[string]string{"aa.txt": "NEW", c.place: "NEW", "zz/z.txt": "NEW"}
			err := Files(scratch, files, opts)
			want := "placing file " + c.place + ": " + c.want
			if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("want %q..., got %v", want, err)
			}
			var r *Refused
			if !errors.As(err, &r) {
				t.Errorf("%v is not a *Refused", err)
			}
			if after := snapshot(t, scratch); after != before {
				t.Errorf("the scratch changed:\nbefore %s\nafter  %s", before, after)
			}
			if got := snapshot(t, outside); got != "outside.txt=intact;" {
				t.Errorf("outside the scratch: %s", got)
			}
		})
	}
}

// snapshot lists what is under dir (without following links), with the
// content of regular files and the targets of links.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b.WriteString(rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			b.WriteString("->" + l)
		case d.IsDir():
			b.WriteString("/")
		case d.Type().IsRegular():
			b.WriteString("=" + readFile(t, p))
		default:
			b.WriteString(" " + d.Type().String())
		}
		b.WriteString(";")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestNames: names that are not clean and relative, or where one file is
// placed as another's directory, are refused before anything is written.
func TestNames(t *testing.T) {
	for _, files := range []map[string]string{
		{"a.txt": "x", "../escape": "y"},
		{"a.txt": "x", "/abs": "y"},
		{"a.txt": "x", "b//c": "y"},
		{"a.txt": "x", "b/./c": "y"},
		{"a.txt": "x", ".": "y"},
		{"a.txt": "x", "": "y"},
		{"a.txt": "x", "lib": "y", "lib/x.txt": "z"},
	} {
		scratch := t.TempDir()
		if err := Files(scratch, files, opts); err == nil || !strings.HasPrefix(err.Error(), "placing file ") {
			t.Errorf("%q: want a refusal, got %v", files, err)
		}
		if got := snapshot(t, scratch); got != "" {
			t.Errorf("%q: the refused placement wrote %s", files, got)
		}
	}
}

// TestWrites: files and the directories they need are made with the
// given modes; a regular file already there is truncated and rewritten
// (keeping its mode), in directories that already exist.
func TestWrites(t *testing.T) {
	scratch := t.TempDir()
	old := unix.Umask(0o022)
	defer unix.Umask(old)
	os.Mkdir(filepath.Join(scratch, "lib"), 0o700)
	if err := os.WriteFile(filepath.Join(scratch, "lib/old.txt"), []byte("a much longer old content"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Files(scratch, map[string][]byte{"run.sh": []byte("echo hi\n"), "lib/old.txt": []byte("new"), "a/b/c.txt": {}}, Options{FileMode: 0o755, DirMode: 0o751})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := snapshot(t, scratch), "a/;a/b/;a/b/c.txt=;lib/;lib/old.txt=new;run.sh=echo hi\n;"; got != want {
		t.Errorf("placed %q, want %q", got, want)
	}
	for p, want := range map[string]fs.FileMode{"run.sh": 0o755, "a": 0o751 | fs.ModeDir, "a/b": 0o751 | fs.ModeDir, "lib/old.txt": 0o600, "lib": 0o700 | fs.ModeDir} {
		if st, err := os.Lstat(filepath.Join(scratch, p)); err != nil || st.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, st.Mode(), err, want)
		}
	}
	// A second placement of the same names (a session's next job) works.
	if err := Files(scratch, map[string]string{"run.sh": "echo again\n", "a/b/c.txt": "c"}, opts); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(scratch, "run.sh")) + readFile(t, filepath.Join(scratch, "a/b/c.txt")); got != "echo again\nc" {
		t.Errorf("rewritten: %q", got)
	}
	if err := Files(scratch, map[string]string(nil), opts); err != nil {
		t.Errorf("no files: %v", err)
	}
}

// TestOwner: with an owner, the files written and the directories made
// are chowned; directories that were there keep their owner.
func TestOwner(t *testing.T) {
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 12345, 23456
	}
	scratch := t.TempDir()
	os.Mkdir(filepath.Join(scratch, "kept"), 0o755)
	o := opts
	o.Owner = &Owner{uid, gid}
	if err := Files(scratch, map[string]string{"kept/new/x.txt": "x", "y.txt": "y"}, o); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string][2]int{
		"kept":           {os.Getuid(), os.Getgid()},
		"kept/new":       {uid, gid},
		"kept/new/x.txt": {uid, gid},
		"y.txt":          {uid, gid},
	} {
		st, err := os.Lstat(filepath.Join(scratch, p))
		if err != nil {
			t.Fatal(err)
		}
		s := st.Sys().(*syscall.Stat_t)
		if int(s.Uid) != want[0] || int(s.Gid) != want[1] {
			t.Errorf("%s: owner %d:%d, want %d:%d", p, s.Uid, s.Gid, want[0], want[1])
		}
	}
}

// TestSwapAfterCheck: what appears between the check and the write (a
// link, a FIFO, a hard link) is refused by the write itself, never
// followed, and never blocks.
func TestSwapAfterCheck(t *testing.T) {
	cases := []struct {
		name  string
		swap  func(t *testing.T, s, o string)
		place string
		want  string
	}{
		{"link as the final name", func(t *testing.T, s, o string) {
			os.Symlink(filepath.Join(o, "outside.txt"), filepath.Join(s, "data.txt"))
		}, "data.txt", "data.txt is a symbolic link"},
		{"link as a parent directory", func(t *testing.T, s, o string) {
			os.Symlink(o, filepath.Join(s, "lib"))
		}, "lib/outside.txt", "lib is a symbolic link"},
		{"hard link", func(t *testing.T, s, o string) {
			os.Link(filepath.Join(o, "outside.txt"), filepath.Join(s, "data.txt"))
		}, "data.txt", "data.txt is a hard link"},
		{"fifo", func(t *testing.T, s, _ string) {
			unix.Mkfifo(filepath.Join(s, "data.txt"), 0o644)
		}, "data.txt", "data.txt exists and is not a regular file (a FIFO)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			scratch, outside := t.TempDir(), t.TempDir()
			put(t, filepath.Join(outside, "outside.txt"), "intact")
			root, err := unix.Open(scratch, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(root)
			files := map[string]string{c.place: "NEW"}
			if err := check(root, c.place, files); err != nil {
				t.Fatalf("check before the swap: %v", err)
			}
			c.swap(t, scratch, outside)
			done := make(chan error, 1)
			go func() { done <- write(root, c.place, []byte("NEW"), opts) }()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the write blocked")
			}
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("want %q..., got %v", c.want, err)
			}
			if got := snapshot(t, outside); got != "outside.txt=intact;" {
				t.Errorf("outside the scratch: %s", got)
			}
		})
	}
}
