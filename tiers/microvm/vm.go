package microvm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/deathsig"
	"github.com/airlock-sandbox/airlock/internal/egressfwd"
	"github.com/airlock-sandbox/airlock/internal/value"
	"github.com/airlock-sandbox/airlock/role"
	"github.com/airlock-sandbox/airlock/tiers/internal/hostids"
	"github.com/airlock-sandbox/airlock/tiers/microvm/internal/wire"
)

// vmNamePrefix marks airlock's VMs: their -name, their directories.
const vmNamePrefix = "airlock-vm-"

// vmSpec is one VM's shape. Restores must use the shape the snapshot was
// taken with.
type vmSpec struct {
	memMB int64
	vcpus int
	qmp   bool // expose a QMP socket (snapshots)
	// incoming: wait for a migration stream to be named over QMP
	// (-incoming defer), as the VMM a restore uses does.
	incoming bool
	paused   bool   // -S: wait for QMP cont
	net      bool   // a network device whose only way out is the egress guestfwd
	job      []byte // cold boot: the Job frame's payload, sent as soon as the VMM is up
	warmup   bool   // the agent runs a throwaway job before Ready (pooled VMs)
	// img, when set, is the image whose disk is the job's root (the VM
	// holds it until it is killed).
	img *heldImage
	// reads are the job's read-grant disks (cold boots only).
	reads []readDisk
}

// vm is one running QEMU process with its control connection.
type vm struct {
	id      string
	dir     string
	cmd     *exec.Cmd
	ln      net.Listener
	ctl     net.Conn
	qmp     *qmpClient
	console *tail
	stderr  *tail
	done    chan struct{} // closed when QEMU has exited and been reaped
	once    sync.Once
	stopped sync.Once
	claimed bool        // taken from the tier's pool
	pkey    poolKey     // the pool key it was started for (pooled ones)
	marks   []wire.Mark // the guest's steps, from its Ready and Exit frames
	sent    chan error  // the Job frame's write, once started (see send)
	img     *heldImage  // the image the VM holds (nil: the host view)
	reads   bool        // booted with read-grant disks
	copies  bool        // one of them a copy grant
	user    *vmmUser    // the user its QEMU runs as (nil: this process's)
}

// tail keeps the last n bytes written to it.
type tail struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.n {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.n:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(bytes.ToValidUTF8(t.buf, nil)))
}

// qemuModules are the guest drivers for the devices QEMU gives the VM.
const qemuModules = "virtio,virtio_ring,virtio_mmio,virtio_console"

// qemuArgs is the QEMU command line of a VM run as this process's user.
func (t *Tier) qemuArgs(id, dir string, s vmSpec) []string {
	return t.qemuCmdline(id, dir, s, nil, t.forwarder)
}

