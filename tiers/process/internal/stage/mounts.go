package stage

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The sandbox's root is a small tmpfs, read-only once built, holding:
//
//	/usr                      the host's, bound read-only
//	/bin /sbin /lib /lib64 …  the host's symlinks into /usr (merged /usr), or read-only binds
//	/etc                      a curated few files bound read-only, plus synthesised
//	                          passwd, group, hosts and hostname (see etcAllow)
//	/dev                      a tmpfs with null, zero, full, random, urandom bound from the host
//	/proc                     a fresh procfs of the sandbox's PID namespace
//	/scratch                  the writable scratch (tmpfs capped at scratch_mb, or a
//	                          session's / workspace's directory), the working directory
//	/tmp                      a tmpfs of its own, of the scratch's size
//	granted fs.read paths     bound read-only at their guest paths (their own
//	                          unless grants.fs.at places them), or, for
//	                          grants.fs.copy, a writable copy bound there
//	                          (see copy.go)
//
// Nothing else of the host is reachable: no /home, /root, /var, /run, /sys,
// no host sockets, no other /etc files.
//
// With an image (BaseSpec.RootFd), the image takes the place of the host's
// /usr, its links and /etc: its own tree, read-only (see imageRoot), with
// its /etc merged under the synthesised passwd, group, hosts, hostname and
// resolv.conf; /dev, /proc, /scratch, /tmp and the granted paths as above.
// The image's /dev, /proc, /sys, /tmp and /scratch are not used.

// usrLinks are the top-level directories that are symlinks into /usr on a
// merged-/usr system and directories elsewhere.
var usrLinks = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// HostViewDir returns the host directory the host view shows at p's top
// (/usr, /lib…) when p lies below one: a mount point missing there would
// have to be made in the host's own directory.
func HostViewDir(p string) (string, bool) {
	for _, d := range append([]string{"usr"}, usrLinks...) {
		if strings.HasPrefix(p, "/"+d+"/") {
			return "/" + d, true
		}
	}
	return "", false
}

// etcAllow is what of the host's /etc a sandbox sees: what the dynamic
// loader, name-service switch, locale, time zone, TLS roots and common
// interpreters need. Nothing that holds credentials (shadow, ssh keys,
// ssl/private, machine-id, environment, …).
var etcAllow = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "localtime", "alternatives",
	"ssl/certs", "ca-certificates", "mime.types", "protocols", "services", "python3", "bash.bashrc",
	"inputrc", "profile", "debian_version", "os-release", "magic", "perl",
}

// Synthesised files: the sandbox's root is uid 0 inside and nobody owns
// anything else.
var etcSynth = map[string]string{
	"passwd":   "root:x:0:0:root:/scratch:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
	"group":    "root:x:0:\nnogroup:x:65534:\n",
	"hosts":    "127.0.0.1\tlocalhost airlock\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	"hostname": "airlock\n",
	// The egress forwarder answers DNS on loopback when the job has a net
	// grant; without one nothing listens there and every lookup fails.
	"resolv.conf": "nameserver 127.0.0.1\n",
}

var devNodes = []string{"null", "zero", "full", "random", "urandom"}

// newRootDir is where the root is assembled inside the stage's private
// mount namespace (it hides the host's directory there only).
const newRootDir = "/tmp"

// rootLayout is what buildRoot made that the Landlock rules follow.
type rootLayout struct {
	// image: the root is an image's, not the host view.
	image bool
	// exec are an image's top-level directories and files, readable and
	// executable (the host view's are /usr and its links).
	exec []string
}

