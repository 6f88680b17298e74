package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/runstop"
	"github.com/airlock-sandbox/airlock/internal/statedir"
	"golang.org/x/sys/unix"
)

// Session keeps a scratch directory across runs; each run is a new
// sandboxed process (a fresh container or filter stage) with that
// directory as its scratch. With a workspace name, the directory is a
// persistent workspace under the tier's workspace directory, reattached by
// later sessions: what runs leave there accumulates.
type Session struct {
	t         *Tier
	id        string
	uid       uint32
	dir       string
	workspace bool
	// held is the workspace directory, open and flocked while the
	// session lives: one session at a time may hold a workspace.
	held *os.File

	mu     sync.Mutex // one run at a time
	closed bool
	// closing is set by Close before it waits for mu: the run in
	// progress is stopped (current) and the runs waiting their turn are
	// refused.
	closing atomic.Bool
	current runstop.Run // the run in progress
	used    time.Time   // when the last run ended (or the session opened)
	// img is the session's image, acquired by its first run and held
	// until it is closed (nil before the first run, and without a
	// resolver).
	img          *image.Image
	releaseImage func()
	timer        *time.Timer
	ttl          time.Duration
}

var _ airlock.SessionTier = (*Tier)(nil)

var workspaceName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`) })

// OpenSession opens a session. Its scratch is a tmpfs of DefaultScratchMB
// (a workspace is a plain directory, bounded only by the disk).
func (t *Tier) OpenSession(ctx context.Context, opts airlock.SessionOptions) (airlock.Session, error) {
	if err := t.Available(); err != nil {
		return nil, fmt.Errorf("opening session: tier unavailable: %w", err)
	}
	if opts.Workspace != "" && !workspaceName().MatchString(opts.Workspace) {
		return nil, jobs.Invalid("workspace", "%q must be 1-128 letters, digits, '_', '.' or '-'", opts.Workspace)
	}
	opts, err := opts.Resolve()
	if err != nil {
		return nil, err
	}
	s := &Session{t: t, id: opts.ID, ttl: opts.TTL}
	uid, err := t.uids.get()
	if err != nil {
		return nil, err
	}
	s.uid = uid
	if opts.Workspace != "" {
		s.workspace = true
		s.dir = filepath.Join(t.cfg.workspaceDir, opts.Workspace)
		if _, err := statedir.Ensure(t.cfg.workspaceDir, 0o711); err != nil {
			sharedUIDsPut(uid)
			return nil, fmt.Errorf("opening workspace: %w", err)
		}
		if err := os.MkdirAll(s.dir, 0o700); err != nil {
			sharedUIDsPut(uid)
			return nil, fmt.Errorf("opening workspace: %w", err)
		}
		_ = os.Chmod(t.cfg.workspaceDir, 0o711)
		held, err := holdWorkspace(s.dir, opts.Workspace)
		if err != nil {
			sharedUIDsPut(uid)
			return nil, err
		}
		s.held = held
		if err := chownTree(held, int(uid)); err != nil {
			held.Close()
			sharedUIDsPut(uid)
			return nil, fmt.Errorf("opening workspace: %w", err)
		}
	} else {
		s.dir = filepath.Join(t.cfg.baseDir, newName(t.cfg.baseDir))
		if err := mountScratch(s.dir, DefaultScratchMB, uid); err != nil {
			sharedUIDsPut(uid)
			return nil, fmt.Errorf("opening session: %w", err)
		}
	}
	s.used = time.Now()
	if s.ttl > 0 {
		s.timer = time.AfterFunc(s.ttl, s.expire)
	}
	return s, nil
}

// expire closes the session once it has been idle for its TTL: a timer
// that fired as a run began finds the session used since, and leaves it
// (the run resets the timer when it ends).
func (s *Session) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || time.Since(s.used) < s.ttl {
		return
	}
	_ = s.closeLocked()
}

// holdWorkspace opens the workspace directory dir and takes its lock,
// which the session keeps until it closes: a second session of the same
// workspace, in this process or another, is refused while the first is
// open, so no job of it can change the tree while the next one takes it
// over.
func holdWorkspace(dir, name string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening workspace: %w", err)
	}
	f := os.NewFile(uintptr(fd), dir)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &airlock.NotAdmitted{Reason: "workspace " + name + " is open in another session"}
		}
		return nil, fmt.Errorf("opening workspace: %w", err)
	}
	return f, nil
}

// chownTree gives the workspace open as dir to the session's uid (a
// workspace reattached by a later session belongs to that session's uid).
// It walks by descriptor, never by path: each entry is chowned where it
// is without following a link, and a directory is entered only through
// an open that refuses a link, on the same file system, so a tree that a
// job swaps under the walk cannot lead it outside.
func chownTree(dir *os.File, uid int) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		return err
	}
	if err := unix.Fchown(int(dir.Fd()), uid, uid); err != nil {
		return err
	}
	return chownEntries(int(dir.Fd()), uid, st.Dev)
}

func chownEntries(dirfd, uid int, dev uint64) error {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), "")
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, name := range names {
		err := unix.Fchownat(fd, name, uid, uid, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			continue // gone meanwhile
		}
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != dev {
			continue
		}
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // no longer a directory
		}
		err = chownEntries(sub, uid, dev)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

// ID returns the session's id.
func (s *Session) ID() string { return s.id }

// Dir returns the host directory that is the session's scratch.
func (s *Session) Dir() string { return s.dir }

// Run runs a job with the session's scratch.
func (s *Session) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.closing.Load() {
		res := airlock.Result{Tier: s.t.name, Level: s.t.level}
		err := &airlock.NotAdmitted{Tier: s.t.name, Reason: "session " + s.id + " is closed"}
		res.SetError(err)
		return res, err
	}
	if s.timer != nil {
		s.timer.Stop()
		defer func() {
			s.used = time.Now()
			s.timer.Reset(s.ttl)
		}()
	}
	// Closing the session stops this run.
	ctx, end := s.current.Begin(ctx)
	defer end()
	return s.t.run(ctx, job, s)
}

// imageFor returns the image a job of the session runs in (s.mu held):
// the one its first run named, which the session keeps for its life. A
// later job may name it again (by the name it was asked for, or its
// digest) or leave its image empty; another image needs another session.
func (s *Session) imageFor(ctx context.Context, ref string) (*image.Image, error) {
	if s.img == nil {
		img, release, err := s.t.images.Acquire(ctx, ref)
		if err != nil {
			return nil, imageError(err)
		}
		s.img, s.releaseImage = img, release
		return img, nil
	}
	if ref != "" && ref != s.img.Ref && ref != s.img.Digest {
		return nil, &airlock.NotAdmitted{Tier: s.t.name, Reason: fmt.Sprintf("session %s runs image %s, not %s: open another session for it", s.id, s.img.Ref, ref)}
	}
	return s.img, nil
}

// Close ends the session: its scratch tmpfs is unmounted and removed (a
// workspace stays), and its image released.
func (s *Session) Close() error {
	s.closing.Store(true)
	s.current.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeLocked()
}

// closeLocked is Close, with s.mu held.
func (s *Session) closeLocked() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.releaseImage != nil {
		defer s.releaseImage()
	}
	defer sharedUIDsPut(s.uid)
	if s.workspace {
		return s.held.Close() // and with it the workspace's lock
	}
	return errors.Join(unmountScratch(s.dir))
}
