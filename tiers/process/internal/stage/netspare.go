package stage

import (
	"golang.org/x/sys/unix"
)

// A new network namespace is the dearest of a sandbox's namespaces to
// make: about 0.7 ms here (the kernel sets up every network subsystem's
// per-namespace state), against 0.05–0.15 ms for each of the others. A
// spawner with the privilege to make one (CAP_SYS_ADMIN: the tier runs as
// root) keeps one made ahead, as the process package keeps an /etc clone
// ahead. A stage that configures nothing in its network (no egress
// forwarder: nothing listens, lo stays down, as in a namespace of its
// own) is forked from the spawner's thread after it has entered the spare
// instead of with CLONE_NEWNET, and each spare serves one stage.
//
// The spare is made on the spawner's own (locked) thread, after it has
// answered the request that used the last one. It used to be made on a
// second locked thread that handed it over through a channel; on one P
// that handover cost each start ≈ 0.13 ms of goroutine switching (the
// maker's thread had to run to send, the spawner's was preempted and
// waited for the P back) before the fork.
//
// The spare belongs to the initial user namespace, not to the sandbox's:
// the sandbox's root holds no capability in it, so it cannot bring an
// interface up, change a route or a sysctl, or open a raw socket there,
// even if it kept capabilities (the program runs without them in either
// case).

// netSpares holds at most one network namespace made ahead.
type netSpares struct {
	spare int // the namespace made ahead; -1: none
	home  int // this process's own network namespace
}

// startNetSpares makes the first spare, so that the spawner's first stage
// already finds one (the wait costs what that stage saves); nil when this
// process cannot make network namespaces (then every stage gets
// CLONE_NEWNET).
func startNetSpares() *netSpares {
	home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	n := &netSpares{spare: -1, home: home}
	if !n.fill() {
		unix.Close(home)
		return nil
	}
	return n
}

// fill makes a spare unless there is one, on the calling thread, which
// comes home at once; it reports whether there is a spare.
func (n *netSpares) fill() bool {
	if n == nil {
		return false
	}
	if n.spare >= 0 {
		return true
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return false
	}
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	n.leave() // exits if this thread cannot come home
	if err != nil {
		return false
	}
	n.spare = fd
	return true
}

// enter moves the calling thread into the spare, if there is one, and
// reports whether it did; leave must follow once the child is forked.
func (n *netSpares) enter() bool {
	if n == nil || n.spare < 0 {
		return false
	}
	err := unix.Setns(n.spare, unix.CLONE_NEWNET)
	unix.Close(n.spare) // the thread (and then the child) holds it now
	n.spare = -1
	return err == nil
}

// leave brings the calling thread home, so that the spawner holds no
// sandbox's namespace; if it cannot, the spawner must not go on forking
// from a sandbox's namespace, and exits.
func (n *netSpares) leave() {
	if err := unix.Setns(n.home, unix.CLONE_NEWNET); err != nil {
		unix.Exit(3)
	}
}
