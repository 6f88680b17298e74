package server

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/hostpath"
)

// grants.fs.at and grants.fs.copy follow grants.fs.read to the real path
// each grant names, so what is placed or copied is what was checked
// against the read roots; a link under a root to outside is still denied.
func TestFSPlacementFollowsRealPaths(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	real := filepath.Join(root, "data")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{"alias": real, "escape": outside} {
		if err := os.Symlink(to, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	roots, err := hostpath.NewRoots([]string{root}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tn := &tenant{roots: roots, limits: airlock.DefaultLimitPolicy(), allowed: []airlock.Situation{airlock.SituationPublic}, defSit: airlock.SituationPublic}
	alias := filepath.Join(root, "alias")
	job := airlock.Job{Kind: airlock.KindWasm, Module: []byte{0}, Grants: airlock.Grants{FS: airlock.FSGrant{
		Read: []string{alias}, At: map[string]string{alias: "/"}, Copy: []string{alias}}}}
	if err := tn.admit(&job); err != nil {
		t.Fatal(err)
	}
	realPath, _ := filepath.EvalSymlinks(real)
	if fs := job.Grants.FS; fs.Read[0] != realPath || fs.At[realPath] != "/" || len(fs.At) != 1 || fs.Copy[0] != realPath {
		t.Errorf("not rewritten to the real path %s: %+v", realPath, fs)
	}
	escape := filepath.Join(root, "escape")
	job = airlock.Job{Kind: airlock.KindWasm, Module: []byte{0}, Grants: airlock.Grants{FS: airlock.FSGrant{
		Read: []string{escape}, At: map[string]string{escape: "/data"}, Copy: []string{escape}}}}
	var denied *airlock.Denied
	if err := tn.admit(&job); !errors.As(err, &denied) {
		t.Errorf("a link out of the roots, placed and copied: %v", err)
	}
}
