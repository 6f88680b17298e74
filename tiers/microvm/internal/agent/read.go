//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

// Read grants. The host boots a guest whose job is granted host paths
// with one read-only EROFS disk per path (a snapshot of it, built on the
// host), each named by its virtio serial. Before the job starts the agent
// mounts each disk (read-only, nosuid, nodev) at a staging point, binds it
// (or, for a file, the one file in it) onto the granted path in the job's
// root, and drops the staging mount. The bind keeps the staging mount's
// flags, and the file system is read-only in itself: nothing the job does
// writes to it. Links in the disk are the host's links, resolved in the
// guest, where the job's root holds nothing of the host.
//
// A copy grant (Read.Copy) is made writable by an overlay: the disk is
// its lower layer, and its upper and work directories live in one tmpfs
// of the job's scratch size shared by every copy grant (nosuid, nodev),
// so the job's changes stay in guest memory, bounded by the scratch size,
// and vanish with the VM. The disk's files are owned by the job's user
// (the host built it so), and the upper directory takes the owner and
// mode of the disk's root, so the job may change what the copy holds as
// it could its own files.
//
// The mount point is made in the job's root one component at a time,
// never following a link: a path that passes through a link or a
// non-directory in the root (an image's /lib -> usr/lib, say) is refused,
// so a mount never lands outside the place the path names.

// readStage is where the grant disks are mounted before they are bound
// into the job's root (a directory of the initramfs, made before the root
// turns read-only).
const readStage = "/grants"

// copyStage is where the copy grants' tmpfs is mounted (in readStage).
const copyStage = readStage + "/copy"

// mountReads shows each read grant at its path in root ("/" or the image
// root); copy grants' changes get a tmpfs of scratchMB MiB.
func mountReads(root string, reads []wire.Read, scratchMB int64) error {
	if len(reads) == 0 {
		return nil
	}
	if err := unix.Mount("tmpfs", readStage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,mode=0700"); err != nil {
		return fmt.Errorf("mounting %s: %w", readStage, err)
	}
	defer unix.Unmount(readStage, unix.MNT_DETACH)
	if slices.ContainsFunc(reads, func(r wire.Read) bool { return r.Copy }) {
		if err := os.Mkdir(copyStage, 0o700); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", copyStage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%dm,mode=0700", max(scratchMB, 1))); err != nil {
			return fmt.Errorf("mounting the copy grants' tmpfs: %w", err)
		}
	}
	// The mount points are made with the root writable for a moment; the
	// job has not started.
	if err := remountRoot(root, false); err != nil {
		return err
	}
	defer remountRoot(root, true)
	for i, r := range reads {
		if err := mountRead(root, i, r); err != nil {
			return fmt.Errorf("read grant %s: %w", r.Path, err)
		}
	}
	return remountRoot(root, true)
}

func mountRead(root string, i int, r wire.Read) error {
	p := path.Clean(r.Path)
	if !path.IsAbs(p) || p == "/" || p != r.Path {
		return errors.New("not a clean absolute path below /")
	}
	dev, err := waitSerial(r.Serial, 5*time.Second)
	if err != nil {
		return err
	}
	stage := filepath.Join(readStage, strconv.Itoa(i))
	if err := os.Mkdir(stage, 0o755); err != nil {
		return err
	}
	const flags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
	if err := unix.Mount(dev, stage, "erofs", flags, ""); err != nil {
		return fmt.Errorf("mounting its disk: %w", err)
	}
	defer unix.Unmount(stage, unix.MNT_DETACH)
	src := stage
	if r.Copy {
		if src, err = overlayCopy(stage, i); err != nil {
			return err
		}
		defer unix.Unmount(src, unix.MNT_DETACH)
	}
	if r.File {
		src = filepath.Join(src, path.Base(p))
	}
	target, err := mountPoint(root, p, r.File)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	// Through the descriptor: the mount lands on the object the walk
	// opened, whatever the path names by now.
	if err := unix.Mount(src, "/proc/self/fd/"+strconv.Itoa(target), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding it into the job's root: %w", err)
	}
	return nil
}

// overlayCopy mounts a writable overlay of the disk mounted at lower (copy
// grant i), its changes in copyStage, and returns where.
func overlayCopy(lower string, i int) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(lower, &st); err != nil {
		return "", err
	}
	layers := filepath.Join(copyStage, strconv.Itoa(i))
	upper, work := filepath.Join(layers, "upper"), filepath.Join(layers, "work")
	for _, d := range []string{layers, upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", err
		}
	}
	// The copy's root is the upper directory: it takes the disk root's
	// owner and mode.
	if err := os.Chown(upper, int(st.Uid), int(st.Gid)); err != nil {
		return "", err
	}
	if err := unix.Chmod(upper, st.Mode&0o7777); err != nil {
		return "", err
	}
	merged := lower + ".copy"
	if err := os.Mkdir(merged, 0o755); err != nil {
		return "", err
	}
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("mounting its writable overlay: %w", err)
	}
	return merged, nil
}

// mountPoint opens (O_PATH) the object at p in root, making what is
// missing: directories, and for a file grant an empty file last. A link,
// or something other than a directory on the way, is refused.
func mountPoint(root, p string, file bool) (int, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, name := range parts {
		last := i == len(parts)-1
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			if last && file {
				err = makeFile(fd, name)
			} else {
				err = unix.Mkdirat(fd, name, 0o755)
			}
			if err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return -1, fmt.Errorf("making its mount point: %w", err)
			}
			next, err = unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("opening its mount point: %w", err)
		}
		fd = next
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		want := uint32(unix.S_IFDIR)
		if last && file {
			want = unix.S_IFREG
		}
		if st.Mode&unix.S_IFMT != want {
			unix.Close(fd)
			shown := "/" + strings.Join(parts[:i+1], "/")
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return -1, fmt.Errorf("%s is a symbolic link in the job's root", shown)
			}
			return -1, fmt.Errorf("%s in the job's root is not a %s", shown, map[bool]string{true: "file", false: "directory"}[last && file])
		}
	}
	return fd, nil
}

func makeFile(dir int, name string) error {
	f, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	return unix.Close(f)
}

// remountRoot turns the job's root read-only or writable.
func remountRoot(root string, ro bool) error {
	var flags uintptr = unix.MS_REMOUNT
	if root != "/" {
		// The image root is a bind mount of its overlay (see mountImage).
		flags |= unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV
	}
	if ro {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", root, "", flags, ""); err != nil {
		return fmt.Errorf("remounting the job's root: %w", err)
	}
	return nil
}

// serialDevice returns the device node of the virtio disk whose serial is
// serial ("": none yet).
func serialDevice(serial string) string {
	names, _ := filepath.Glob("/sys/block/vd*/serial")
	for _, n := range names {
		if b, err := os.ReadFile(n); err == nil && strings.TrimSpace(string(b)) == serial {
			dev := "/dev/" + filepath.Base(filepath.Dir(n))
			if _, err := os.Stat(dev); err == nil {
				return dev
			}
		}
	}
	return ""
}

// waitSerial waits for the virtio disk whose serial is serial and returns
// its device node.
func waitSerial(serial string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		if dev := serialDevice(serial); dev != "" {
			return dev, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("its disk (serial %s) did not appear", serial)
		}
		time.Sleep(time.Millisecond)
	}
}
