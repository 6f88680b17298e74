package process

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	"golang.org/x/sys/unix"
)

// etcTemplate is a container's /etc built once — a read-only tmpfs with
// what a stage would build (small host files copied, directories bound) —
// and cloned (open_tree) for each container, so that a stage attaches it
// with one call instead of creating some thirty files and mounts (most of
// the time a stage spent building its root).
//
// The template lives in a mount namespace of its own, held by one locked
// OS thread that builds it and makes every clone: the host's mount table
// stays as it was (every mount there would be copied by each new mount
// namespace on the machine, ours and bwrap's alike, and would outlive a
// crashed airlock), and the template vanishes with the thread. Host mount
// events still propagate into it (a slave of the host's mounts).
//
// It is rebuilt when /etc itself changes (a file replaced by rename, as
// package managers and ldconfig do, changes the directory) and at least
// every etcMaxAge, which bounds how long a copied file edited in place
// stays stale (bound directories are always current). A rebuild detaches
// the old template: clones already made hold their own references and are
// not affected.
type etcTemplate struct {
	mu     sync.Mutex
	reqs   chan etcRequest // to the namespace thread; nil until it runs
	refill chan struct{}   // asks the thread for a clone ahead (buffered, 1)
	done   chan struct{}   // closed when the thread has exited
	err    error           // why there is no template (stages then build /etc)
	failed time.Time       // when err was set: retried after etcMaxAge
	closed bool
	// closeErr is the final removal's failure, set before done is closed.
	closeErr error
	// ahead is a clone made in advance, of the template built at aheadOf
	// from /etc as aheadEtc; a start takes it without waking the thread.
	// aheadMu guards these (never held while waiting for the thread).
	aheadMu     sync.Mutex
	ahead       *os.File
	aheadEtc    os.FileInfo
	aheadOf     time.Time
	aheadClosed bool

	// watch is the directory whose changes rebuild the template: /etc
	// (see withEtcWatch). Set before the first clone.
	watch string

	// Owned by the namespace thread.
	dir   string      // the mount point ("" when there is no template)
	etc   os.FileInfo // /etc when dir was built
	built time.Time
}

const etcMaxAge = time.Minute

type etcRequest struct {
	baseDir string
	reply   chan etcReply
}

type etcReply struct {
	f   *os.File
	err error
}

// clone returns a detached, read-only clone of the template: the one made
// ahead if it is of the current /etc, else a new one (building or
// rebuilding the template first if needed); nil and the reason when there
// is none.
func (e *etcTemplate) clone(baseDir string) (*os.File, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("tier closed")
	}
	cur, err := os.Stat(e.watch)
	if err != nil {
		return nil, err
	}
	e.aheadMu.Lock()
	f, fresh := e.ahead, e.ahead != nil && sameEtc(e.aheadEtc, cur) && time.Since(e.aheadOf) < etcMaxAge
	e.ahead = nil
	e.aheadMu.Unlock()
	if fresh {
		e.poke()
		return f, nil
	}
	if f != nil {
		f.Close()
	}
	if e.err != nil && time.Since(e.failed) < etcMaxAge {
		return nil, e.err // do not retry a failing build on every start
	}
	if e.reqs == nil {
		ready := make(chan error, 1)
		e.reqs, e.refill, e.done = make(chan etcRequest), make(chan struct{}, 1), make(chan struct{})
		go e.thread(ready)
		if err := <-ready; err != nil {
			<-e.done
			e.reqs = nil
			e.err, e.failed = err, time.Now()
			return nil, err
		}
	}
	reply := make(chan etcReply, 1)
	e.reqs <- etcRequest{baseDir: baseDir, reply: reply}
	r := <-reply
	if r.err != nil {
		e.err, e.failed = r.err, time.Now()
		return nil, r.err
	}
	e.err = nil
	e.poke()
	return r.f, nil
}

// poke asks the thread for a clone ahead.
func (e *etcTemplate) poke() {
	select {
	case e.refill <- struct{}{}:
	default:
	}
}