// qemuCmdline is the one place the QEMU command line is built: for a VM
// whose QEMU runs as u (nil: this process's user), which gets its files
// open and its QMP socket in its own directory, with the egress forwarder
// at fwd.
func (t *Tier) qemuCmdline(id, dir string, s vmSpec, u *vmmUser, fwd string) []string {
	accel := "tcg,thread=multi"
	// Under TCG, the baseline x86-64 model (plus SMEP, which costs
	// nothing measurable) runs the guest faster than "max": a pool claim
	// took 41-50 ms against 67-81 ms, a restore 0.44-0.51 s against
	// 0.53-0.56 s, in alternating runs (SMAP alone cost about 8 ms a
	// claim). The guest needs nothing beyond the baseline.
	cpu := "qemu64,+smep"
	if t.kvm {
		accel, cpu = "kvm", "host"
	}
	modules, nic := qemuModules, []string{"-nic", "none"}
	sandbox := qemuSandbox
	if s.net {
		modules += "," + netModules
		nic = []string{"-netdev", guestfwd(fwd, dir), "-device", "virtio-net-device,netdev=n0"}
		sandbox = qemuSandboxNet
	}
	if s.img != nil {
		modules += "," + imageModules
	} else if len(s.reads) > 0 {
		modules += "," + readModules
		if hasCopy(s.reads) {
			modules += "," + copyModules
		}
	}
	appendLine := "console=ttyS0 quiet loglevel=1 cryptomgr.notests pci=off tsc=reliable no_timer_check panic=-1 init_on_free=1 rdinit=/init airlock.modules=" + modules
	if t.tscKHz > 0 {
		appendLine += fmt.Sprintf(" tsc_early_khz=%d", t.tscKHz)
	}
	if s.warmup {
		appendLine += " airlock.warmup=1"
	}
	if s.img != nil {
		appendLine += " airlock.root=" + imageDevice
	}
	args := []string{
		"-name", vmNamePrefix + id,
		"-M", "microvm,x-option-roms=off,rtc=on,pit=off,pic=off",
		"-accel", accel, "-cpu", cpu,
		"-m", strconv.FormatInt(s.memMB, 10), "-smp", strconv.Itoa(s.vcpus),
		"-nodefaults", "-no-user-config", "-display", "none",
	}
	args = append(args, nic...)
	args = append(args,
		"-serial", "stdio",
		"-no-reboot",
		"-kernel", u.pass(t.assets.kernel, false), "-initrd", u.pass(t.assets.initrd, false), "-append", appendLine,
		"-device", "virtio-serial-device,max_ports=2",
		"-chardev", "socket,id=ctl,path="+filepath.Join(dir, "ctl.sock"),
		"-device", "virtserialport,chardev=ctl,name=airlock.ctl",
	)
	if s.img != nil {
		// Read-only to QEMU as well as to the guest: every VM of the image
		// shares the one file.
		args = append(args,
			"-drive", "id=root,if=none,format=raw,readonly=on,file="+strings.ReplaceAll(u.pass(s.img.disk, false), ",", ",,"),
			"-device", "virtio-blk-device,drive=root,serial="+wire.RootSerial)
	}
	for i, r := range s.reads {
		// Built for this run alone, and read-only to QEMU as well.
		id := "read" + strconv.Itoa(i)
		args = append(args,
			"-drive", "id="+id+",if=none,format=raw,readonly=on,file="+strings.ReplaceAll(u.pass(r.disk, true), ",", ",,"),
			"-device", "virtio-blk-device,drive="+id+",serial="+r.Serial)
	}
	if t.cfg.sandbox {
		args = append(args, "-sandbox", sandbox)
	}
	if s.qmp {
		args = append(args, "-qmp", "unix:"+strings.ReplaceAll(filepath.Join(vmmDir(dir, u), "qmp.sock"), ",", ",,")+",server=on,wait=off")
	}
	if s.incoming {
		args = append(args, "-incoming", "defer")
	}
	if s.paused {
		args = append(args, "-S")
	}
	return args
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// vmmProcess is how one VMM (QEMU or Firecracker) is started: its
// command line, the path of the control socket the
// guest agent reaches us on, and any configuration after it starts.
type vmmProcess struct {
	prog      string
	args      []string
	ctl       string
	configure func(ctx context.Context, v *vm) error
	clone     uintptr // namespaces of its own (syscall.CLONE_NEW*)
}

// qemuNamespaces are the namespaces a root-run tier starts each QEMU in,
// besides a network namespace of its own (see netnsOfItsOwn). Under TCG
// QEMU is the whole boundary; an escape from it should find neither the
// host's network nor other processes to see or signal, nor the host's
// System V IPC. When QEMU exits, the kernel ends whatever it started (the
// egress forwarders) with it.
const qemuNamespaces = syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWPID

// netnsOfItsOwn moves the calling thread, which then forks QEMU, into a
// new network namespace with its loopback up and nothing else: libslirp
// joins each guestfwd forwarder to QEMU through a TCP pair on 127.0.0.1,
// and the forwarder reaches the gateway through a Unix socket, which
// needs no network. (CLONE_NEWNET in the fork alone would leave the
// loopback down, and QEMU's user may not bring it up.)
func netnsOfItsOwn() error {
	if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
		return fmt.Errorf("a network namespace for QEMU: %w", err)
	}
	if err := egressfwd.LoopbackUp(); err != nil {
		return fmt.Errorf("QEMU's loopback: %w", err)
	}
	return nil
}

func (t *Tier) qemuProcess(id, dir string, s vmSpec, u *vmmUser, fwd string) vmmProcess {
	p := vmmProcess{prog: t.assets.qemu, args: t.qemuCmdline(id, dir, s, u, fwd), ctl: filepath.Join(dir, "ctl.sock")}
	if t.vmmNS {
		p.clone = qemuNamespaces
	}
	return p
}

// vmmDir is the directory a VM's QEMU works and writes in: the VM's own
// where QEMU runs as this process's user; else a directory of the VM
// user's inside it, while the VM's directory, which holds the files the
// host trusts (owner, pid, sockets the host listens on), stays root's.
func vmmDir(dir string, u *vmmUser) string {
	if u == nil {
		return dir
	}
	return filepath.Join(dir, "vmm")
}

