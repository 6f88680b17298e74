package stage

import (
	"fmt"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// filterSealer seals the files a level-2 job without spawn may execute
// (see execOnly). The level-2 stage runs as the job's uid when it learns
// which file the program is (it places the job's files as that uid), and
// sealing mounts; so one thread of the stage keeps CAP_SYS_ADMIN across
// the change of uid (adminThread) and makes the mounts, in the stage's
// own mount namespace, which the host does not see.
type filterSealer struct {
	admin   *adminThread
	scratch string // the scratch's real path
	uid     uint32
}

// seal replaces p by a read-only copy when the job's uid could change it:
// it lies beneath the scratch, belongs to the uid, or the uid may write
// it. (Landlock lets the program write nowhere but the scratch and a few
// device nodes, so this is a superset of what it could rewrite.)
func (s *filterSealer) seal(p string) error {
	if onReadOnlyMount(p) {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return err
	}
	beneath := s.scratch != "" && strings.HasPrefix(p, s.scratch+"/")
	if !beneath && st.Uid != s.uid && unix.Access(p, unix.W_OK) != nil {
		return nil
	}
	return s.admin.run(func() error { return copyOver(p) })
}

// adminThread is one locked OS thread that keeps its capabilities,
// ineffective, when the process becomes another uid (PR_SET_KEEPCAPS is
// the thread's own: every other thread loses them all), and raises
// CAP_SYS_ADMIN on itself only for the work it is given. end drops them
// for good; the thread then exits with its goroutine, which never
// unlocks it. The Go runtime starts no thread from a locked one, so no
// other thread inherits them.
type adminThread struct {
	work chan func() error
	done chan error
}

// startAdminThread must be called before the uid changes.
func startAdminThread() (*adminThread, error) {
	a := &adminThread{work: make(chan func() error), done: make(chan error)}
	ready := make(chan error)
	go func() {
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
			ready <- fmt.Errorf("keeping capabilities: %w", err)
			return
		}
		ready <- nil
		for f := range a.work {
			a.done <- withAdmin(f)
		}
		a.done <- setThreadCaps(0, 0)
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return a, nil
}

// run runs f on the thread with CAP_SYS_ADMIN effective.
func (a *adminThread) run(f func() error) error {
	a.work <- f
	return <-a.done
}

// end drops the thread's capabilities; it must not be used after.
func (a *adminThread) end() error {
	close(a.work)
	return <-a.done
}

// withAdmin runs f with CAP_SYS_ADMIN effective on the calling thread,
// out of those it holds permitted.
func withAdmin(f func() error) error {
	permitted, err := threadPermitted()
	if err != nil {
		return err
	}
	const admin = uint64(1) << unix.CAP_SYS_ADMIN
	if permitted&admin == 0 {
		return fmt.Errorf("the stage holds no CAP_SYS_ADMIN to seal the program with")
	}
	// The thread keeps nothing else from here on.
	if err := setThreadCaps(admin, admin); err != nil {
		return err
	}
	ferr := f()
	if err := setThreadCaps(admin, 0); err != nil {
		return err
	}
	return ferr
}

func threadPermitted() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("capget: %w", err)
	}
	return uint64(data[0].Permitted) | uint64(data[1].Permitted)<<32, nil
}

// setThreadCaps sets the calling thread's permitted and effective sets
// (and empties its inheritable one).
func setThreadCaps(permitted, effective uint64) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Permitted: uint32(permitted), Effective: uint32(effective)},
		{Permitted: uint32(permitted >> 32), Effective: uint32(effective >> 32)},
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
