package microvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/hostpath"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

// Read grants.
//
// A guest shares no file system with the host. Each path of
// grants.fs.read is copied, when the job starts, into a read-only EROFS
// disk of its own (mkfs.erofs, every file owned by root, modes, links and
// modification times as on the host) in the run's directory, which the
// VM is booted with (virtio-blk, readonly=on, named by its serial) and
// the agent mounts read-only, nosuid and nodev at the grant's guest path
// in the job's root: its host path, or where grants.fs.at places it (see
// the agent's read.go). The job sees the path as it was when the job
// started: a snapshot, not a live view. The host side opens the path
// refusing any symbolic link on the way (internal/hostpath) and builds
// the disk from that descriptor, so a link swapped in after the check is
// never followed; links inside the granted directory are copied as links
// and resolve in the guest, where nothing of the host is.
//
// A grant listed in grants.fs.copy is a writable copy: its disk is built
// the same way but with every file owned by the job's user, and the agent
// lays an overlay on it whose upper layer is a tmpfs of scratch_mb. What
// the job changes lives in guest memory and vanishes with the VM; the
// disk itself is read-only to the VMM, and nothing goes back to the host.
// The copy counts against scratch_mb: copies whose files together are
// larger are an invalid job, and the writes into them are bounded by it.
//
// A path larger than the caps below, or of another kind than a directory
// or a regular file, is not admitted, nor a grant placed at the guest's
// "/". A job with read grants boots cold: the pool's VMs and the snapshot
// have no such disks.

// The caps on what one job's read grants may copy into the guest.
const (
	maxReadBytes   = 1 << 30
	maxReadEntries = 100_000
)

// readSerial names read grant i's disk; virtio-blk serials hold 20 bytes.
func readSerial(i int) string { return "airlock-read-" + strconv.Itoa(i) }

// readModules are the guest drivers read-grant disks need; copyModules
// what copy grants need beside them.
const (
	readModules = "virtio_blk,crc32c_generic,libcrc32c,erofs"
	copyModules = "overlay"
)

// hasCopy says whether one of reads is a copy grant.
func hasCopy(reads []readDisk) bool {
	for _, r := range reads {
		if r.Copy {
			return true
		}
	}
	return false
}

// readDisk is one read grant's disk, built for one run.
type readDisk struct {
	wire.Read
	disk string
}

// errOpen is measureRead's answer for a path that does not open.
var errOpen = errors.New("does not open")

// readSize is what a granted path would copy into the guest.
type readSize struct {
	file           bool
	bytes, entries int64
}

// admitReads says why the job's read paths cannot be shown in a VM ("" if
// they can): none may land on the guest's "/", each must be a directory
// or a regular file, and all of them together fit the caps. A path that
// does not open (missing, or through a link) is left to Run, which
// reports it as an invalid job, as every tier does.
func admitReads(g airlock.FSGrant) string {
	var total readSize
	for _, p := range g.Read {
		if g.GuestPath(p) == "/" {
			return "host read path " + p + " cannot be shown at / in the VM (it would replace the job's root)"
		}
		sz, err := measureRead(p, maxReadBytes-total.bytes, maxReadEntries-total.entries)
		if errors.Is(err, errOpen) {
			continue
		}
		if err != nil {
			return "host read path " + err.Error()
		}
		total.bytes += sz.bytes
		total.entries += sz.entries
	}
	return ""
}

// checkCopies refuses, as an invalid job, copy grants whose regular files
// together are larger than the job's scratch of scratchMB MiB: the copy
// counts against it. A path that does not open is left to buildReads.
func checkCopies(g airlock.FSGrant, scratchMB int64) error {
	var total int64
	for _, p := range g.Copy {
		sz, err := measureRead(p, maxReadBytes, maxReadEntries)
		if errors.Is(err, errOpen) {
			continue
		}
		if err != nil {
			return jobs.Invalid("grants.fs.copy", "%v", err)
		}
		total += sz.bytes
		if total > scratchMB<<20 {
			return jobs.Invalid("grants.fs.copy", "%s does not fit in the scratch: the copies hold %.1f MiB, grants.fs.scratch_mb is %d", p, float64(total)/(1<<20), scratchMB)
		}
	}
	return nil
}

// measureRead sizes the path p, stopping once it is over the budget left.
func measureRead(p string, bytesLeft, entriesLeft int64) (readSize, error) {
	fd, err := hostpath.Open(p)
	if err != nil {
		return readSize{}, errOpen
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return readSize{}, fmt.Errorf("%s: %w", p, err)
	}
	over := func(sz readSize) error {
		if sz.bytes > bytesLeft || sz.entries > entriesLeft {
			return fmt.Errorf("%s is over the microvm tier's cap for read grants (%d MiB and %d files in all: each is copied into the VM)", p, maxReadBytes>>20, maxReadEntries)
		}
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		sz := readSize{file: true, bytes: st.Size, entries: 1}
		return sz, over(sz)
	case unix.S_IFDIR:
	default:
		return readSize{}, fmt.Errorf("%s is neither a directory nor a regular file", p)
	}
	root, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return readSize{}, fmt.Errorf("%s: %w", p, err)
	}
	defer root.Close()
	var sz readSize
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		sz.entries++
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			sz.bytes += info.Size()
		}
		return over(sz)
	})
	if err != nil {
		return readSize{}, err
	}
	return sz, nil
}

