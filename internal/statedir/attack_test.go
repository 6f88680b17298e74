//go:build unix

package statedir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// A local user (nobody, a real uid) acts in a shared temporary directory
// before root's airlock first makes its state directory there. Whatever
// that user prepared is refused with one line naming the path, and root
// makes nothing where the user's link leads.
func TestPreparedByAnotherUser(t *testing.T) {
	tmp := testenv.SharedTmp(t)
	// A directory of root's that a link could lead root's airlock to: its
	// real path passes every check.
	roots := filepath.Join(filepath.Dir(tmp), "roots")
	if err := os.Mkdir(roots, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, script, dir, want string
	}{
		{"their directory", `mkdir -m 700 "$1/airlock-gvisor"`, "airlock-gvisor", "belongs to uid 65534"},
		{"their open directory", `mkdir "$1/airlock-gvisor"; chmod 777 "$1/airlock-gvisor"`, "airlock-gvisor", "belongs to uid 65534"},
		{"a link to root's directory", `ln -s "$2" "$1/airlock-process"`, "airlock-process", "is a symbolic link"},
		{"a dangling link", `ln -s "$1/later" "$1/airlock-microvm"`, "airlock-microvm", "is a symbolic link"},
		{"a link above", `ln -s "$2" "$1/airlock"`, "airlock/images", "is a symbolic link"},
		{"their directory above", `mkdir -m 755 "$1/airlock"`, "airlock/images", "belongs to uid 65534"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(tmp, c.dir)
			testenv.AsNobody(t, c.script, tmp, roots)
			t.Cleanup(func() {
				os.RemoveAll(filepath.Join(tmp, strings.Split(c.dir, "/")[0]))
				os.RemoveAll(filepath.Join(tmp, "later"))
				ents, _ := os.ReadDir(roots)
				for _, e := range ents {
					os.RemoveAll(filepath.Join(roots, e.Name()))
				}
			})
			_, err := Ensure(dir, 0o700)
			if !IsRefused(err) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Ensure(%s): %v; want one line with %q", dir, err, c.want)
			}
			ents, _ := os.ReadDir(roots)
			if len(ents) > 0 {
				t.Errorf("root made %s in its directory the link led to", ents[0].Name())
			}
			if _, err := os.Lstat(filepath.Join(tmp, "later")); err == nil {
				t.Error("root made the dangling link's target")
			}
			if strings.Contains(c.dir, "/") {
				if _, err := os.Lstat(dir); err == nil {
					t.Errorf("root made %s below what nobody prepared", dir)
				}
			}
		})
	}
	// What nobody did not touch, root makes and uses.
	if _, err := Ensure(filepath.Join(tmp, "airlock-gvisor"), 0o700); err != nil {
		t.Errorf("a state directory in a clean shared directory: %v", err)
	}
}

// A file airlock trusts (a program it runs, an account's record) reached
// through a link of another user's is refused, though the file it leads
// to is root's: the name could lead elsewhere once checked. So is one
// that is itself such a link.
func TestFileThroughAnotherUsersLink(t *testing.T) {
	tmp := testenv.SharedTmp(t)
	roots := filepath.Join(filepath.Dir(tmp), "roots")
	if err := os.Mkdir(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(roots, "airlock-full")
	if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := File(f); err != nil {
		t.Fatalf("root's own file: %v", err)
	}
	testenv.AsNobody(t, `ln -s "$2" "$1/bin"; ln -s "$2/airlock-full" "$1/airlock-full"`, tmp, roots)
	if p := filepath.Join(tmp, "bin", "airlock-full"); true {
		if err := File(p); !IsRefused(err) || !strings.Contains(err.Error(), "bin is a symbolic link of uid 65534") {
			t.Errorf("File(%s): %v", p, err)
		}
	}
	// Directly in the shared directory, its directory is at fault first.
	if p := filepath.Join(tmp, "airlock-full"); true {
		if err := File(p); !IsRefused(err) {
			t.Errorf("File(%s): %v", p, err)
		}
	}
}
