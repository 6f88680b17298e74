package gvisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/imagetest"
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

// TestImagePools keeps both images' pools warm and checks each job gets a
// sandbox of its own image.
func TestImagePools(t *testing.T) {
	tier, _, imgs := newImageTier(t, NewConfig().WithPool(1, 1))
	warm(t, tier)
	if k := tier.defaultKey(); k.digest != imgs[0].Digest {
		t.Fatalf("prewarmed key %q, want the default image's %q", k.digest, imgs[0].Digest)
	}
	// The second image's pool, as the default's is kept.
	kb := poolKey{imgs[1].Digest}
	tier.pmu.Lock()
	tier.poolRefs[kb] = "img-b"
	tier.pmu.Unlock()
	tier.pool.SetSize(kb, 1)
	waitKey := func(k poolKey) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := tier.pool.WaitFull(ctx, k); err != nil {
			t.Fatalf("pool %s: %v", k.digest, err)
		}
	}
	for round := range 2 {
		waitKey(tier.defaultKey())
		waitKey(kb)
		// Image A first in one round, B first in the other.
		order := []int{0, 1}
		if round == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			job := imageProbe
			job.Image = imgs[i].Ref
			marker := []string{"image-a", "image-b"}[i]
			k := poolKey{imgs[i].Digest}
			before := tier.pool.Stats(k).Hits
			res, err := tier.Run(context.Background(), job)
			checkImageProbe(t, res, err, imgs[i], marker)
			if got := tier.pool.Stats(k).Hits; got != before+1 {
				t.Errorf("image %s: the job did not run in a pooled sandbox (hits %d → %d)", imgs[i].Ref, before, got)
			}
		}
	}
	if st := tier.Stats(); st.Ready+int(st.Hits) == 0 {
		t.Errorf("default pool stats empty: %+v", st)
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
