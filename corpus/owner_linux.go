package corpus

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// asOwner runs fn acting as the owner of dir: a sandbox's placed files may
// live in a user namespace where the host's root has no id, so files root
// creates there could not be owned by anyone (EOVERFLOW); the attacker a
// swap stands for is whoever owns them.
func asOwner(dir string, fn func() error) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// setfsuid and setfsgid are per thread, and only change the ids used
	// for file access; the thread is restored before it is unlocked.
	oldGID, err := unix.SetfsgidRetGid(int(st.Gid))
	if err != nil {
		return err
	}
	oldUID, err := unix.SetfsuidRetUid(int(st.Uid))
	defer func() {
		_, _ = unix.SetfsuidRetUid(oldUID)
		_, _ = unix.SetfsgidRetGid(oldGID)
	}()
	if err != nil {
		return err
	}
	return fn()
}