func buildRoot(base *BaseSpec) (rootLayout, error) {
	var lay rootLayout
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return lay, fmt.Errorf("making mounts private: %w", err)
	}
	// Open the host directories before the root tmpfs covers anything.
	r := newRootDir
	// noatime: nothing needs the root's access times, and an access-time
	// update (the first time a fresh symlink such as /lib is followed, or
	// a directory read) briefly counts as a writer, which makes the
	// read-only remount below fail with EBUSY if it coincides — the
	// forwarder of a net-capable sandbox runs in this namespace meanwhile.
	if err := unix.Mount("tmpfs", r, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "size=8m,mode=0755"); err != nil {
		return lay, fmt.Errorf("mounting root tmpfs: %w", err)
	}
	root := r
	if base.RootFd > 0 {
		var err error
		if root, lay.exec, err = imageRoot(r, base); err != nil {
			return lay, err
		}
		lay.image = true
	} else if err := hostRoot(r, base); err != nil {
		return lay, err
	}
	if err := buildDev(path.Join(root, "dev")); err != nil {
		return lay, err
	}
	if err := mkdirExisting(path.Join(root, "proc"), 0o555); err != nil {
		return lay, err
	}
	if err := unix.Mount("proc", path.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return lay, fmt.Errorf("mounting /proc: %w", err)
	}
	scratch := path.Join(root, "scratch")
	if err := mkdirExisting(scratch, 0o755); err != nil {
		return lay, err
	}
	copies, err := makeCopies(r, base)
	if err != nil {
		return lay, err
	}
	if copies != nil && copies.scratch != "" {
		// The scratch shares the copies' tmpfs (and its cap).
		if err := unix.Mount(copies.scratch, scratch, "", unix.MS_BIND, ""); err != nil {
			return lay, fmt.Errorf("binding scratch: %w", err)
		}
	} else if base.HasScratch {
		err := unix.MoveMount(FdScratch, "", unix.AT_FDCWD, scratch, unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(FdScratch)
		if err != nil {
			return lay, fmt.Errorf("attaching scratch: %w", err)
		}
	} else {
		opts := ScratchSize(base.ScratchMB) + ",mode=0755"
		if err := unix.Mount("tmpfs", scratch, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return lay, fmt.Errorf("mounting scratch: %w", err)
		}
	}
	if err := mkdirExisting(path.Join(root, "tmp"), 0o755); err != nil {
		return lay, err
	}
	// /tmp is a directory of its own, as on every tier: what a program
	// puts there is not in its working directory nor collected from it.
	// It has the scratch's size (resizeScratch follows a job's).
	if err := unix.Mount("tmpfs", path.Join(root, "tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, ScratchSize(base.ScratchMB)+",mode=1777"); err != nil {
		return lay, fmt.Errorf("mounting /tmp: %w", err)
	}
	for i, b := range base.Binds {
		if b.Copy {
			err = bindCopy(root, b, copies.copies[i])
		} else {
			err = bindGranted(root, b, lay.image)
		}
		if err != nil {
			return lay, err
		}
	}
	if err := copies.release(); err != nil {
		return lay, err
	}
	if err := pivot(root); err != nil {
		return lay, err
	}
	// An image's root is a read-only overlay already.
	if !lay.image {
		if err := remountReadOnly("/", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME); err != nil {
			return lay, fmt.Errorf("making root read-only: %w", err)
		}
	}
	if err := unix.Sethostname([]byte("airlock")); err != nil {
		return lay, fmt.Errorf("setting hostname: %w", err)
	}
	return lay, os.Chdir("/scratch")
}

// hostRoot fills the root tmpfs r with the host view: /usr and its
// top-level links, and /etc (the parent's template, or built here).
func hostRoot(r string, base *BaseSpec) error {
	if err := bindRO("/usr", path.Join(r, "usr"), true); err != nil {
		return err
	}
	for _, name := range usrLinks {
		host := "/" + name
		st, err := os.Lstat(host)
		switch {
		case err != nil:
			continue
		case st.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(host)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, path.Join(r, name)); err != nil {
				return err
			}
		case st.IsDir():
			if err := bindRO(host, path.Join(r, name), true); err != nil {
				return err
			}
		}
	}
	if base.EtcFd > 0 {
		err := attachTree(base.EtcFd, path.Join(r, "etc"))
		unix.Close(base.EtcFd)
		if err != nil {
			return fmt.Errorf("attaching /etc: %w", err)
		}
		return nil
	}
	return buildEtc(path.Join(r, "etc"))
}

// imageHidden are an image's top-level entries the sandbox does not take
// from it: what buildRoot mounts its own (/dev, /proc, /tmp, /scratch),
// the host's kernel interface (/sys, never mounted), /etc, which is
// the image's merged with the synthesised files, and /.airlock, the
// gVisor agent's mount points (image.MountPoints).
var imageHidden = map[string]bool{"dev": true, "proc": true, "sys": true, "tmp": true, "scratch": true, "etc": true, ".airlock": true}