// buildReads builds the job's read-grant disks in dir.
func buildReads(ctx context.Context, dir string, g airlock.FSGrant) ([]readDisk, error) {
	disks := make([]readDisk, 0, len(g.Read))
	for i, p := range g.Read {
		d := readDisk{
			Read: wire.Read{Path: g.GuestPath(p), Serial: readSerial(i), Copy: slices.Contains(g.Copy, p)},
			disk: filepath.Join(dir, "read-"+strconv.Itoa(i)+".erofs"),
		}
		stage := filepath.Join(dir, "read-"+strconv.Itoa(i)+".d")
		file, err := buildRead(ctx, p, path.Base(d.Path), d.Copy, d.disk, stage)
		if err != nil {
			return nil, jobs.Invalid("grants.fs.read", "%s: %v", p, err)
		}
		d.File = file
		disks = append(disks, d)
	}
	return disks, nil
}

// buildRead writes the disk of the path p to out, every file owned by
// root, or by the job's user for a copy. A directory is built from the
// descriptor opened without following a link; a file is first copied,
// through that descriptor, into the staging directory stage, as name.
func buildRead(ctx context.Context, p, name string, writable bool, out, stage string) (file bool, err error) {
	fd, err := hostpath.Open(p)
	if err != nil {
		return false, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	src := "/proc/self/fd/3/."
	var extra []*os.File
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		extra = []*os.File{f}
	case unix.S_IFREG:
		file = true
		if writable && st.Mode&0o004 == 0 {
			return false, fmt.Errorf("the job could not read it, so it cannot be copied")
		}
		if err := copyGranted(fd, st, filepath.Join(stage, name), stage); err != nil {
			return false, err
		}
		defer os.RemoveAll(stage)
		src = stage
	default:
		return false, fmt.Errorf("neither a directory nor a regular file")
	}
	mkfs, err := findMkfsErofs()
	if err != nil {
		return false, err
	}
	owner := []string{"--all-root"}
	if writable {
		uid := strconv.Itoa(wire.JobUID)
		owner = []string{"--force-uid=" + uid, "--force-gid=" + uid}
		if !file {
			if st.Mode&0o005 != 0o005 {
				return false, fmt.Errorf("the job could not list it, so it cannot be copied")
			}
			left, err := copyExcluded(fd)
			if err != nil {
				return false, err
			}
			for _, rel := range left {
				owner = append(owner, "--exclude-path="+rel)
			}
		}
	}
	args := append([]string{"--quiet"}, owner...)
	cmd := exec.CommandContext(ctx, mkfs, append(args, "--preserve-mtime", out, src)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	cmd.ExtraFiles = extra
	if msg, err := cmd.CombinedOutput(); err != nil {
		return false, fmt.Errorf("mkfs.erofs: %w: %s", err, lastLine(msg))
	}
	// The tree may have grown since it was measured.
	if info, err := os.Stat(out); err != nil {
		return false, err
	} else if info.Size() > maxReadBytes+maxReadEntries*4096 {
		return false, fmt.Errorf("grew over the microvm tier's cap for read grants while it was copied")
	}
	return file, nil
}

// copyExcluded lists, relative to the directory open as fd, what a copy
// grant leaves out: a copy belongs to the job, so it holds only what the
// job could read of the read-only grant (whose files are root's, modes
// kept): world-readable regular files and directories it may enter, no
// links, devices, pipes or sockets; a directory left out takes its tree.
// As on the process tier, a tree that changes meanwhile is copied as
// mkfs finds it.
func copyExcluded(fd int) ([]string, error) {
	root, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var left []string
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m := info.Mode()
		switch {
		case m.IsDir() && m.Perm()&0o005 != 0o005:
			left = append(left, name)
			return fs.SkipDir
		case m.IsDir():
		case !m.IsRegular() || m.Perm()&0o004 == 0:
			left = append(left, name)
		}
		return nil
	})
	return left, err
}

// copyGranted copies the regular file open (O_PATH) as fd, of status st,
// to dst in a new directory stage, with its mode and modification time.
func copyGranted(fd int, st unix.Stat_t, dst, stage string) error {
	if err := os.Mkdir(stage, 0o700); err != nil {
		return err
	}
	in, err := os.Open("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(st.Mode&0o777))
	if err != nil {
		return err
	}
	n, err := io.Copy(out, io.LimitReader(in, maxReadBytes+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if n > maxReadBytes {
		return fmt.Errorf("grew over the microvm tier's cap for read grants while it was copied")
	}
	if err := os.Chmod(dst, os.FileMode(st.Mode&0o777)); err != nil {
		return err
	}
	mtime := unix.NsecToTimespec(st.Mtim.Nano())
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, []unix.Timespec{mtime, mtime}, 0)
}
