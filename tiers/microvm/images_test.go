package microvm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/egresstest"
	"github.com/airlock-sandbox/airlock/internal/testing/imagetest"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// imageJob shows what the guest's job sees of its root: the image's
// marker, whether the host's python is there, whether the root (a
// world-writable directory of the image included) takes writes, the
// scratch, the environment, the user and the tier's /etc files.
const imageScript = `cat /etc/os-release
test -e /usr/bin/python3 && echo host-python
touch /bin/x 2>/dev/null || echo ro-bin
touch /var/tmp/x 2>/dev/null || echo ro-var
awk '$2 == "/" { split($4, o, ","); print "root-" o[1] }' /proc/mounts
echo w > /scratch/f && cat /scratch/f
echo "env $PATH $HOME $TMPDIR $LANG $FROM_IMAGE"
echo "uid $(id -u) $(hostname) $(cat /etc/hostname) $(grep -c . /etc/passwd)"
test -e /etc/airlock/leak && echo followed-link
cat /etc/resolv.conf
ls /`

// imageRoot builds a busybox image root with a world-writable /var/tmp,
// which the job must still not be able to write to.
func imageRoot(t *testing.T, marker string) string {
	root := imagetest.Busybox(t, marker)
	vt := filepath.Join(root, "var", "tmp")
	if err := os.MkdirAll(vt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(vt, 0o1777); err != nil {
		t.Fatal(err)
	}
	// A link the image planted where the agent writes its /etc files:
	// followed, the agent's write would land in a directory of its own.
	if err := os.Symlink("/etc/airlock/leak", filepath.Join(root, "etc", "resolv.conf")); err != nil {
		t.Fatal(err)
	}
	// An /etc/passwd of the image's own, which the tier's replaces.
	if err := os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0::/:/bin/sh\nimage:x:1000:1000::/:/bin/sh\nmore:x:1001:1001::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func imageTier(t *testing.T, cfg Config) *Tier {
	t.Helper()
	tier, err := New(cfg.WithStateDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := tier.Available(); err != nil {
		tier.Close()
		tiertest.Unavailable(t, Name, err)
	}
	if _, err := findMkfsErofs(); err != nil {
		tier.Close()
		tiertest.Unavailable(t, Name, err)
	}
	return tier
}

func imageCommand(ref string, argv ...string) airlock.Job {
	job := command(argv...)
	job.Image = ref
	job.Grants.Spawn = true
	return job
}

// checkImageRun checks that a run of imageScript saw the image marked
// marker, read-only, and the tier's environment and /etc.
func checkImageRun(t *testing.T, res airlock.Result, err error, marker, fromImage string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%v (stderr %q)", err, res.Stderr)
	}
	out := res.Stdout
	want := []string{
		"ID=" + marker + "\n", "ro-bin\n", "ro-var\n", "root-ro\n", "w\n",
		"env " + image.DefaultPATH + " /scratch /tmp " + map[bool]string{true: "C", false: "C.UTF-8"}[fromImage != ""] + " " + fromImage + "\n",
		"uid 65534 airlock airlock 2\n", "nameserver 127.0.0.1\n",
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("stdout lacks %q:\n%s\nstderr: %s", w, out, res.Stderr)
		}
	}
	if strings.Contains(out, "host-python") {
		t.Errorf("the job saw the host's /usr/bin/python3:\n%s", out)
	}
	if strings.Contains(out, "followed-link") {
		t.Errorf("the agent followed the image's /etc/resolv.conf link:\n%s", out)
	}
	for _, d := range []string{"bin", "etc", "proc", "scratch", "tmp", "dev"} {
		if !slices.Contains(strings.Fields(out), d) {
			t.Errorf("ls / lacks %s:\n%s", d, out)
		}
	}
}

// TestImageCold boots VMs whose job root is an image disk: the job sees the
// image, not the host nor the initramfs; its root is read-only and its
// scratch writable; the disk is built once for two runs; the host view
// stays available where the resolver allows it; an unknown image costs no
// VM; and every image is released once the tier is closed.
func TestImageCold(t *testing.T) {
	r := imagetest.New(t)
	rootA := imageRoot(t, "airlock-image-a")
	a := r.Add("a", rootA, image.Config{})
	r.AllowHost()
	tier := imageTier(t, testConfig().WithImages(r))
	defer tier.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	for i := range 2 {
		res, err := tier.Run(ctx, imageCommand("", "sh", "-c", imageScript))
		checkImageRun(t, res, err, "airlock-image-a", "")
		if res.Image != a.Digest {
			t.Errorf("run %d: Result.Image %q, want %q", i, res.Image, a.Digest)
		}
	}
	if n := r.Builds("a", diskKind); n != 1 {
		t.Errorf("the disk was built %d times for two runs, want 1", n)
	}
	// The image's files are never modified: the mount points and /etc
	// files the guest added live in its overlay.
	for _, p := range []string{"scratch", "proc", "bin/x", "var/tmp/x"} {
		if _, err := os.Lstat(filepath.Join(rootA, p)); err == nil {
			t.Errorf("the image root gained %s", p)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(rootA, "etc", "passwd")); !strings.Contains(string(data), "image:x:1000") {
		t.Errorf("the image's /etc/passwd changed: %q", data)
	}

	// The host view, where the resolver enables it: the initramfs's
	// busybox, without the image's marker.
	res, err := tier.Run(ctx, imageCommand(image.Host, "sh", "-c", "cat /etc/os-release 2>&1; echo done"))
	if err != nil || res.Image != image.Host || strings.Contains(res.Stdout, "airlock-image") || !strings.HasSuffix(res.Stdout, "done\n") {
		t.Errorf("host view: %v, image %q, stdout %q", err, res.Image, res.Stdout)
	}

	// An unknown image is the job's fault, said in one line, before any VM.
	res, err = tier.Run(ctx, imageCommand("no-such-image", "true"))
	var inv *airlock.InvalidJob
	if !errors.As(err, &inv) || inv.Field != "image" || strings.Contains(err.Error(), "\n") || res.Timings.StartUS != 0 {
		t.Errorf("unknown image: %v (%T), start %dµs, want a one-line InvalidJob on image and no VM", err, err, res.Timings.StartUS)
	}

	tier.Close()
	if n := r.Held(); n != 0 {
		t.Errorf("%d images still held after Close", n)
	}
	assertNoVMs(t, tier)
}

// TestImageAdmit: without a resolver only the host view is admitted, and
// the refusal costs nothing.
func TestImageAdmit(t *testing.T) {
	tier := shared.get(t, WarmCold)
	for _, ref := range []string{"", image.Host} {
		if err := tier.Admit(imageCommand(ref, "true")); err != nil {
			t.Errorf("image %q without a resolver: %v", ref, err)
		}
	}
	job := imageCommand("python", "true")
	err := tier.Admit(job)
	var na *airlock.NotAdmitted
	if !errors.As(err, &na) || !strings.Contains(na.Reason, "no image store") {
		t.Fatalf("Admit = %v, want not admitted: no image store", err)
	}
	if res, err := tier.Run(context.Background(), job); !errors.As(err, &na) || res.Image != "" {
		t.Fatalf("Run = %v (image %q), want not admitted", err, res.Image)
	}
}

// TestImagePool: the pools keep VMs of the default image a (WithPool) and
// of b (WithImagePool); a job of c, which has no pool, starts its VM
// itself, and a job of a or b claims only from its own image's pool,
// counted as that image's hit, the other's left untouched.
func TestImagePool(t *testing.T) {
	r := imagetest.New(t)
	a := r.Add("a", imageRoot(t, "airlock-image-a"), image.Config{})
	b := r.Add("b", imageRoot(t, "airlock-image-b"), image.Config{Env: []string{"FROM_IMAGE=b", "LANG=C"}})
	c := r.Add("c", imageRoot(t, "airlock-image-c"), image.Config{})
	tier := imageTier(t, testConfig().WithImages(r).WithPool(1).WithImagePool("b", 1))
	defer tier.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := tier.WaitWarm(ctx); err != nil {
		t.Fatal(err)
	}
	for ref, img := range map[string]*image.Image{"": a, "b": b} {
		if pooled := tier.pool.Ready(poolKey{tier.baseMem(), ref}); len(pooled) != 1 || digestOf(pooled[0].img) != img.Digest {
			t.Fatalf("the pool of %q holds %d VMs, want one of image %s", ref, len(pooled), img.Ref)
		}
	}
	st := tier.PoolStats()
	if st.Size != 2 || st.Ready != 2 || st.Images[a.Digest].Ready != 1 || st.Images[b.Digest].Ready != 1 {
		t.Fatalf("after WaitWarm: %+v", st)
	}

	res, err := tier.Run(ctx, imageCommand("c", "sh", "-c", "cat /etc/os-release"))
	if err != nil || !strings.Contains(res.Stdout, "airlock-image-c") || res.Image != c.Digest {
		t.Fatalf("image c: %v %+v", err, res)
	}
	if st := tier.PoolStats(); st.Hits != 0 {
		t.Fatalf("a job of image c was handed a pooled VM (%+v)", st)
	}

	res, err = tier.Run(ctx, imageCommand("b", "sh", "-c", imageScript))
	checkImageRun(t, res, err, "airlock-image-b", "b")
	if res.Image != b.Digest {
		t.Errorf("Result.Image %q, want %q", res.Image, b.Digest)
	}
	st = tier.PoolStats()
	if st.Images[b.Digest].Hits != 1 || st.Images[a.Digest].Hits != 0 || st.Images[a.Digest].Misses != 0 {
		t.Fatalf("a job of image b did not come from b's pool alone (%+v)", st)
	}

	res, err = tier.Run(ctx, imageCommand("a", "sh", "-c", imageScript))
	checkImageRun(t, res, err, "airlock-image-a", "")
	if st := tier.PoolStats(); st.Images[a.Digest].Hits != 1 || st.Images[b.Digest].Hits != 1 || st.Hits != 2 {
		t.Fatalf("a job of the default image did not come from its pool (%+v)", st)
	}
	if res.Image != a.Digest {
		t.Errorf("Result.Image %q, want %q", res.Image, a.Digest)
	}
	tier.Close()
	if n := r.Held(); n != 0 {
		t.Errorf("%d images still held after Close", n)
	}
	assertNoVMs(t, tier)
}

// TestImagePoolMovedName: b's name moves to a new image while its pool is
// warm. The next job naming b runs the new image, never the pooled VM of
// the old one; the pool follows the name and serves the job after, and
// PoolStats shows the name under the new digest only.
func TestImagePoolMovedName(t *testing.T) {
	r := imagetest.New(t)
	r.Add("a", imageRoot(t, "airlock-image-a"), image.Config{})
	old := r.Add("b", imageRoot(t, "airlock-image-b"), image.Config{})
	tier := imageTier(t, testConfig().WithImages(r).WithImagePool("b", 1))
	defer tier.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := tier.WaitWarm(ctx); err != nil {
		t.Fatal(err)
	}
	if st := tier.PoolStats().Images[old.Digest]; st.Ready != 1 || !slices.Equal(st.Names, []string{"b"}) {
		t.Fatalf("before the move: %+v; want 1 ready, named b", tier.PoolStats())
	}
	moved := r.Add("b", imageRoot(t, "airlock-image-b-new"), image.Config{})
	for i := range 2 {
		before := tier.PoolStats()
		res, err := tier.Run(ctx, imageCommand("b", "cat", "/etc/os-release"))
		if err != nil || !strings.Contains(res.Stdout, "ID=airlock-image-b-new\n") || res.Image != moved.Digest {
			t.Fatalf("job %d after the move: %v, stdout %q, Result.Image %q; want the new image %s", i, err, res.Stdout, res.Image, moved.Digest)
		}
		// The first job finds only a VM of the old image; the second, once
		// the pool has followed the name, claims from it.
		if hit := tier.PoolStats().Hits == before.Hits+1; hit != (i == 1) {
			t.Errorf("job %d after the move: pool %+v → %+v; want a claim: %v", i, before, tier.PoolStats(), i == 1)
		}
		if err := tier.WaitWarm(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st := tier.PoolStats()
	if _, ok := st.Images[old.Digest]; ok || st.Images[moved.Digest].Ready != 1 || !slices.Equal(st.Images[moved.Digest].Names, []string{"b"}) {
		t.Errorf("after the move: %+v; want 1 ready of %s named b, none of %s", st, moved.Digest, old.Digest)
	}
	tier.Close()
	if n := r.Held(); n != 0 {
		t.Errorf("%d images still held after Close", n)
	}
	assertNoVMs(t, tier)
}

// TestImageSnapshot: snapshots are per image: a restore of image a's
// never serves a job of image b, which gets a snapshot of its own.
func TestImageSnapshot(t *testing.T) {
	r := imagetest.New(t)
	a := r.Add("a", imageRoot(t, "airlock-image-a"), image.Config{})
	b := r.Add("b", imageRoot(t, "airlock-image-b"), image.Config{Env: []string{"FROM_IMAGE=b", "LANG=C"}})
	tier := imageTier(t, testConfig().WithImages(r).WithWarm(WarmSnapshot))
	defer tier.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := tier.WaitWarm(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ref, marker, from string
		img               *image.Image
	}{{"b", "airlock-image-b", "b", b}, {"a", "airlock-image-a", "", a}} {
		res, err := tier.Run(ctx, imageCommand(c.ref, "sh", "-c", imageScript))
		checkImageRun(t, res, err, c.marker, c.from)
		if res.Image != c.img.Digest {
			t.Errorf("Result.Image %q, want %q", res.Image, c.img.Digest)
		}
	}
	tier.snapMu.Lock()
	var keys []string
	for k := range tier.snaps {
		keys = append(keys, k.digest)
	}
	tier.snapMu.Unlock()
	slices.Sort(keys)
	if want := []string{a.Digest, b.Digest}; !slices.Equal(keys, slices.Sorted(slices.Values(want))) {
		t.Errorf("snapshots of %v, want one per image", keys)
	}
	tier.Close()
	if n := r.Held(); n != 0 {
		t.Errorf("%d images still held after Close", n)
	}
	assertNoVMs(t, tier)
}

// TestImageArgs: an image's disk is attached read-only, and the guest is
// told to mount it; a host-view VM has no disk.
func TestImageArgs(t *testing.T) {
	tier := &Tier{cfg: testConfig(), assets: &assets{qemu: "qemu", kernel: "vmlinux", initrd: "initrd"}}
	h := &heldImage{img: &image.Image{Digest: "sha256:x"}, disk: "/d,isk/root.erofs"}
	args := strings.Join(tier.qemuArgs("id", "/dir", vmSpec{memMB: 64, vcpus: 1, img: h}), " ")
	for _, w := range []string{"readonly=on,file=/d,,isk/root.erofs", "virtio-blk-device,drive=root", "airlock.root=vda", "," + imageModules} {
		if !strings.Contains(args, w) {
			t.Errorf("args lack %q: %s", w, args)
		}
	}
	plain := strings.Join(tier.qemuArgs("id", "/dir", vmSpec{memMB: 64, vcpus: 1}), " ")
	if strings.Contains(plain, "-drive") || strings.Contains(plain, "airlock.root") {
		t.Errorf("a host-view VM has a disk: %s", plain)
	}
}

func TestImageEnv(t *testing.T) {
	img := &image.Image{Config: image.Config{Env: []string{"PATH=/opt/bin", "X=1"}}}
	env := imageEnv(img, map[string]string{"X": "secret"})
	want := map[string]string{"PATH": "/opt/bin", "X": "secret", "HOME": "/scratch", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
	if len(env) != len(want) {
		t.Fatalf("env %v, want %v", env, want)
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
}

// TestImageEgress: a job granted egress runs in its image too, and finds
// the gateway's CA where its trust variables point, inside that image.
func TestImageEgress(t *testing.T) {
	o := egresstest.StartOrigin(t, "origin.test")
	r := imagetest.New(t)
	a := r.Add("a", imageRoot(t, "airlock-image-a"), image.Config{})
	tier := imageTier(t, testConfig().WithImages(r).WithEgress(egress.Config{Hosts: o.Pins}))
	defer tier.Close()
	url := "http://origin.test:" + o.Port + "/ok"
	job := egresstest.ShellJob("cat /etc/os-release; timeout 10 wget -q -O - "+url+"; echo get=$?; grep -c 'BEGIN CERTIFICATE' \"$SSL_CERT_FILE\"", o.Rule("origin.test"))
	job.Grants.Spawn = true
	res, err := tier.Run(context.Background(), job)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, res.Stdout, res.Stderr)
	}
	if want := "ID=airlock-image-a\norigin says hello\nget=0\n1\n"; res.Stdout != want || res.Image != a.Digest {
		t.Errorf("stdout %q (image %q), want %q\nstderr:\n%s", res.Stdout, res.Image, want, res.Stderr)
	}
	tier.Close()
	if n := r.Held(); n != 0 {
		t.Errorf("%d images still held after Close", n)
	}
}