// launch starts the VMM and waits until the guest side of the control port is
// connected (QEMU connects to our listener as it starts).
func (t *Tier) launch(ctx context.Context, s vmSpec) (_ *vm, err error) {
	id := newID()
	if s.incoming {
		id = spareID + id
	}
	dir := filepath.Join(t.cfg.stateDir, vmNamePrefix+id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	v := &vm{id: id, dir: dir, console: &tail{n: 4096}, stderr: &tail{n: 4096}, done: make(chan struct{})}
	if s.img != nil {
		s.img.ref()
		v.img = s.img
	}
	defer func() {
		if err != nil {
			v.kill()
		}
	}()
	if err := writeOwner(dir); err != nil {
		return v, err
	}
	v.reads, v.copies = len(s.reads) > 0, hasCopy(s.reads)
	var p vmmProcess
	if t.fc != "" && !s.net && len(s.reads) == 0 {
		p = t.firecrackerProcess(id, dir, s)
	} else {
		fwd := t.forwarder
		if t.vmmUser {
			if v.user, err = newVMMUser(dir); err != nil {
				return v, err
			}
			if s.net {
				if fwd, err = forwarderFor(t.forwarder, dir); err != nil {
					return v, fmt.Errorf("placing the egress forwarder: %w", err)
				}
			}
		}
		p = t.qemuProcess(id, dir, s, v.user, fwd)
		defer v.user.close() // QEMU holds its own copies
		if v.user != nil && v.user.err != nil {
			return v, v.user.err
		}
	}
	if v.ln, err = net.Listen("unix", p.ctl); err != nil {
		return v, err
	}
	if err := v.user.own(p.ctl); err != nil {
		return v, err
	}
	cmd := exec.Command(p.prog, p.args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if s.net {
		cmd.Env = append(cmd.Env, role.Env+"="+forwardRole) // for the guestfwd's forwarder
	}
	cmd.Dir = vmmDir(dir, v.user)
	cmd.Stdout = v.console
	cmd.Stderr = v.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Cloneflags: p.clone}
	if v.user != nil {
		cmd.ExtraFiles = v.user.files
		cmd.SysProcAttr.Credential = v.user.credential(t.kvm)
	}
	var setup func() error
	if p.clone != 0 {
		setup = netnsOfItsOwn
	}
	wait, err := deathsig.StartIn(cmd, setup)
	if err != nil {
		close(v.done)
		return v, fmt.Errorf("starting %s: %w", filepath.Base(p.prog), err)
	}
	v.cmd = cmd
	_ = os.WriteFile(filepath.Join(dir, "vmm.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
	go func() { _ = wait(); close(v.done) }()
	if p.configure != nil {
		if err := p.configure(ctx, v); err != nil {
			return v, err
		}
	}

	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := v.ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	timer := time.NewTimer(t.cfg.bootTimeout)
	defer timer.Stop()
	select {
	case c, ok := <-accepted:
		if !ok {
			return v, errors.New("control socket closed")
		}
		v.ctl = c
	case <-v.done:
		return v, fmt.Errorf("qemu exited at start: %s", v.diag())
	case <-ctx.Done():
		return v, ctx.Err()
	case <-timer.C:
		return v, fmt.Errorf("qemu did not connect within %v: %s", t.cfg.bootTimeout, v.diag())
	}
	if s.qmp {
		if v.qmp, err = dialQMP(ctx, filepath.Join(vmmDir(dir, v.user), "qmp.sock"), v.done); err != nil {
			return v, fmt.Errorf("qmp: %w", err)
		}
	}
	return v, nil
}

// diag summarises what QEMU and the guest console said, for errors.
// The console is the guest's, QEMU's stderr may quote it: each is kept to
// its last maxGuestText bytes and one line (value.Line).
func (v *vm) diag() string {
	s := guestLine(v.stderr.String())
	if c := v.console.String(); c != "" {
		s += " [console: " + guestLine(c) + "]"
	}
	if s == "" {
		return "no output"
	}
	return s
}

// guestLine is the end of s, at most maxGuestText bytes cut on a UTF-8
// boundary, as one line.
func guestLine(s string) string {
	if len(s) > maxGuestText {
		cut := len(s) - maxGuestText
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		s = "..." + s[cut:]
	}
	return value.Line(s, maxGuestText+len("..."))
}

// stop kills the VM's process group and closes its connections, without
// waiting for the process to be reaped. It is idempotent.
func (v *vm) stop() {
	v.stopped.Do(func() {
		if v.cmd != nil && v.cmd.Process != nil {
			_ = syscall.Kill(-v.cmd.Process.Pid, syscall.SIGKILL)
		}
		if v.qmp != nil {
			v.qmp.close()
		}
		if v.ctl != nil {
			v.ctl.Close()
		}
		if v.ln != nil {
			v.ln.Close()
		}
	})
}

// kill stops the VM, reaps its VMM and removes its directory. It is
// idempotent.
func (v *vm) kill() {
	v.once.Do(func() {
		v.stop()
		if v.cmd != nil && v.cmd.Process != nil {
			<-v.done
		}
		_ = os.RemoveAll(v.dir)
		if v.img != nil {
			v.img.unref()
		}
		if v.user != nil {
			hostids.Put(v.user.uid) // its QEMU is gone
		}
	})
}
