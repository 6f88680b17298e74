package microvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/jobs"
)

// Images.
//
// With a resolver (Config.WithImages) a guest's job root is its job's
// image. Each image becomes, once per digest, a read-only EROFS disk
// (Resolver.Derive, kind diskKind, built with mkfs.erofs, every file owned
// by root, modes as in the image) that VMs of that image attach read-only
// (virtio-blk, readonly=on). The agent, still the initramfs's /init, mounts
// it, lays an in-memory overlay over it for the files it adds itself
// (/etc/passwd, group, hosts, hostname, resolv.conf, replacing the
// image's: neither host facts nor the image's accounts reach the job, and
// mount points), mounts /proc, /dev, /tmp, /scratch in it, turns it
// read-only and runs the job chrooted there. The image's own files are
// never written; the job writes to /scratch and /tmp as in the host view.
//
// The job's environment is the image's Config.Env, then PATH, HOME,
// TMPDIR and LANG where the image sets none, then the job's secrets. The
// image's User is ignored (jobs run as the unprivileged job user) and its
// WorkingDir too (jobs start in /scratch, where their files are).
//
// The tier holds an image (and so its disk) while any VM, snapshot or
// run of it exists. Snapshots and spare VMMs are per image digest; the
// pool keeps VMs of the default image (WithPool) and of those
// WithImagePool names, and a claim takes one only for a job of that same
// image.

// diskKind names the tier's derived artefact: the image's EROFS disk.
const diskKind = "microvm-disk"

// diskFile is the disk's name inside the derived directory.
const diskFile = "root.erofs"

// noStore refuses an image when the tier has no resolver.
const noStore = "tier " + Name + " has no image store"

// imageModules are the guest drivers an image root needs (crc32c_generic
// and libcrc32c for erofs; a module built into the kernel is skipped).
const imageModules = "virtio_blk,crc32c_generic,libcrc32c,erofs,overlay"

// imageDevice is the image disk in the guest when it is the VM's only
// block device; beside read-grant disks the agent finds it by its serial.
const imageDevice = "vda"

// WithImages sets the resolver of the jobs' images (nil: the host view
// only, and a job naming an image is refused).
func (c Config) WithImages(r image.Resolver) Config { c.images = r; return c }

// admitImage refuses, without a resolver, a job naming an image other than
// the host view. It does not allocate.
func (t *Tier) admitImage(ref string) error {
	if t.cfg.images == nil && ref != "" && ref != image.Host {
		return &airlock.NotAdmitted{Tier: Name, Reason: noStore}
	}
	return nil
}

// heldImage is an image the tier holds, with its disk: acquired once
// from the resolver and released when its last holder (a run, a VM, a
// snapshot) lets go.
type heldImage struct {
	t       *Tier
	img     *image.Image
	disk    string
	refs    int // under t.imgMu
	release func()
}

// ref adds a holder; the caller must hold h already.
func (h *heldImage) ref() {
	h.t.imgMu.Lock()
	h.refs++
	h.t.imgMu.Unlock()
}

// unref drops a holder, releasing the image after the last.
func (h *heldImage) unref() {
	t := h.t
	t.imgMu.Lock()
	h.refs--
	last := h.refs == 0
	if last && t.held[h.img.Digest] == h {
		delete(t.held, h.img.Digest)
	}
	t.imgMu.Unlock()
	if last {
		h.release()
	}
}

// digestOf is the image digest of a VM's root ("": the initramfs).
func digestOf(h *heldImage) string {
	if h == nil {
		return ""
	}
	return h.img.Digest
}