// thread runs the template's mount namespace: this goroutine's OS thread
// is locked and never unlocked, so it ends with the goroutine and no
// other goroutine ever runs in that namespace.
func (e *etcTemplate) thread(ready chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// Never the main thread: /proc/self is the main thread's view,
		// and it cannot end with a goroutine. This thread is locked, so a
		// new goroutine gets another one.
		go e.thread(ready)
		runtime.UnlockOSThread()
		return
	}
	defer close(e.done)
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		ready <- fmt.Errorf("/etc template: mount namespace: %w", err)
		return
	}
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		ready <- fmt.Errorf("/etc template: %w", err)
		return
	}
	ready <- nil
	for {
		select {
		case req, ok := <-e.reqs:
			if !ok {
				e.closeErr = e.remove()
				return
			}
			f, err := e.cloneHere(req.baseDir)
			req.reply <- etcReply{f, err}
		case <-e.refill:
			e.cloneAhead()
		}
	}
}

// cloneAhead (on the namespace thread) makes the clone a start takes next.
func (e *etcTemplate) cloneAhead() {
	if e.dir == "" {
		return
	}
	f, err := e.cloneNow()
	if err != nil {
		return
	}
	e.aheadMu.Lock()
	if e.ahead == nil && !e.aheadClosed {
		e.ahead, e.aheadEtc, e.aheadOf, f = f, e.etc, e.built, nil
	}
	e.aheadMu.Unlock()
	if f != nil {
		f.Close()
	}
}

// cloneNow (on the namespace thread) clones the current template.
func (e *etcTemplate) cloneNow() (*os.File, error) {
	return cloneTree(e.dir, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
}

// cloneHere (on the namespace thread) rebuilds the template if /etc
// changed or it is old, and clones it.
func (e *etcTemplate) cloneHere(baseDir string) (*os.File, error) {
	cur, err := os.Stat(e.watch)
	if err != nil {
		return nil, err
	}
	if e.dir != "" && (!sameEtc(e.etc, cur) || time.Since(e.built) > etcMaxAge) {
		if err := e.remove(); err != nil {
			return nil, err
		}
	}
	if e.dir == "" {
		dir := filepath.Join(baseDir, newName(baseDir)+"-etc")
		if err := buildEtcTemplate(dir); err != nil {
			return nil, err
		}
		e.dir, e.etc, e.built = dir, cur, time.Now()
	}
	return e.cloneNow()
}

// sameEtc reports whether /etc is unchanged: same directory, same
// modification and change times.
func sameEtc(a, b os.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && sa.Dev == sb.Dev && sa.Ino == sb.Ino && sa.Mtim == sb.Mtim && sa.Ctim == sb.Ctim
}

// buildEtcTemplate (on the namespace thread) mounts a tmpfs at dir, fills
// it, and makes it read-only; on failure nothing is left. The host sees
// dir as an empty directory.
func buildEtcTemplate(dir string) (err error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("building the /etc template: %w", err), removeTemplate(dir))
		}
	}()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=1m,mode=0755"); err != nil {
		return err
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	if err := stage.BuildEtcTemplate(dir); err != nil {
		return err
	}
	return unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

// close ends the namespace thread, which detaches the template and
// removes its directory (Tier.Close).
func (e *etcTemplate) close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	e.aheadMu.Lock()
	e.aheadClosed = true
	if e.ahead != nil {
		e.ahead.Close()
		e.ahead = nil
	}
	e.aheadMu.Unlock()
	if e.reqs == nil {
		return nil
	}
	close(e.reqs)
	<-e.done
	e.reqs = nil
	return e.closeErr
}

// remove (on the namespace thread) detaches the template and removes its
// directory.
func (e *etcTemplate) remove() error {
	if e.dir == "" {
		return nil
	}
	err := removeTemplate(e.dir)
	e.dir, e.etc = "", nil
	return err
}

// removeTemplate detaches a template's mounts (all at once) and removes
// its directory, which is then empty: never recursively, in case it is
// still mounted somewhere with host files bound into it.
func removeTemplate(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting the /etc template %s: %w", dir, err)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the /etc template %s: %w", dir, err)
	}
	return nil
}

// grantsUnderEtc reports whether a granted path lies in /etc: its mount
// point would have to be made inside the (shared, read-only) template, so
// such a container builds its own /etc.
func grantsUnderEtc(read []string) bool {
	for _, p := range read {
		if p == "/etc" || strings.HasPrefix(p, "/etc/") {
			return true
		}
	}
	return false
}
