package process

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/imagetest"
)

// busyboxImage is imagetest.Busybox's root, with an /etc/passwd and
// /etc/hosts of its own that the sandbox must not show. Its directory
// (t.TempDir's) is made searchable by others: a store unpacks an image
// with the image's own bits (0755 for the root), and the sandbox's stage
// is an unprivileged uid on the host, which must search the image's root
// to mount it; the directories above it do not matter (the root reaches
// the stage as a descriptor).
func busyboxImage(t testing.TB, marker string) string {
	t.Helper()
	root := imagetest.Busybox(t, marker)
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"passwd": "imageuser:x:1000:1000::/home/imageuser:/bin/sh\n", "hosts": "10.9.8.7 image-host\n"} {
		if err := os.WriteFile(filepath.Join(root, "etc", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// imageTier is a container tier resolving images with r.
func imageTier(t *testing.T, r *imagetest.Resolver, pool int) (*Tier, Config) {
	t.Helper()
	cfg := testConfig(t).WithImages(r).WithPool(pool)
	return newTestTier(t, bothTiers[0], cfg), cfg
}

// closeReleased closes the tier and checks that every image it acquired
// is released.
func closeReleased(t *testing.T, tier *Tier, cfg Config, r *imagetest.Resolver) {
	t.Helper()
	assertClean(t, tier, cfg)
	if n := r.Held(); n != 0 {
		t.Errorf("%d images still held after the tier closed", n)
	}
}

func mustRun(t *testing.T, tier interface {
	Run(context.Context, airlock.Job) (airlock.Result, error)
}, job airlock.Job) airlock.Result {
	t.Helper()
	res, err := tier.Run(context.Background(), job)
	if err != nil {
		t.Fatalf("%v: %v (stderr %q)", job.Argv, err, res.Stderr)
	}
	return res
}

// TestImageRoot: the job runs in the image — its tree, its os-release,
// its environment, the synthesised /etc files over its own — and sees
// nothing of the host's software; the image is read-only, the scratch
// writable, granted paths appear at their paths (one inside a directory
// the image also has), and the result names the image's digest.
func TestImageRoot(t *testing.T) {
	r := imagetest.New(t)
	img := r.Add("alpha", busyboxImage(t, "alpha-marker"), image.Config{Env: []string{"FOO=from-image", "LANG=C"}, User: "1000", WorkingDir: "/home"})
	tier, cfg := imageTier(t, r, 0)

	grant := filepath.Join(t.TempDir(), "granted")
	if err := os.Mkdir(grant, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(grant, "note"), []byte("granted-content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const usrGrant = "/usr/share/common-licenses"
	script := strings.Join([]string{
		"ls /",
		"cat /etc/os-release",
		"test -e /usr/lib/x86_64-linux-gnu && echo HOST-LIB",
		"test -e /usr/bin/python3 && echo HOST-PYTHON",
		"test -e /etc/debian_version && echo HOST-ETC",
		"echo env=$FOO,$HOME,$TMPDIR,$LANG,$PATH,$SECRET",
		"echo uid=$(id -u) pwd=$(pwd)",
		"cat /etc/passwd /etc/hosts /etc/hostname",
		"touch /bin/new 2>/dev/null && echo WROTE-BIN",
		"echo x > /etc/os-release 2>/dev/null && echo WROTE-ETC",
		"mkdir /newdir 2>/dev/null && echo WROTE-ROOT",
		"echo scratch-ok > /scratch/f && cat /scratch/f",
		"echo tmp-ok > /tmp/g && cat /tmp/g",
		"cat " + filepath.Join(grant, "note"),
		"test -r " + usrGrant + "/GPL-3 && echo usr-grant-ok",
		"ls /usr",
	}, "; ")
	job := cmdJob("sh", "-c", script)
	job.Grants.FS.Read = []string{grant}
	if _, err := os.Stat(usrGrant + "/GPL-3"); err == nil {
		job.Grants.FS.Read = append(job.Grants.FS.Read, usrGrant)
	}
	job.Grants.Secrets = map[string]string{"SECRET": "s3", "FOO": "from-secret"}
	res := mustRun(t, tier, job)
	out := res.Stdout
	t.Logf("stdout:\n%s\nstderr:\n%s", out, res.Stderr)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d", res.ExitCode)
	}
	if res.Image != img.Digest {
		t.Errorf("Result.Image = %q, want %q", res.Image, img.Digest)
	}
	for _, want := range []string{
		"ID=alpha-marker",
		"env=from-secret,/scratch,/tmp,C,/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin,s3",
		"uid=0 pwd=/scratch",
		"root:x:0:0:root:/scratch", "localhost airlock", "airlock\n",
		"scratch-ok", "tmp-ok", "granted-content",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if len(job.Grants.FS.Read) == 2 && !strings.Contains(out, "usr-grant-ok") {
		t.Errorf("the grant of %s inside the image's /usr is not readable", usrGrant)
	}
	for _, bad := range []string{"HOST-LIB", "HOST-PYTHON", "HOST-ETC", "imageuser", "image-host", "WROTE-BIN", "WROTE-ETC", "WROTE-ROOT"} {
		if strings.Contains(out, bad) {
			t.Errorf("output has %q", bad)
		}
	}
	// The image's top level, not the host's: no /lib, /lib64 or /sbin
	// (busybox's root has /bin, /etc, /tmp and /usr).
	top := strings.Fields(strings.SplitN(out, "ID=", 2)[0])
	for _, name := range []string{"lib", "lib64", "sbin", "home", "var"} {
		for _, got := range top {
			if got == name {
				t.Errorf("/%s is in the sandbox's root: %v", name, top)
			}
		}
	}

	// A bare program name is looked up in the image's PATH, and runs from
	// an image directory the host view has no rule for.
	root := busyboxImage(t, "tools-marker")
	if err := os.MkdirAll(filepath.Join(root, "opt", "tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "opt", "tools", "hello"), []byte("#!/bin/sh\necho hello-from-opt\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tools := r.Add("tools", root, image.Config{Env: []string{"PATH=/opt/tools:/bin"}})
	job = cmdJob("hello")
	job.Image = "tools"
	if res := mustRun(t, tier, job); res.Stdout != "hello-from-opt\n" || res.Image != tools.Digest {
		t.Errorf("a program on the image's PATH: %q (exit %d, stderr %q)", res.Stdout, res.ExitCode, res.Stderr)
	}
	closeReleased(t, tier, cfg, r)
}

// TestImageRefusals: an unknown image is an invalid job with a one-line
// error; without a resolver only "" and "host" are admitted, and the
// seccomp tier, which shares the host's view, never takes one.
func TestImageRefusals(t *testing.T) {
	r := imagetest.New(t)
	r.Add("alpha", busyboxImage(t, "alpha-marker"), image.Config{})
	tier, cfg := imageTier(t, r, 0)
	job := cmdJob("true")
	job.Image = "no-such-image"
	res, err := tier.Run(context.Background(), job)
	var inv *airlock.InvalidJob
	if !asErr(err, &inv) || inv.Field != "image" || strings.Contains(err.Error(), "\n") {
		t.Errorf("unknown image: %v (%T); want a one-line invalid job naming the image", err, err)
	}
	if res.Error == nil {
		t.Errorf("unknown image: the result carries no error")
	}
	closeReleased(t, tier, cfg, r)

	for _, tc := range bothTiers {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			if tc.name == NameFilter {
				cfg = cfg.WithImages(r) // ignored by the filter tier
			}
			tier := newTestTier(t, tc, cfg)
			job := cmdJob("true")
			job.Image = "alpha"
			_, err := tier.Run(context.Background(), job)
			var na *airlock.NotAdmitted
			if !asErr(err, &na) || strings.Contains(err.Error(), "\n") {
				t.Errorf("image %q: %v; want a one-line refusal", job.Image, err)
			}
			if err := tier.Admit(job); err == nil {
				t.Errorf("Admit accepted image %q", job.Image)
			}
			for _, ref := range []string{"", image.Host} {
				job := cmdJob("cat", "/etc/os-release")
				job.Image = ref
				res := mustRun(t, tier, job)
				if res.Image != "" || strings.Contains(res.Stdout, "alpha-marker") || res.ExitCode != 0 {
					t.Errorf("image %q: Result.Image %q, exit %d, stdout %q; want the host view", ref, res.Image, res.ExitCode, res.Stdout)
				}
			}
			assertClean(t, tier, cfg)
			if n := r.Held(); n != 0 {
				t.Errorf("%d images held", n)
			}
		})
	}
}

// TestImageHost: a resolver that offers the host view runs it for
// image "host", and the result says so.
func TestImageHost(t *testing.T) {
	r := imagetest.New(t)
	r.Add("alpha", busyboxImage(t, "alpha-marker"), image.Config{})
	r.AllowHost()
	tier, cfg := imageTier(t, r, 0)
	job := cmdJob("sh", "-c", "cat /etc/os-release; test -d /usr/lib && echo HOST-USR")
	job.Image = image.Host
	res := mustRun(t, tier, job)
	if res.Image != image.Host || strings.Contains(res.Stdout, "alpha-marker") || !strings.Contains(res.Stdout, "HOST-USR") {
		t.Errorf("Result.Image %q, stdout %q; want the host view", res.Image, res.Stdout)
	}
	closeReleased(t, tier, cfg, r)
}

// TestImagePool: the pool keeps sandboxes of the default image only; a
// job of another image never gets one (it starts cold, in its own image),
// while a job of the default image, named or not, does.
func TestImagePool(t *testing.T) {
	r := imagetest.New(t)
	alpha := r.Add("alpha", busyboxImage(t, "alpha-marker"), image.Config{})
	beta := r.Add("beta", busyboxImage(t, "beta-marker"), image.Config{})
	tier, cfg := imageTier(t, r, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	warmUp := func() {
		t.Helper()
		if err := tier.WaitWarm(ctx); err != nil {
			t.Fatal(err)
		}
	}
	warmUp()
	if n := r.Held(); n != 2 {
		t.Errorf("a full pool of 2 holds %d images", n)
	}
	if k, _ := tier.knownDefault(); k.digest != alpha.Digest {
		t.Fatalf("pool key %q, want the default image's %q", k.digest, alpha.Digest)
	}
	for round, tc := range []struct {
		ref, marker, digest string
		hit                 bool
	}{
		{"beta", "beta-marker", beta.Digest, false},
		{"", "alpha-marker", alpha.Digest, true},
		{"beta", "beta-marker", beta.Digest, false},
		{"alpha", "alpha-marker", alpha.Digest, true},
	} {
		warmUp()
		before := tier.PoolStats()
		job := cmdJob("cat", "/etc/os-release")
		job.Image = tc.ref
		res := mustRun(t, tier, job)
		after := tier.PoolStats()
		if !strings.Contains(res.Stdout, "ID="+tc.marker) || res.Image != tc.digest {
			t.Errorf("round %d (image %q): stdout %q, Result.Image %q; want %s, %s", round, tc.ref, res.Stdout, res.Image, tc.marker, tc.digest)
		}
		if hit := after.Hits == before.Hits+1; hit != tc.hit {
			t.Errorf("round %d (image %q): pool hits %d → %d; want a hit: %v", round, tc.ref, before.Hits, after.Hits, tc.hit)
		}
	}
	if st := tier.pool.Stats(poolKey{beta.Digest}); st.Size != 0 || st.Created != 0 {
		t.Errorf("the pool started sandboxes of a non-default image: %+v", st)
	}
	closeReleased(t, tier, cfg, r)
}

// TestImagePoolMovedName: the default image's name moves to a new image
// while its pool is warm. A job naming it runs the new image, never a
// pooled sandbox of the old one; the pool follows the name (the old
// image's sandboxes are ended, the new one's kept warm and claimed), and
// PoolStats shows the name under the new digest only.
func TestImagePoolMovedName(t *testing.T) {
	r := imagetest.New(t)
	old := r.Add("alpha", busyboxImage(t, "old-marker"), image.Config{})
	tier, cfg := imageTier(t, r, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := tier.WaitWarm(ctx); err != nil {
		t.Fatal(err)
	}
	if st := tier.PoolStats().Images[old.Digest]; st.Ready != 2 || !slices.Equal(st.Names, []string{"alpha"}) {
		t.Fatalf("before the move: %+v; want 2 ready, named alpha", tier.PoolStats())
	}
	moved := r.Add("alpha", busyboxImage(t, "new-marker"), image.Config{})
	run := func(ref string) (airlock.Result, airlock.PoolStats, airlock.PoolStats) {
		t.Helper()
		before := tier.PoolStats()
		job := cmdJob("cat", "/etc/os-release")
		job.Image = ref
		res := mustRun(t, tier, job)
		if !strings.Contains(res.Stdout, "ID=new-marker") || res.Image != moved.Digest {
			t.Errorf("image %q after the move: stdout %q, Result.Image %q; want the new image %s", ref, res.Stdout, res.Image, moved.Digest)
		}
		return res, before, tier.PoolStats()
	}
	// By its name and by default: the pooled sandboxes of the old image
	// are not claimed.
	for _, ref := range []string{"alpha", ""} {
		_, before, after := run(ref)
		if after.Hits != before.Hits {
			t.Errorf("image %q after the move: pool hits %d → %d; want no claim of the old image's sandboxes", ref, before.Hits, after.Hits)
		}
	}
	if err := tier.WaitWarm(ctx); err != nil {
		t.Fatal(err)
	}
	st := tier.PoolStats()
	if _, ok := st.Images[old.Digest]; ok || st.Images[moved.Digest].Ready != 2 || !slices.Equal(st.Images[moved.Digest].Names, []string{"alpha"}) {
		t.Errorf("after the move: %+v; want 2 ready of %s named alpha, none of %s", st, moved.Digest, old.Digest)
	}
	if ost := tier.pool.Stats(poolKey{old.Digest}); ost.Size != 0 || ost.Ready != 0 {
		t.Errorf("the old image's pool: %+v; want it ended", ost)
	}
	if _, before, after := run(""); after.Images[moved.Digest].Hits != before.Images[moved.Digest].Hits+1 {
		t.Errorf("the default image after the pool followed it: hits %+v → %+v; want a claim", before, after)
	}
	closeReleased(t, tier, cfg, r)
}

// TestImagePoolPerImage: WithImagePool keeps beta's pool (2) beside the
// default alpha's (1); WaitWarm fills both, a job claims only from its own
// image's pool and counts as its hit, the other image's pool is left
// untouched, and a job of an image without a pool starts cold.
func TestImagePoolPerImage(t *testing.T) {
	r := imagetest.New(t)
	alpha := r.Add("alpha", busyboxImage(t, "alpha-marker"), image.Config{})
	beta := r.Add("beta", busyboxImage(t, "beta-marker"), image.Config{})
	gamma := r.Add("gamma", busyboxImage(t, "gamma-marker"), image.Config{})
	cfg := testConfig(t).WithImages(r).WithPool(1).WithImagePool("beta", 2)
	tier := newTestTier(t, bothTiers[0], cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := tier.WaitWarm(ctx); err != nil {
		t.Fatal(err)
	}
	st := tier.PoolStats()
	if st.Size != 3 || st.Ready != 3 || len(st.Images) != 2 ||
		st.Images[alpha.Digest].Ready != 1 || st.Images[beta.Digest].Ready != 2 || st.Images[beta.Digest].Size != 2 {
		t.Fatalf("after WaitWarm: %+v; want alpha 1 and beta 2 ready", st)
	}
	for round, tc := range []struct {
		ref, marker string
		img         *image.Image
		pooled      bool
	}{
		{"beta", "beta-marker", beta, true},
		{"", "alpha-marker", alpha, true},
		{"gamma", "gamma-marker", gamma, false},
		{"beta", "beta-marker", beta, true},
	} {
		if err := tier.WaitWarm(ctx); err != nil {
			t.Fatal(err)
		}
		before := tier.PoolStats()
		job := cmdJob("cat", "/etc/os-release")
		job.Image = tc.ref
		res := mustRun(t, tier, job)
		after := tier.PoolStats()
		if !strings.Contains(res.Stdout, "ID="+tc.marker) || res.Image != tc.img.Digest {
			t.Errorf("round %d (image %q): stdout %q, Result.Image %q", round, tc.ref, res.Stdout, res.Image)
		}
		for _, d := range []string{alpha.Digest, beta.Digest} {
			b, a := before.Images[d], after.Images[d]
			wantHits := b.Hits
			if tc.pooled && d == tc.img.Digest {
				wantHits++
			}
			if a.Hits != wantHits || a.Misses != b.Misses {
				t.Errorf("round %d (image %q): pool of %s went %+v → %+v; want %d hits, no new miss", round, tc.ref, d, b, a, wantHits)
			}
		}
	}
	if st := tier.pool.Stats(poolKey{gamma.Digest}); st.Size != 0 || st.Created != 0 {
		t.Errorf("the pool started sandboxes of an image without a pool: %+v", st)
	}
	closeReleased(t, tier, cfg, r)
}

// TestImagePoolConfig refuses image pools the tier cannot keep.
func TestImagePoolConfig(t *testing.T) {
	r := imagetest.New(t)
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no store", NewConfig().WithImagePool("beta", 1), "needs an image store"},
		{"too large", NewConfig().WithImages(r).WithImagePool("beta", 65), "out of range"},
		{"no reference", NewConfig().WithImages(r).WithImagePool("", 1), "needs an image reference"},
	} {
		if tier, err := New(c.cfg); err == nil {
			tier.Close()
			t.Errorf("%s: New accepted it", c.name)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := NewFilter(NewConfig().WithImages(r).WithImagePool("beta", 1)); err == nil {
		t.Error("the filter tier accepted an image pool")
	}
}

// TestImageSession: a session keeps the image of its first run for its
// life (later runs may name it or leave the image empty; another image is
// refused) and releases it when it closes.
func TestImageSession(t *testing.T) {
	r := imagetest.New(t)
	r.Add("alpha", busyboxImage(t, "alpha-marker"), image.Config{})
	beta := r.Add("beta", busyboxImage(t, "beta-marker"), image.Config{})
	tier, cfg := imageTier(t, r, 0)
	s, err := tier.OpenSession(context.Background(), airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	job := cmdJob("sh", "-c", "cat /etc/os-release; echo kept > /scratch/k")
	job.Image = "beta"
	if res := mustRun(t, s, job); !strings.Contains(res.Stdout, "beta-marker") || res.Image != beta.Digest {
		t.Errorf("first run: %q, Result.Image %q", res.Stdout, res.Image)
	}
	for _, ref := range []string{"", "beta", beta.Digest} {
		job := cmdJob("sh", "-c", "cat /etc/os-release /scratch/k")
		job.Image = ref
		res := mustRun(t, s, job)
		if !strings.Contains(res.Stdout, "beta-marker") || !strings.Contains(res.Stdout, "kept") || res.Image != beta.Digest {
			t.Errorf("run with image %q: %q, Result.Image %q", ref, res.Stdout, res.Image)
		}
	}
	if n := r.Held(); n != 1 {
		t.Errorf("an open session holds %d images, want 1", n)
	}
	other := cmdJob("true")
	other.Image = "alpha"
	var na *airlock.NotAdmitted
	if _, err := s.Run(context.Background(), other); !asErr(err, &na) {
		t.Errorf("another image in the session: %v; want a refusal", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := r.Held(); n != 0 {
		t.Errorf("a closed session holds %d images", n)
	}
	closeReleased(t, tier, cfg, r)
}
