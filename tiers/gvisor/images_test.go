package gvisor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/imagetest"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// hostOnly is a file the host has and a busybox image does not.
const hostOnly = "/usr/bin/python3"

// imageProbe prints what tells the image from the host and the root's
// state (the job may write /open and /etc/os-release as far as
// permissions go, see busybox: only the read-only root stops it): the
// image's marker, whether hostOnly exists, whether the root
// takes writes, whether the scratch does, the synthesised /etc files and
// the environment.
var imageProbe = cmdJob("sh", "-c", `
cat /etc/os-release
test -e `+hostOnly+` && echo HOST-VISIBLE
echo x >> /etc/os-release && echo ROOT-WRITABLE
echo x > /open/new && echo ROOT-WRITABLE
echo 192.0.2.1 evil >> /etc/hosts 2>/dev/null; grep -q evil /etc/hosts && echo HOSTS-WRITTEN
echo scratch-ok > /scratch/f && cat /scratch/f
echo tmp-ok > /tmp/f && cat /tmp/f
cat /etc/hostname
grep -c . /etc/passwd
echo "PATH=$PATH HOME=$HOME TMPDIR=$TMPDIR LANG=$LANG FROM_IMAGE=$FROM_IMAGE"
pwd
`)

// newImageTier builds a tier over a resolver serving two busybox images,
// "img-a" (the default, with FROM_IMAGE set and LANG overridden) and
// "img-b"; it checks, once the tier is closed, that every image acquired
// was released.
func newImageTier(t *testing.T, cfg Config) (*Tier, *imagetest.Resolver, [2]*image.Image) {
	t.Helper()
	if _, err := os.Stat(hostOnly); err != nil {
		t.Fatalf("the test needs a file only the host has: %v", err)
	}
	r := imagetest.New(t)
	a := r.Add("img-a", busybox(t, "image-a"), image.Config{Env: []string{"FROM_IMAGE=yes", "LANG=C"}, User: "1000", WorkingDir: "/root"})
	rootB := busybox(t, "image-b")
	// A link from /etc into a writable mount: the tier's file still
	// covers what it names.
	if err := os.Symlink("../scratch/hosts", filepath.Join(rootB, "etc", "hosts")); err != nil {
		t.Fatal(err)
	}
	b := r.Add("img-b", rootB, image.Config{})
	tier := newTier(t, cfg.WithImages(r))
	t.Cleanup(func() {
		// Registered after newTier's: runs first, so Close is called here.
		tier.Close()
		if n := r.Held(); n != 0 {
			t.Errorf("%d images still held after Close", n)
		}
	})
	return tier, r, [2]*image.Image{a, b}
}