// imageFor resolves a job's image reference. A nil image with a nil error
// is the host view; digest is then image.Host with a resolver and "" without
// one (Result.Image). The caller unrefs the image it gets. An unknown or
// malformed reference is the job's fault (*airlock.InvalidJob), anything
// else the tier's.
func (t *Tier) imageFor(ctx context.Context, ref string) (h *heldImage, digest string, err error) {
	if t.cfg.images == nil {
		return nil, "", t.admitImage(ref)
	}
	img, release, err := t.cfg.images.Acquire(ctx, ref)
	if err != nil {
		var ie *image.Error
		if errors.As(err, &ie) && ie.Invalid {
			return nil, "", jobs.Invalid("image", "%v", err)
		}
		return nil, "", fmt.Errorf("acquiring image: %w", err)
	}
	if release == nil {
		release = func() {}
	}
	if img == nil {
		release()
		return nil, "", errors.New("acquiring image: the store returned none")
	}
	if img.IsHost() {
		release()
		return nil, image.Host, nil
	}
	h, err = t.hold(ctx, img, release)
	if err != nil {
		return nil, "", err
	}
	return h, img.Digest, nil
}

// hold registers an acquired image with the tier, building its disk on
// first use; an image the tier holds already gets another holder and the
// new acquisition is released.
func (t *Tier) hold(ctx context.Context, img *image.Image, release func()) (*heldImage, error) {
	t.imgMu.Lock()
	if h := t.held[img.Digest]; h != nil {
		h.refs++
		t.imgMu.Unlock()
		release()
		return h, nil
	}
	t.imgMu.Unlock()
	disk, err := t.diskFor(ctx, img)
	if err != nil {
		release()
		return nil, fmt.Errorf("image %s: building its disk: %w", img.Ref, err)
	}
	t.imgMu.Lock()
	defer t.imgMu.Unlock()
	if h := t.held[img.Digest]; h != nil { // held meanwhile by another run
		h.refs++
		release()
		return h, nil
	}
	h := &heldImage{t: t, img: img, disk: disk, refs: 1, release: release}
	if t.held == nil {
		t.held = map[string]*heldImage{}
	}
	t.held[img.Digest] = h
	return h, nil
}

// defaultImage holds the resolver's default image, for the warm starts
// (nil: the host view, or no resolver).
func (t *Tier) defaultImage(ctx context.Context) (*heldImage, error) {
	if t.cfg.images == nil {
		return nil, nil
	}
	h, _, err := t.imageFor(ctx, "")
	return h, err
}

// diskFor returns the path of img's disk, built once per image by the
// resolver.
func (t *Tier) diskFor(ctx context.Context, img *image.Image) (string, error) {
	dir, err := t.cfg.images.Derive(ctx, img, diskKind, func(dir string) error {
		return buildDisk(ctx, img.Root, filepath.Join(dir, diskFile))
	})
	if err != nil {
		return "", err
	}
	disk := filepath.Join(dir, diskFile)
	if _, err := os.Stat(disk); err != nil {
		return "", err
	}
	return disk, nil
}

// buildDisk writes root as an uncompressed EROFS image: every file owned
// by root (the unpacked owners mean nothing in the guest), modes and
// modification times as in the image (interpreters compare the latter
// with their caches').
func buildDisk(ctx context.Context, root, out string) error {
	mkfs, err := findMkfsErofs()
	if err != nil {
		return err
	}
	st, err := os.Stat(root)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("image root %s is not a directory", root)
	}
	cmd := exec.CommandContext(ctx, mkfs, "--quiet", "--all-root", "--preserve-mtime", out, root)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.erofs: %w: %s", err, lastLine(msg))
	}
	return nil
}

// findMkfsErofs finds mkfs.erofs (Debian's erofs-utils), which is in
// /usr/sbin, off many users' PATH.
func findMkfsErofs() (string, error) {
	if p, err := exec.LookPath("mkfs.erofs"); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(d, "mkfs.erofs")
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("mkfs.erofs not found (install erofs-utils: scripts/setup-microvm.sh)")
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// imageEnv is a job's whole environment in img (see image.Image.Environ),
// the job's secrets overriding any variable of the same name.
func imageEnv(img *image.Image, secrets map[string]string) map[string]string {
	over := make([]string, 0, len(secrets))
	for k, v := range secrets {
		over = append(over, k+"="+v)
	}
	env := make(map[string]string)
	for _, kv := range img.Environ(over...) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}
