package hostpath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestResolve(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	write(t, filepath.Join(root, "ok.txt"), "ok")
	write(t, filepath.Join(root, "keep", "key"), "key")
	write(t, filepath.Join(root, "keep", "key.20261206T000000.000000000Z"), "rotated")
	write(t, filepath.Join(root, "keep", "keyring"), "not kept")
	write(t, filepath.Join(outside, "secret"), "secret")
	for name, target := range map[string]string{"out": "../outside/secret", "in": "ok.txt", "dir": "."} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	// A root named through a link is the directory it names.
	if err := os.Symlink(root, filepath.Join(base, "alias")); err != nil {
		t.Fatal(err)
	}
	r, err := NewRoots([]string{filepath.Join(base, "alias")}, []string{filepath.Join(root, "keep", "key"), filepath.Join(base, "not-yet")})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		grant, want, deny string
	}{
		{grant: filepath.Join(root, "ok.txt"), want: filepath.Join(root, "ok.txt")},
		{grant: filepath.Join(base, "alias", "ok.txt"), want: filepath.Join(root, "ok.txt")},
		{grant: filepath.Join(root, "in"), want: filepath.Join(root, "ok.txt")},
		{grant: filepath.Join(root, "dir"), want: "", deny: "keeps"}, // the root itself holds a kept path
		{grant: filepath.Join(root, "out"), deny: "outside the read roots"},
		{grant: filepath.Join(outside, "secret"), deny: "outside the read roots"},
		{grant: filepath.Join(root, "keep"), deny: "keeps"},
		{grant: filepath.Join(root, "keep", "key"), deny: "keeps"},
		{grant: filepath.Join(root, "keep", "key.20261206T000000.000000000Z"), deny: "keeps"}, // a rotated audit file, say
		{grant: filepath.Join(root, "keep", "keyring"), want: filepath.Join(root, "keep", "keyring")},
		{grant: "/", deny: "keeps"},
	} {
		got, err := r.Resolve([]string{c.grant})
		var d *airlock.Denied
		switch {
		case c.deny != "":
			if !errors.As(err, &d) || d.Capability != "fs" || !strings.Contains(d.Detail, c.deny) {
				t.Errorf("%s: %v; want denied: fs mentioning %q", c.grant, err, c.deny)
			}
		case err != nil || len(got) != 1 || got[0] != c.want:
			t.Errorf("%s: %q, %v; want %s", c.grant, got, err, c.want)
		}
	}
	if _, err := r.Resolve([]string{filepath.Join(root, "missing")}); airlock.KindOf(err) != airlock.ErrInvalid {
		t.Errorf("a missing path: %v; want an invalid job", err)
	}
	var none Roots
	if _, err := none.Resolve([]string{filepath.Join(root, "ok.txt")}); err == nil || !strings.Contains(err.Error(), "no read roots") {
		t.Errorf("no roots: %v", err)
	}
}

func TestIdentity(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	write(t, p, "one")
	a, err := Identity(p)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := Identity(p); b != a {
		t.Errorf("the same file twice: %q, %q", a, b)
	}
	write(t, p, "two")
	if b, _ := Identity(p); b == a {
		t.Errorf("an edited file keeps its identity %q", a)
	}
	// Replaced by a link: no identity, and Open and Check refuse it.
	write(t, filepath.Join(dir, "g"), "two")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("g", p); err != nil {
		t.Fatal(err)
	}
	if id, err := Identity(p); err == nil {
		t.Errorf("a link has identity %q", id)
	}
	if err := Check(p); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Check of a link: %v", err)
	}
	if err := Check(filepath.Join(dir, "g")); err != nil {
		t.Errorf("Check of a file: %v", err)
	}
	d1, _ := Identity(dir)
	if !strings.HasPrefix(d1, "dir ") {
		t.Errorf("a directory's identity: %q", d1)
	}
}

func TestOpenRoot(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "d", "f"), "x")
	if err := os.Symlink("d", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRoot(filepath.Join(dir, "d"))
	if err != nil {
		t.Fatal(err)
	}
	if data, err := r.ReadFile("f"); err != nil || string(data) != "x" {
		t.Errorf("reading through the root: %q, %v", data, err)
	}
	r.Close()
	if r, err := OpenRoot(filepath.Join(dir, "l")); err == nil {
		r.Close()
		t.Error("a root opened through a link")
	}
}