// busybox is imagetest.Busybox with a world-writable /open and
// /etc/os-release, which only the root's being read-only protects.
func busybox(t *testing.T, marker string) string {
	root := imagetest.Busybox(t, marker)
	if err := os.Mkdir(filepath.Join(root, "open"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"open", "etc/os-release"} {
		if err := os.Chmod(filepath.Join(root, p), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func checkImageProbe(t *testing.T, res airlock.Result, err error, img *image.Image, marker string) {
	t.Helper()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v %+v", err, res)
	}
	out := res.Stdout
	for _, want := range []string{"ID=" + marker + "\n", "scratch-ok\n", "tmp-ok\n", "airlock\n", "/scratch\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"HOST-VISIBLE", "ROOT-WRITABLE", "HOSTS-WRITTEN"} {
		if strings.Contains(out, bad) {
			t.Errorf("stdout has %s:\n%s", bad, out)
		}
	}
	if n := strings.Count(res.Stderr, "Read-only file system"); n != 2 {
		t.Errorf("want both writes to the root refused as read-only, stderr:\n%s", res.Stderr)
	}
	// The tier's passwd (root and nobody), not the image's or the host's.
	if !strings.Contains(out, "\n2\n") {
		t.Errorf("/etc/passwd is not the tier's:\n%s", out)
	}
	wantEnv := "PATH=" + image.DefaultPATH + " HOME=/scratch TMPDIR=/tmp LANG=C.UTF-8 FROM_IMAGE="
	if marker == "image-a" {
		wantEnv = "PATH=" + image.DefaultPATH + " HOME=/scratch TMPDIR=/tmp LANG=C FROM_IMAGE=yes"
	}
	if !strings.Contains(out, wantEnv+"\n") {
		t.Errorf("environment: want %q in\n%s", wantEnv, out)
	}
	if res.Image != img.Digest {
		t.Errorf("Result.Image %q, want %q", res.Image, img.Digest)
	}
}

// TestImageCold runs jobs in sandboxes created for them, in each image.
func TestImageCold(t *testing.T) {
	tier, _, imgs := newImageTier(t, NewConfig())
	res, err := tier.Run(context.Background(), imageProbe)
	checkImageProbe(t, res, err, imgs[0], "image-a")
	job := imageProbe
	job.Image = "img-b"
	res, err = tier.Run(context.Background(), job)
	checkImageProbe(t, res, err, imgs[1], "image-b")
}

// TestImagePools keeps the default image's pool (1) and img-b's
// (WithImagePool, 2) warm and checks each job gets a sandbox of its own
// image, counted as its image's hit, leaving the other image's pool
// untouched.
func TestImagePools(t *testing.T) {
	tier, _, imgs := newImageTier(t, NewConfig().WithPool(1, 1).WithImagePool("img-b", 2))
	warm(t, tier)
	if k := tier.defaultKey(); k.digest != imgs[0].Digest {
		t.Fatalf("prewarmed key %q, want the default image's %q", k.digest, imgs[0].Digest)
	}
	sizes := []int{1, 2}
	st := tier.PoolStats()
	if st.Size != 3 || st.Ready != 3 || len(st.Images) != 2 {
		t.Fatalf("after WaitWarm: %+v, want 3 ready of 3 in two images' pools", st)
	}
	for i, img := range imgs {
		if s := st.Images[img.Digest]; s.Size != sizes[i] || s.Ready != sizes[i] {
			t.Errorf("image %s after WaitWarm: %+v, want %d ready of %d", img.Ref, s, sizes[i], sizes[i])
		}
	}
	for round := range 2 {
		warm(t, tier)
		// Image A first in one round, B first in the other.
		order := []int{0, 1}
		if round == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			job := imageProbe
			job.Image = imgs[i].Ref
			marker := []string{"image-a", "image-b"}[i]
			before := tier.PoolStats().Images
			res, err := tier.Run(context.Background(), job)
			checkImageProbe(t, res, err, imgs[i], marker)
			after := tier.PoolStats().Images
			mine, other := imgs[i].Digest, imgs[1-i].Digest
			if got, was := after[mine].Hits, before[mine].Hits; got != was+1 {
				t.Errorf("image %s: the job did not run in a pooled sandbox of its image (hits %d → %d)", imgs[i].Ref, was, got)
			}
			if a, b := after[other], before[other]; a.Hits != b.Hits || a.Misses != b.Misses || a.Ready != b.Ready || a.Size != b.Size {
				t.Errorf("image %s's job touched image %s's pool: %+v → %+v", imgs[i].Ref, imgs[1-i].Ref, before[other], after[other])
			}
		}
	}
	if st := tier.Stats(); st.Hits != 4 || st.Misses != 0 {
		t.Errorf("pool totals: %+v, want 4 hits and no miss", st)
	}
}

// TestImagePoolMovedName: img-b's name moves to a new image while its
// pool is warm. The next job naming it runs the new image, not a pooled
// sandbox of the old one; the pool follows the name, and PoolStats shows
// the name under the new digest only.
func TestImagePoolMovedName(t *testing.T) {
	tier, r, imgs := newImageTier(t, NewConfig().WithImagePool("img-b", 1))
	warm(t, tier)
	old := imgs[1]
	if st := tier.PoolStats().Images[old.Digest]; st.Ready != 1 || !slices.Equal(st.Names, []string{"img-b"}) {
		t.Fatalf("before the move: %+v; want 1 ready, named img-b", tier.PoolStats())
	}
	moved := r.Add("img-b", busybox(t, "image-b-new"), image.Config{})
	job := cmdJob("cat", "/etc/os-release")
	job.Image = "img-b"
	for i := range 2 {
		before := tier.PoolStats()
		res, err := tier.Run(context.Background(), job)
		if err != nil || !strings.Contains(res.Stdout, "ID=image-b-new\n") || res.Image != moved.Digest {
			t.Fatalf("job %d after the move: %v, stdout %q, Result.Image %q; want the new image %s", i, err, res.Stdout, res.Image, moved.Digest)
		}
		after := tier.PoolStats()
		// The first job finds no pool of the new image; the second, once
		// the pool has followed the name, claims from it.
		if hit := after.Hits == before.Hits+1; hit != (i == 1) {
			t.Errorf("job %d after the move: pool %+v → %+v; want a claim: %v", i, before, after, i == 1)
		}
		warm(t, tier)
	}
	st := tier.PoolStats()
	if _, ok := st.Images[old.Digest]; ok || st.Images[moved.Digest].Ready != 1 || !slices.Equal(st.Images[moved.Digest].Names, []string{"img-b"}) {
		t.Errorf("after the move: %+v; want 1 ready of %s named img-b, none of %s", st, moved.Digest, old.Digest)
	}
}

// TestImagePoolConfig refuses image pools New cannot keep.
func TestImagePoolConfig(t *testing.T) {
	r := imagetest.New(t)
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no store", NewConfig().WithImagePool("python", 1), "needs an image store"},
		{"negative", NewConfig().WithImages(r).WithImagePool("python", -1), "must not be negative"},
		{"no reference", NewConfig().WithImages(r).WithImagePool("", 1), "needs an image reference"},
	} {
		tier, err := New(c.cfg.WithDir(t.TempDir()))
		if err == nil {
			tier.Close()
			t.Errorf("%s: New accepted it", c.name)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// Configs are values: a pool set on a copy leaves the original alone.
	base := NewConfig().WithImagePool("a", 1)
	_ = base.WithImagePool("b", 1).WithImagePool("a", 0)
	if len(base.imgPools) != 1 || base.imgPools["a"] != 1 {
		t.Errorf("WithImagePool changed its receiver: %v", base.imgPools)
	}
}

// TestImageSession keeps the default image for the session's life.
func TestImageSession(t *testing.T) {
	tier, _, imgs := newImageTier(t, NewConfig())
	s, err := tier.OpenSession(context.Background(), airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Run(context.Background(), imageProbe)
	checkImageProbe(t, res, err, imgs[0], "image-a")
	job := imageProbe
	job.Image = "img-a"
	res, err = s.Run(context.Background(), job)
	checkImageProbe(t, res, err, imgs[0], "image-a")
	job.Image = "img-b"
	_, err = s.Run(context.Background(), job)
	var na *airlock.NotAdmitted
	if !errors.As(err, &na) {
		t.Errorf("a job of another image in the session: %v, want NotAdmitted", err)
	}
}

// TestImageRefused: an unknown image is the job's fault, reported in one
// line; without a resolver only the host view is admitted.
func TestImageRefused(t *testing.T) {
	tier, _, _ := newImageTier(t, NewConfig())
	job := cmdJob("true")
	job.Image = "no-such-image"
	res, err := tier.Run(context.Background(), job)
	var inv *airlock.InvalidJob
	if !errors.As(err, &inv) || inv.Field != "image" {
		t.Fatalf("unknown image: %v (%T), want InvalidJob on image", err, err)
	}
	if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "no-such-image") {
		t.Errorf("error %q: want one line naming the image", err)
	}
	if res.Error == nil {
		t.Errorf("result carries no error: %+v", res)
	}
	if _, err := tier.Run(context.Background(), func() airlock.Job { j := cmdJob("true"); j.Image = image.Host; return j }()); !errors.As(err, &inv) {
		t.Errorf("host view not enabled: %v, want InvalidJob", err)
	}

	plain := newTier(t, NewConfig())
	job.Image = "img-a"
	var na *airlock.NotAdmitted
	if err := plain.Admit(job); !errors.As(err, &na) || !strings.Contains(err.Error(), "no image store") {
		t.Errorf("Admit without a store: %v", err)
	}
	if _, err := plain.Run(context.Background(), job); !errors.As(err, &na) {
		t.Errorf("Run without a store: %v", err)
	}
	for _, ref := range []string{"", image.Host} {
		job := cmdJob("sh", "-c", "test -e "+hostOnly)
		job.Image = ref
		res, err := plain.Run(context.Background(), job)
		if err != nil || res.ExitCode != 0 || res.Image != "" {
			t.Errorf("image %q without a store: %v %+v", ref, err, res)
		}
	}
}

// TestImageHostView: with a resolver that enables it, the host view runs
// as without one and reports "host".
func TestImageHostView(t *testing.T) {
	tier, r, _ := newImageTier(t, NewConfig())
	r.AllowHost()
	job := cmdJob("sh", "-c", "test -e "+hostOnly)
	job.Image = image.Host
	res, err := tier.Run(context.Background(), job)
	if err != nil || res.ExitCode != 0 || res.Image != image.Host {
		t.Errorf("host view: %v %+v", err, res)
	}
}

// TestAgentLaunch: a static agent starts as itself; a dynamically linked
// one (this test binary, unless built with CGO_ENABLED=0) through a copy of
// its loader, with its libraries beside it, so it needs nothing in the
// image.
func TestAgentLaunch(t *testing.T) {
	static := "/usr/bin/busybox" // statically linked (imagetest.Busybox checks)
	imagetest.Busybox(t, "x")
	lib := t.TempDir()
	got, err := agentLaunch(static, lib)
	if err != nil || len(got) != 1 || got[0] != agentBin {
		t.Errorf("static: %q %v", got, err)
	}
	if entries, _ := os.ReadDir(lib); len(entries) != 0 {
		t.Errorf("static: %d files copied", len(entries))
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	got, err = agentLaunch(exe, lib)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 1 {
		return // this test binary is statically linked: checked above for busybox
	}
	if got[len(got)-1] != agentBin || !strings.HasPrefix(got[0], agentLibDir+"/") {
		t.Errorf("dynamic: %q", got)
	}
	if _, err := os.Stat(filepath.Join(lib, filepath.Base(got[0]))); err != nil {
		t.Errorf("loader not copied: %v", err)
	}
	if _, err := os.Stat(filepath.Join(lib, "libc.so.6")); err != nil {
		t.Errorf("libc not copied: %v", err)
	}
}

// TestMountPointsNeverWritten: a grant at a guest path missing in the
// root runs in a root of the sandbox's own, so neither an image's root nor
// the host view's shared root gains its mount point (nor the agent's, in
// an image that lacks them); one missing in a host directory the sandbox
// shows is refused, and the host directory stays as it was.
func TestMountPointsNeverWritten(t *testing.T) {
	tier, r, imgs := newImageTier(t, NewConfig())
	r.AllowHost()
	dir, _ := tiertest.GrantTree(t)
	// A directory too crowded to rebuild a root around.
	crowded := filepath.Join(imgs[0].Root, "crowded")
	if err := os.Mkdir(crowded, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range maxSkeletonBinds {
		if err := os.WriteFile(filepath.Join(crowded, fmt.Sprint(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	roots := []string{imgs[0].Root, tier.rootfs}
	before := make([]string, len(roots))
	for i, root := range roots {
		before[i] = treeOf(t, root)
	}
	for _, c := range []struct {
		img, at string
		collect bool // runs through the agent
	}{
		{"img-a", "/probe/deep", false},
		{"img-a", "/usr/probe", true},
		{image.Host, "/probe", false},
		{image.Host, "/probe/deep", true},
	} {
		job := cmdJob("sh", "-c", "cat "+c.at+"/sub/data.txt; ls / | grep -c '^usr$'")
		job.Image = c.img
		job.Grants.FS = airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: c.at}}
		if c.collect {
			job.Collect = []string{"none"}
		}
		res, err := tier.Run(context.Background(), job)
		if err != nil || res.Stdout != "granted\n1\n" {
			t.Errorf("%s, grant at %s: %v, stdout %q, stderr %q", c.img, c.at, err, res.Stdout, res.Stderr)
		}
	}
	for i, root := range roots {
		if after := treeOf(t, root); after != before[i] {
			t.Errorf("the shared root %s changed:\nbefore:\n%s\nafter:\n%s", root, before[i], after)
		}
	}
	// In the crowded directory: refused, nothing made there.
	job := cmdJob("true")
	job.Image = "img-a"
	job.Grants.FS = airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: "/crowded/new"}}
	if _, err := tier.Run(context.Background(), job); airlock.KindOf(err) != airlock.ErrInvalid || !strings.Contains(err.Error(), "too crowded") {
		t.Errorf("a grant in a crowded directory: %v, want invalid", err)
	}
	if _, err := os.Lstat(filepath.Join(crowded, "new")); !os.IsNotExist(err) {
		t.Errorf("the mount point was made in the image: %v", err)
	}
	// Under the host's /usr, which the host view binds: refused.
	missing := "/usr/airlock-no-such-mount-point"
	job = cmdJob("true")
	job.Image = image.Host
	job.Grants.FS = airlock.FSGrant{Read: []string{dir}, At: map[string]string{dir: missing}}
	_, err := tier.Run(context.Background(), job)
	if airlock.KindOf(err) != airlock.ErrInvalid || !strings.Contains(err.Error(), "does not exist in /usr") {
		t.Errorf("a grant at %s: %v, want invalid", missing, err)
	}
	if _, err := os.Lstat(missing); !os.IsNotExist(err) {
		os.Remove(missing)
		t.Errorf("runsc made %s on the host", missing)
	}
}

// treeOf lists every path under root with its type.
func treeOf(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v\n", strings.TrimPrefix(p, root), d.Type())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
