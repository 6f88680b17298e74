package stage

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// execOnly is rules with execution withheld from every path but the
// program's own file, the interpreter of its first line if it is a
// script, and the ELF loader each of those names: Landlock then refuses
// (EACCES) every execve the program makes of anything else, while it may
// still fork itself (subshells, pipes of builtins) within the pids limit.
// Shared libraries are mapped, not executed, and need no rule.
//
// A rule holds an inode, so a file that may execute and that the program
// could write (a program in the scratch) is first replaced, at its path,
// by a read-only copy (seal: sealCopy in a container, filterSealer.seal
// at level 2): otherwise the program could write any binary into its own
// file and execute that.
func execOnly(rules []llRule, prog string, seal func(path string) error) ([]llRule, error) {
	out := make([]llRule, 0, len(rules)+3)
	for _, r := range rules {
		r.Access &^= llExec
		if r.Access != 0 {
			out = append(out, r)
		}
	}
	files := []string{prog}
	if interp := scriptInterpreter(prog); interp != "" {
		files = append(files, interp)
	}
	for _, f := range files[:len(files):len(files)] {
		if loader := elfLoader(f); loader != "" {
			files = append(files, loader)
		}
	}
	for _, f := range files {
		real, err := realPath(f)
		if err != nil {
			continue // nothing to execute there: the exec fails anyway
		}
		if err := seal(real); err != nil {
			return nil, fmt.Errorf("sealing %s: %w", real, err)
		}
		out = append(out, llRule{Path: real, Access: unix.LANDLOCK_ACCESS_FS_READ_FILE | llExec})
	}
	return out, nil
}

// realPath is p with every symbolic link resolved, as the kernel found
// it. (Not path/filepath: the stage's imports stay few, see
// TestBinaryRoles.)
func realPath(p string) (string, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	return os.Readlink(FdPath(fd))
}

// sealCopy replaces the regular file at path p, if it lies on a writable
// mount, by a read-only copy (copyOver). In a container the program is
// root of its namespace, so any file on a writable mount is its to write.
func sealCopy(p string) error {
	if onReadOnlyMount(p) {
		return nil
	}
	return copyOver(p)
}

// onReadOnlyMount reports whether p lies on a read-only mount.
func onReadOnlyMount(p string) bool {
	var st unix.Statfs_t
	return unix.Statfs(p, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}

// copyOver replaces the regular file at path p by a copy on a tmpfs of
// its own that is mounted read-only over it. The copy's inode is
// reachable by that path alone: unlike a read-only bind of the file
// itself, no hard link made earlier in the workspace can write to it.
// It needs CAP_SYS_ADMIN over the caller's mount namespace.
func copyOver(p string) error {
	src, err := os.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	info, err := src.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return nil // not a file the kernel would execute
	}
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "mode", "0755"); err != nil {
		return err
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return err
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return err
	}
	defer unix.Close(mnt)
	dfd, err := unix.Openat(mnt, "f", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, uint32(info.Mode().Perm()))
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(dfd), "f")
	_, err = dst.ReadFrom(src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	tree, err := unix.OpenTree(mnt, "f", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if errors.Is(err, unix.EINVAL) {
		// Older kernels (6.1, say) cannot clone a detached mount: it is
		// attached for a moment beside p first.
		tree, err = cloneAttached(mnt, path.Dir(p))
	}
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return err
	}
	return unix.MoveMount(tree, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// cloneAttached attaches the detached mount mnt at a new directory in dir
// (nothing of the job runs yet to see it), clones its file "f" from there,
// and detaches and removes it again.
func cloneAttached(mnt int, dir string) (int, error) {
	tmp, err := os.MkdirTemp(dir, ".airlock-seal-")
	if err != nil {
		return -1, err
	}
	defer os.Remove(tmp)
	if err := unix.MoveMount(mnt, "", unix.AT_FDCWD, tmp, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return -1, err
	}
	defer unix.Unmount(tmp, unix.MNT_DETACH)
	return unix.OpenTree(unix.AT_FDCWD, tmp+"/f", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
}

// scriptInterpreter returns the absolute interpreter a "#!" first line
// names, or "".
func scriptInterpreter(prog string) string {
	f, err := os.Open(prog)
	if err != nil {
		return ""
	}
	defer f.Close()
	line, _ := bufio.NewReaderSize(f, 256).ReadString('\n')
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return ""
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || !strings.HasPrefix(fields[0], "/") {
		return ""
	}
	return fields[0]
}

// elfLoader returns the program interpreter (PT_INTERP) an ELF file
// names, or "".
func elfLoader(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP || p.Filesz == 0 || p.Filesz > 4096 {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return ""
		}
		return strings.TrimRight(string(b), "\x00")
	}
	return ""
}
