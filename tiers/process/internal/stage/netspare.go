package stage

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// A new network namespace is the dearest of a sandbox's namespaces to
// make: about 0.7 ms here (the kernel sets up every network subsystem's
// per-namespace state), against 0.05–0.15 ms for each of the others. A
// spawner with the privilege to make one (CAP_SYS_ADMIN: the tier runs as
// root) keeps one made ahead, on a thread of its own, as the process
// package keeps an /etc clone ahead. A stage that configures nothing in its
// network (no egress forwarder: nothing listens, lo stays down, as in a
// namespace of its own) is forked from a thread that has entered the
// spare instead of with CLONE_NEWNET, and each spare serves one stage.
//
// The spare belongs to the initial user namespace, not to the sandbox's:
// the sandbox's root holds no capability in it, so it cannot bring an
// interface up, change a route or a sysctl, or open a raw socket there,
// even if it kept capabilities (the program runs without them in either
// case).

// netSpares hands out network namespaces made ahead.
type netSpares struct {
	spares chan int // the spare, offered by the maker (unbuffered: one ahead)
	home   int      // this process's own network namespace
}

// startNetSpares starts making spares and waits until the first is made,
// so that the spawner's first stage already finds one (the wait costs what
// that stage saves); nil when this process cannot make network namespaces
// (then every stage gets CLONE_NEWNET).
func startNetSpares() *netSpares {
	home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	n := &netSpares{spares: make(chan int), home: home}
	made := make(chan bool)
	go n.make(made)
	if !<-made {
		unix.Close(home)
		return nil
	}
	return n
}

// make runs on a thread of its own, locked and never unlocked (the thread
// ends with the spawner): it makes a namespace, comes home, offers the
// namespace until a stage takes it, and again. It reports on made whether
// the first could be made.
func (n *netSpares) make(made chan<- bool) {
	runtime.LockOSThread()
	for first := true; ; first = false {
		fd, err := n.makeOne()
		if first {
			made <- err == nil
		}
		if err != nil {
			close(n.spares) // enter finds no more
			return
		}
		n.spares <- fd
	}
}

func (n *netSpares) makeOne() (int, error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return -1, err
	}
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if herr := unix.Setns(n.home, unix.CLONE_NEWNET); herr != nil {
		// This thread cannot come home: it makes no more.
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, herr
	}
	return fd, err
}

// enter moves the calling (locked) thread into a spare, if one is ready,
// and reports whether it did; leave must follow once the child is forked.
func (n *netSpares) enter() bool {
	if n == nil {
		return false
	}
	select {
	case fd, ok := <-n.spares:
		if !ok {
			return false
		}
		err := unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd) // the thread (and then the child) holds it now
		return err == nil
	default:
		return false
	}
}

// leave brings the calling thread home from the spare it entered, so that
// the spawner holds no sandbox's namespace; if it cannot, the spawner must
// not go on forking from a sandbox's namespace, and exits.
func (n *netSpares) leave() {
	if err := unix.Setns(n.home, unix.CLONE_NEWNET); err != nil {
		unix.Exit(3)
	}
}
