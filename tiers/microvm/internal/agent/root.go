//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

// An image root. When the host boots the guest with an image disk it says
// so on the kernel command line (airlock.root=<block device name>); the
// agent then mounts that disk (EROFS, read-only: it is the image, built
// once per image digest and shared by every VM of that image), lays a
// small in-memory overlay on it for the few files the agent itself adds,
// mounts /proc, /dev, /tmp, /scratch (and the egress CA's directory)
// inside, turns the whole root read-only, and the shim chroots into it
// before it drops to the job's user. The agent itself stays in the
// initramfs, where its control port, modules and cgroups are. The
// image's own files are never written: the disk is read-only to the VMM
// and to the guest kernel.
const (
	imageLower = "/image/lower"
	imageRW    = "/image/rw" // tmpfs: the overlay's upper and work dirs
	imageRoot  = "/newroot"
	// imageUpperMB bounds the overlay's upper layer: it holds only what
	// the agent writes (the /etc files below, mount points), never the
	// job's writes, which go to /scratch and /tmp.
	imageUpperMB = 4
)

// etcSynth are the files of the image's /etc the sandbox replaces: they
// must neither leak the host's facts nor let an image widen anything (a
// user table naming the job's uid, say).
var etcSynth = map[string]string{
	"passwd":   "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/scratch:/bin/sh\n",
	"group":    "root:x:0:\nnogroup:x:65534:\n",
	"hosts":    "127.0.0.1\tlocalhost airlock\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	"hostname": "airlock\n",
	// Nothing in the guest answers DNS: egress goes through the proxy.
	"resolv.conf": "nameserver 127.0.0.1\n",
}

// rootDevice is the block device the host named as the image root ("":
// none, the initramfs is the job's root).
func rootDevice() string {
	dev := cmdlineFlag("airlock.root")
	if dev == "" || strings.ContainsAny(dev, "/.") {
		return ""
	}
	return dev
}

// prepareImageDirs makes the mount points an image root needs in the
// initramfs, before its root turns read-only.
func prepareImageDirs() error {
	for _, d := range []string{imageLower, imageRW, imageRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// mountImage assembles the job's root at imageRoot from the disk dev (its
// driver and the file system modules are loaded by then).
func mountImage(dev string) error {
	node := "/dev/" + dev
	// A VM with read-grant disks too names the image's by serial: the
	// disks' names follow the order the kernel probed them in. (The
	// drivers are loaded, and loading them probed every disk.)
	if d := serialDevice(wire.RootSerial); d != "" {
		node = d
	}
	if err := waitPath(node, 5*time.Second); err != nil {
		return err
	}
	// nodev and nosuid: the image is foreign content; a device node or a
	// set-uid file in it must not open anything to the job.
	const foreign = unix.MS_NOSUID | unix.MS_NODEV
	if err := unix.Mount(node, imageLower, "erofs", unix.MS_RDONLY|foreign, ""); err != nil {
		return fmt.Errorf("mounting the image disk: %w", err)
	}
	if err := unix.Mount("tmpfs", imageRW, "tmpfs", foreign, fmt.Sprintf("size=%dm,mode=0700", imageUpperMB)); err != nil {
		return fmt.Errorf("mounting the overlay's upper layer: %w", err)
	}
	for _, d := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(imageRW, d), 0o755); err != nil {
			return err
		}
	}
	opts := "lowerdir=" + imageLower + ",upperdir=" + imageRW + "/upper,workdir=" + imageRW + "/work"
	if err := unix.Mount("overlay", imageRoot, "overlay", foreign, opts); err != nil {
		return fmt.Errorf("mounting the overlay: %w", err)
	}
	// The mount points and /etc are made real directories of the overlay:
	// a mount or a write through a link the image planted would land
	// outside the root.
	for _, d := range []string{"proc", "dev", "tmp", "scratch", "etc", "etc/airlock"} {
		if err := realDir(filepath.Join(imageRoot, d)); err != nil {
			return err
		}
	}
	for name, content := range etcSynth {
		p := filepath.Join(imageRoot, "etc", name)
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o644)
		if err != nil {
			return err
		}
		_, err = f.WriteString(content)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	binds := []struct{ src, dst string }{
		{"/dev", "dev"}, {scratchDir, "scratch"}, {"/tmp", "tmp"}, {caDir, "etc/airlock"},
	}
	for _, b := range binds {
		// Recursive: /dev brings its /dev/shm.
		if err := unix.Mount(b.src, filepath.Join(imageRoot, b.dst), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("mounting %s in the image root: %w", b.dst, err)
		}
	}
	if err := unix.Mount("proc", filepath.Join(imageRoot, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc in the image root: %w", err)
	}
	if err := unix.Mount("", imageRoot, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|foreign, ""); err != nil {
		return fmt.Errorf("making the image root read-only: %w", err)
	}
	_ = unix.Sethostname([]byte("airlock"))
	return nil
}

// realDir makes p a directory of its own: an entry of another kind (a
// link, a file) is removed first (the overlay hides it; the image keeps
// it).
func realDir(p string) error {
	st, err := os.Lstat(p)
	switch {
	case err == nil && st.IsDir():
		return nil
	case err == nil:
		if err := os.Remove(p); err != nil {
			return err
		}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	return os.Mkdir(p, 0o755)
}

// waitPath waits for a device node to appear (devtmpfs adds it once the
// driver has probed the device).
func waitPath(p string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		if _, err := os.Stat(p); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear", p)
		}
		time.Sleep(time.Millisecond)
	}
}