// imageRoot assembles an image's root at r/root and returns it with the
// image's top-level entries that Landlock lets the program read and
// execute. The root is one read-only overlay: a skeleton on top — the
// mount points of what buildRoot mounts (/dev, /proc, /scratch, /tmp, the
// granted paths) and /etc's synthesised files — over the image (the
// parent's detached, read-only clone of it). One overlay mount rather than
// a bind per top-level entry: measured in a user namespace, the overlay
// costs ≈ 0.14 ms and a bind ≈ 0.03 ms, so a Debian root's ten top-level
// directories cost twice as much bound; the image's /etc merges with the
// synthesised files without a mount per entry; and a granted path's mount
// point can be made inside an image directory, which a read-only bind
// could not take. Nothing of the host's /usr or /etc is in it.
func imageRoot(r string, base *BaseSpec) (string, []string, error) {
	img, skel, root := path.Join(r, "image"), path.Join(r, "skel"), path.Join(r, "root")
	err := attachTree(base.RootFd, img)
	unix.Close(base.RootFd)
	if err != nil {
		return "", nil, fmt.Errorf("attaching the image: %w", err)
	}
	entries, err := os.ReadDir(img)
	if err != nil {
		return "", nil, fmt.Errorf("reading the image's root (it must be readable and searchable by others): %w", err)
	}
	var exec []string
	for _, e := range entries {
		// A top-level link's target is covered by its own entry.
		if imageHidden[e.Name()] || e.Type()&os.ModeSymlink != 0 {
			continue
		}
		if e.IsDir() || e.Type().IsRegular() {
			exec = append(exec, "/"+e.Name())
		}
	}
	for _, d := range []string{"dev", "proc", "scratch", "tmp", "etc"} {
		if err := os.MkdirAll(path.Join(skel, d), 0o755); err != nil {
			return "", nil, err
		}
	}
	for name, content := range etcSynth {
		if err := os.WriteFile(path.Join(skel, "etc", name), []byte(content), 0o644); err != nil {
			return "", nil, err
		}
	}
	for _, b := range base.Binds {
		if err := imageMountPoint(img, skel, b); err != nil {
			return "", nil, fmt.Errorf("granting %s: %w", b.Target, err)
		}
	}
	if err := os.Mkdir(root, 0o755); err != nil {
		return "", nil, err
	}
	if err := unix.Mount("overlay", root, "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV,
		"lowerdir="+skel+":"+img); err != nil {
		return "", nil, fmt.Errorf("mounting the image's root: %w", err)
	}
	return root, exec, nil
}

// imageMountPoint makes a granted path's mount point in the skeleton. A
// directory of the skeleton merges with the image's of the same path, but
// would hide a link or file there: a grant beneath one is refused.
func imageMountPoint(img, skel string, b BindSpec) error {
	parts := strings.Split(strings.Trim(b.Target, "/"), "/")
	for i := 1; i < len(parts); i++ {
		p := path.Join(append([]string{img}, parts[:i]...)...)
		if st, err := os.Lstat(p); err == nil && !st.IsDir() {
			return fmt.Errorf("/%s is not a directory in the image", strings.Join(parts[:i], "/"))
		}
	}
	return mountPoint(path.Join(skel, b.Target), b.Dir)
}

// mkdirExisting makes a directory, unless it exists.
func mkdirExisting(dir string, mode os.FileMode) error {
	if err := os.Mkdir(dir, mode); err != nil && !os.IsExist(err) {
		return err
	}
	return nil
}

// remountReadOnly remounts the file system at target read-only with
// flags. It retries for a few milliseconds while the kernel refuses with
// EBUSY: another process in the namespace (the forwarder) can hold a
// writer's reference for an instant — creating a file, say; a writer that
// persists still fails it.
func remountReadOnly(target string, flags uintptr) error {
	var err error
	for range 20 {
		err = unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, "")
		if err != unix.EBUSY {
			return err
		}
		_ = unix.Nanosleep(&unix.Timespec{Nsec: 250_000}, nil)
	}
	return err
}

func FdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// BuildEtcTemplate fills dir (an empty, private tmpfs) with the sandbox's
// /etc, once, for the process package to clone into each container: what
// a stage builds itself (the process package rebuilds the template when
// /etc changes, and when it is a minute old).
func BuildEtcTemplate(dir string) error { return buildEtc(dir) }

