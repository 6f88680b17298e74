package microvm

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/airlock-sandbox/airlock/tiers/internal/hostids"
)

// A tier run as root starts each QEMU as a user of its own: a uid (and
// gid) from vmmIDBase..vmmIDBase+vmmIDCount that no other VM holds, with no
// supplementary group but /dev/kvm's when KVM needs it. QEMU is a large C
// program that parses everything the guest sends; an escape from it then
// lands in a process that owns nothing on the host but its VM's
// directory, and may signal no other VM, instead of in root. The process
// tier's sandboxes take the uids just below this range.
//
// QEMU reaches its VM's directory by path (its working directory, the
// control and QMP sockets, the egress socket and forwarder locks), so the
// state directory and every directory above it must let others through;
// the tier makes its state directory 0711, and runs QEMU as the caller
// where a directory above it is closed (vmmUserBlocked says which). The
// kernel, initrd and disks are handed over open.
const (
	vmmIDBase  = 1<<30 + 1<<16
	vmmIDCount = 1 << 16
)

// vmmIDs are the VMMs' host ids (see package hostids).
var vmmIDs = hostids.Range{Base: vmmIDBase, Count: vmmIDCount}

// vmmUserBlocked says why this tier's VMs cannot run as users of their
// own ("" when they can): not root, or a path QEMU or its egress
// forwarder must reach by name is closed to other users. A state
// directory of root's or ours is opened to them (0711) here.
func vmmUserBlocked(stateDir, qemu string) string {
	if os.Geteuid() != 0 {
		return "not run as root"
	}
	if st, err := os.Stat(stateDir); err == nil && st.Mode().Perm()&0o001 == 0 {
		if err := os.Chmod(stateDir, st.Mode().Perm()|0o011); err != nil {
			return fmt.Sprintf("the state directory %s: %v", stateDir, err)
		}
	}
	if why := reachable(stateDir, false); why != "" {
		return why
	}
	return reachable(qemu, true)
}

// reachable says why a user with no rights of its own could not reach
// path ("" if it can): a directory on the way it may not search, or the
// file itself it may not read (or run, for exec).
func reachable(path string, exec bool) string {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err.Error()
	}
	st, err := os.Stat(real)
	if err != nil {
		return err.Error()
	}
	need := os.FileMode(0o004)
	if exec || st.IsDir() {
		need = 0o001
	}
	if st.Mode().Perm()&need == 0 {
		return real + " is closed to other users"
	}
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err.Error()
		}
		if st.Mode().Perm()&0o001 == 0 {
			return d + " is closed to other users"
		}
		if d == "/" {
			return ""
		}
	}
}

// vmmUser is what one VM's QEMU runs as, and the files handed to it open.
type vmmUser struct {
	uid   uint32
	files []*os.File
	err   error
}

// pass opens path for QEMU, which gets it as a descriptor (see
// exec.Cmd.ExtraFiles) and opens that again through /proc, which needs
// read permission on the file itself: a file of this VM alone (own) is
// given to the VM's user; one VMs share (the kernel, the initrd, an
// image's disk: nothing secret) is made readable by all.
func (u *vmmUser) pass(path string, own bool) string {
	if u == nil {
		return path
	}
	f, err := os.Open(path)
	if err == nil {
		var st os.FileInfo
		if st, err = f.Stat(); err == nil {
			switch {
			case own:
				err = f.Chown(int(u.uid), int(u.uid))
			case st.Mode().Perm()&0o004 == 0:
				err = f.Chmod(st.Mode().Perm() | 0o044)
			}
		}
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		if u.err == nil {
			u.err = err
		}
		return path
	}
	u.files = append(u.files, f)
	return "/proc/self/fd/" + strconv.Itoa(2+len(u.files))
}

// newVMMUser gives the VM in dir a user of its own. The VM's directory
// stays root's, open to pass through (0711): it holds what the host
// trusts (the owner and pid files, the sockets the host listens on),
// which QEMU's user must not replace. QEMU works and writes in a
// directory of its user's inside it (vmmDir).
func newVMMUser(dir string) (*vmmUser, error) {
	uid, err := vmmIDs.Take()
	if err != nil {
		return nil, err
	}
	u := &vmmUser{uid: uid}
	private := vmmDir(dir, u)
	if err := os.Chmod(dir, 0o711); err != nil {
		hostids.Put(uid)
		return nil, err
	}
	if err := os.Mkdir(private, 0o700); err != nil {
		hostids.Put(uid)
		return nil, err
	}
	if err := os.Lchown(private, int(uid), int(uid)); err != nil {
		hostids.Put(uid)
		return nil, err
	}
	return u, nil
}

// own gives the VM's user path, a socket the host made in the VM's
// directory, so that it may connect to it. Nothing there can be swapped
// for a link by that user: the directory is root's.
func (u *vmmUser) own(path string) error {
	if u == nil {
		return nil
	}
	return os.Lchown(path, int(u.uid), int(u.uid))
}

// close closes the host's copies of the files handed to QEMU.
func (u *vmmUser) close() {
	if u == nil {
		return
	}
	for _, f := range u.files {
		f.Close()
	}
	u.files = nil
}

// credential is the user QEMU starts as: the VM's uid and gid, and
// /dev/kvm's group when the VM needs KVM and others may not open it.
func (u *vmmUser) credential(kvm bool) *syscall.Credential {
	c := &syscall.Credential{Uid: u.uid, Gid: u.uid, Groups: []uint32{}}
	if kvm {
		if st, err := os.Stat("/dev/kvm"); err == nil && st.Mode().Perm()&0o006 != 0o006 {
			if sys, ok := st.Sys().(*syscall.Stat_t); ok {
				c.Groups = []uint32{sys.Gid}
			}
		}
	}
	return c
}

// forwarderFor returns a path of this executable that the VM's user can
// run, for QEMU's guestfwd: the executable itself where others may reach
// it, else a link to it (or a copy, across file systems) in the VM's
// directory, which goes with the VM.
func forwarderFor(exe, dir string) (string, error) {
	if reachable(exe, true) == "" {
		return exe, nil
	}
	link := filepath.Join(dir, "forwarder")
	if err := os.Link(exe, link); err == nil {
		if st, err := os.Stat(link); err == nil && st.Mode().Perm()&0o001 != 0 {
			return link, nil
		}
		_ = os.Remove(link) // a mode that keeps others from running it: copy
	}
	in, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.OpenFile(link, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return "", err
	}
	return link, out.Close()
}