// attachTree moves the detached mount tree fd (made by the parent with
// open_tree) to target, created as a directory.
func attachTree(fd int, target string) error {
	if err := os.Mkdir(target, 0o755); err != nil {
		return err
	}
	return unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// buildEtc makes the sandbox's /etc at etc: the allowed host entries
// (small files copied with their mode, other files and directories bound
// read-only, symlinks recreated) and the synthesised files. The copier
// may be root, so an entry is taken only where others may reach it, and a
// file only if others may read it: the job sees what a user with no claim
// on the host's files may read, as a bound file would show it.
func buildEtc(etc string) error {
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	for _, name := range etcAllow {
		host := path.Join("/etc", name)
		st, err := os.Lstat(host)
		if err != nil || !othersReach(path.Dir(host)) {
			continue
		}
		target := path.Join(etc, name)
		if err := os.MkdirAll(path.Dir(target), 0o755); err != nil {
			return err
		}
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			link, err := os.Readlink(host)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case st.Mode().IsRegular() && st.Size() <= 1<<20:
			// Small files are copied (cheaper than a bind mount each); the
			// root is read-only once built.
			if st.Mode().Perm()&0o004 == 0 {
				continue
			}
			data, err := os.ReadFile(host)
			if err != nil {
				continue
			}
			if err := os.WriteFile(target, data, 0o600); err != nil {
				return err
			}
			if err := os.Chmod(target, st.Mode().Perm()); err != nil {
				return err
			}
		default:
			if err := bindRO(host, target, st.IsDir()); err != nil {
				return err
			}
		}
	}
	for name, content := range etcSynth {
		if err := os.WriteFile(path.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// othersReach reports whether a user with no claim on them may search dir
// and each of its ancestors.
func othersReach(dir string) bool {
	for {
		st, err := os.Stat(dir)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if dir == "/" {
			return true
		}
		dir = path.Dir(dir)
	}
}

func buildDev(dev string) error {
	if err := mkdirExisting(dev, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=64k,mode=0755"); err != nil {
		return fmt.Errorf("mounting /dev: %w", err)
	}
	for _, n := range devNodes {
		if err := bindDevice("/dev/"+n, path.Join(dev, n)); err != nil {
			return err
		}
	}
	// Shared memory (POSIX semaphores, Python's multiprocessing): its
	// pages are charged to the writer's memory cgroup, so the job's memory
	// limit bounds it.
	shm := path.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o1777); err != nil {
		return err
	}
	if err := unix.Mount("shm", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777"); err != nil {
		return fmt.Errorf("mounting /dev/shm: %w", err)
	}
	for name, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, path.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

func bindDevice(host, target string) error {
	if err := mountPoint(target, false); err != nil {
		return err
	}
	if err := unix.Mount(host, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding %s: %w", host, err)
	}
	return nil
}

// bindRO binds source at target (created as a directory or an empty file)
// and makes the bind read-only, nosuid and nodev, keeping the flags the
// kernel locks for mounts inherited from a more privileged namespace.
func bindRO(source, target string, dir bool) error {
	if err := mountPoint(target, dir); err != nil {
		return err
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s: %w", source, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV) | lockedFlags(st.Flags)
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", source, err)
	}
	return nil
}

// lockedFlags maps statfs flags to the mount flags a remount must keep.
func lockedFlags(f int64) uintptr {
	var out uintptr
	for st, ms := range map[int64]uintptr{
		unix.ST_NOEXEC: unix.MS_NOEXEC, unix.ST_NOATIME: unix.MS_NOATIME,
		unix.ST_NODIRATIME: unix.MS_NODIRATIME, unix.ST_RELATIME: unix.MS_RELATIME,
	} {
		if f&st != 0 {
			out |= ms
		}
	}
	return out
}

// bindGranted attaches a granted host path — a detached, read-only clone
// of its mount tree made by the parent — at its guest path inside the
// root (its own path unless placed). In the host view, a grant of a path
// already visible at the same place through the read-only /usr is left as
// it is; an image's /usr is not the host's.
func bindGranted(root string, b BindSpec, image bool) error {
	defer unix.Close(b.Fd)
	if !image && !b.Placed && (b.Target == "/usr" || strings.HasPrefix(b.Target, "/usr/")) {
		return nil
	}
	target := path.Join(root, b.Target)
	if err := mountPoint(target, b.Dir); err != nil {
		return fmt.Errorf("granting %s: %w", b.Target, err)
	}
	if err := unix.MoveMount(b.Fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("granting %s: %w", b.Target, err)
	}
	return nil
}

// mountPoint creates target as a directory or an empty file, unless
// something is there (an image root's overlay, which takes no new files,
// has the skeleton's).
func mountPoint(target string, dir bool) error {
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	if dir {
		return os.MkdirAll(target, 0o755)
	}
	if err := os.MkdirAll(path.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// pivot makes root the root of the mount namespace and detaches the old
// one entirely (pivot_root(".", ".") as runc does: no directory for the
// old root needs to exist).
func pivot(root string) error {
	if err := os.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the host root: %w", err)
	}
	return os.Chdir("/")
}

// containerLandlock is the Landlock layer inside the container: the system
// directories (the host's /usr and its links, or an image's top-level
// entries) readable and executable, /etc, /proc and granted paths
// readable, the device nodes usable, the scratch writable; everything
// else — which should not exist in the mount namespace anyway — refused.
// The granted paths are the base spec's binds, where buildRoot put them
// (see grantRule), rather than what mountinfo lists: reading it cost the
// start ≈ 0.1 ms.
func containerLandlock(binds []BindSpec, lay rootLayout) []llRule {
	rules := []llRule{
		{Path: "/etc", Access: llRead},
		{Path: "/proc", Access: llRead},
		{Path: "/scratch", Access: rwAccess()},
		{Path: "/tmp", Access: rwAccess()},
		{Path: "/dev/shm", Access: rwAccess()},
	}
	if lay.image {
		for _, p := range lay.exec {
			rules = append(rules, llRule{Path: p, Access: llRead | llExec})
		}
	} else {
		rules = append(rules, llRule{Path: "/usr", Access: llRead | llExec})
		for _, name := range usrLinks {
			if st, err := os.Lstat("/" + name); err == nil && st.IsDir() {
				rules = append(rules, llRule{Path: "/" + name, Access: llRead | llExec})
			}
		}
	}
	rules = append(rules, llRule{Path: "/", Access: unix.LANDLOCK_ACCESS_FS_READ_DIR})
	for _, n := range devNodes {
		rules = append(rules, llRule{Path: "/dev/" + n, Access: llRead | unix.LANDLOCK_ACCESS_FS_WRITE_FILE})
	}
	for _, b := range binds {
		switch {
		case b.Copy:
			// The copy is the program's to change, wherever it is.
			rules = append(rules, llRule{Path: b.Target, Access: rwAccess()})
		case grantRule(b.Target, lay.image):
			rules = append(rules, llRule{Path: b.Target, Access: llRead})
		}
	}
	return rules
}

// grantRule reports whether a bind at target gets a read rule of its own:
// not one of the fixed layout's paths (a grant of / or /proc changes
// nothing Landlock allows) nor one beneath the host view's /usr (not
// bound), /etc, /dev or /proc.
func grantRule(target string, image bool) bool {
	switch target {
	case "/", "/etc", "/dev", "/proc", "/scratch", "/tmp":
		return false
	case "/usr":
		return image
	}
	for _, p := range []string{"/usr/", "/etc/", "/dev/", "/proc/"} {
		if strings.HasPrefix(target, p) && (p != "/usr/" || !image) {
			return false
		}
	}
	return true
}

// MountPoints lists the mount points in a process's mountinfo ("self" or
// a pid), in the file's order, unescaped.
func MountPoints(pid string) ([]string, error) {
	data, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			out = append(out, UnescapeMount(f[4]))
		}
	}
	return out, nil
}

// UnescapeMount undoes mountinfo's octal escapes (\040 for a space).
func UnescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// EmptyRoot pivots into a read-only, empty tmpfs: the worker needs nothing
// from the filesystem once its binary is loaded.
func EmptyRoot() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", newRootDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16k,mode=0555"); err != nil {
		return fmt.Errorf("mounting empty root: %w", err)
	}
	if err := pivot(newRootDir); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("making root read-only: %w", err)
	}
	return unix.Sethostname([]byte("airlock"))
}

// InodesPerMB bounds the inodes of a scratch tmpfs by its size: two per
// 4 KiB page. Empty files, directories and links take no page, only
// kernel memory; a session's scratch outlives each run's cgroup, so
// without this bound run after run could fill the host's memory with
// them, each within its own limit.
const InodesPerMB = 512

// ScratchSize is the tmpfs options that cap a scratch of mb MiB: its
// size and its inodes.
func ScratchSize(mb int64) string {
	mb = max(mb, 1)
	return fmt.Sprintf("size=%dm,nr_inodes=%d", mb, mb*InodesPerMB)
}
