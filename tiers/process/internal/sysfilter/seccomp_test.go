package sysfilter

import (
	"encoding/binary"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// verdict runs a raw seccomp program on a system call in x/net/bpf's VM.
// The VM loads words big-endian, so seccomp_data's 32-bit words (the
// number, the architecture, each argument's low half) are written that way
// at their offsets.
func verdict(t *testing.T, vm *bpf.VM, archID, nr uint32, args [6]uint32) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[offNr:], nr)
	binary.BigEndian.PutUint32(data[offArch:], archID)
	for i, a := range args {
		binary.BigEndian.PutUint32(data[offArgs+8*i:], a)
	}
	v, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(v)
}

func vmOf(t *testing.T, raw []bpf.RawInstruction) *bpf.VM {
	t.Helper()
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the program does not disassemble")
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// TestFilterTree: the search-tree program gives, for every system call
// number (and x32 and foreign-architecture calls) and every argument the
// rules test, the verdict of the plain list it replaced — and the verdicts
// the policy states for a few calls by name.
func TestFilterTree(t *testing.T) {
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	argSets := [][6]uint32{{}}
	for _, a1 := range []uint32{unix.TIOCSTI, unix.TIOCLINUX, unix.TCGETS, unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_RAW,
		unix.SOCK_STREAM | unix.SOCK_CLOEXEC, unix.SOCK_DGRAM | unix.SOCK_NONBLOCK, unix.SOCK_SEQPACKET} {
		for _, a0 := range []uint32{0, unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_PACKET, unix.AF_NETLINK,
			unix.CLONE_NEWUSER, unix.CLONE_NEWNS | uint32(unix.SIGCHLD), unix.CLONE_VM | unix.CLONE_THREAD, uint32(unix.SIGCHLD)} {
			argSets = append(argSets, [6]uint32{a0, a1})
		}
	}
	maxNr := uint32(0)
	for _, n := range info.SyscallNames {
		maxNr = max(maxNr, uint32(n))
	}
	for o := range programs {
		tree, err := assemble(o)
		if err != nil {
			t.Fatal(err)
		}
		list, err := assembleLinear(o)
		if err != nil {
			t.Fatal(err)
		}
		tvm, lvm := vmOf(t, tree), vmOf(t, list)
		checked := 0
		for _, archID := range []uint32{uint32(info.ID), 0x40000003 /* i386 */} {
			for nr := uint32(0); nr <= maxNr+16; nr++ {
				for _, n := range []uint32{nr, nr | uint32(info.SeccompMask)} {
					for _, args := range argSets {
						got, want := verdict(t, tvm, archID, n, args), verdict(t, lvm, archID, n, args)
						if got != want {
							t.Fatalf("%+v: arch %#x nr %d args %v: tree %#x, list %#x", o, archID, n, args, got, want)
						}
						checked++
					}
				}
			}
		}
		named := func(name string, args [6]uint32) uint32 {
			n, ok := info.SyscallNames[name]
			if !ok {
				t.Fatalf("no system call %s", name)
			}
			return verdict(t, tvm, uint32(info.ID), uint32(n), args)
		}
		inet, unixSock, memfd, inotify := uint32(retEPERM), uint32(retAllow), uint32(retAllow), uint32(retAllow)
		if o.NoMemfd {
			memfd = retEPERM
		}
		if o.NoInotify {
			inotify = retEPERM
		}
		if o.Inet {
			inet = retAllow
		}
		if o.NoUnix {
			unixSock = retEPERM
		}
		for _, c := range []struct {
			name string
			args [6]uint32
			want uint32
		}{
			{"read", [6]uint32{}, retAllow},
			{"ptrace", [6]uint32{}, retEPERM},
			{"mount", [6]uint32{}, retEPERM},
			{"unshare", [6]uint32{}, retEPERM},
			{"bpf", [6]uint32{}, retEPERM},
			{"io_uring_setup", [6]uint32{}, retEPERM},
			{"clone3", [6]uint32{}, retENOSYS},
			{"clone", [6]uint32{uint32(unix.SIGCHLD)}, retAllow},
			{"clone", [6]uint32{unix.CLONE_NEWUSER | uint32(unix.SIGCHLD)}, retEPERM},
			{"ioctl", [6]uint32{0, unix.TCGETS}, retAllow},
			{"ioctl", [6]uint32{0, unix.TIOCSTI}, retEPERM},
			{"socket", [6]uint32{unix.AF_UNIX, unix.SOCK_STREAM}, unixSock},
			{"socketpair", [6]uint32{unix.AF_UNIX, unix.SOCK_STREAM}, retAllow},
			{"socket", [6]uint32{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, inet},
			{"socket", [6]uint32{unix.AF_INET6, unix.SOCK_DGRAM}, inet},
			{"socket", [6]uint32{unix.AF_INET, unix.SOCK_RAW}, retEPERM},
			{"socket", [6]uint32{unix.AF_PACKET, unix.SOCK_RAW}, retEPERM},
			{"memfd_create", [6]uint32{}, memfd},
			{"inotify_init1", [6]uint32{}, inotify},
			{"inotify_add_watch", [6]uint32{}, inotify},
		} {
			if got := named(c.name, c.args); got != c.want {
				t.Errorf("%+v: %s%v: %#x, want %#x", o, c.name, c.args, got, c.want)
			}
		}
		if got := verdict(t, tvm, 0x40000003, 0, [6]uint32{}); got != unix.SECCOMP_RET_KILL_PROCESS {
			t.Errorf("a foreign architecture's call: %#x, want kill", got)
		}
		t.Logf("%+v: %d calls checked; %d instructions (the list: %d)", o, checked, len(tree), len(list))
	}
}

// BenchmarkFilterAttach attaches the container's filter to a fresh thread
// (each iteration's thread exits with its filter): the tree against the
// list it replaced, in the same run.
func BenchmarkFilterAttach(b *testing.B) {
	for _, v := range []struct {
		name string
		asm  func(FilterOptions) ([]bpf.RawInstruction, error)
	}{{"tree", assemble}, {"list", assembleLinear}} {
		b.Run(v.name, func(b *testing.B) {
			raw, err := v.asm(FilterOptions{Inet: true})
			if err != nil {
				b.Fatal(err)
			}
			prog := encode(raw)
			var times []time.Duration
			for b.Loop() {
				ch := make(chan error)
				go func() {
					runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
					start := time.Now()
					err := stage.LoadProgram(prog, false)
					times = append(times, time.Since(start))
					ch <- err
				}()
				if err := <-ch; err != nil {
					b.Fatal(err)
				}
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds()), "median-µs")
		})
	}
}

// TestProgram: the encoded program decodes back to the assembled one, and
// the stage refuses to load an empty or truncated program.
func TestProgram(t *testing.T) {
	raw, err := assemble(FilterOptions{Inet: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Program(FilterOptions{Inet: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 8*len(raw) {
		t.Fatalf("%d bytes for %d instructions", len(p), len(raw))
	}
	for i, r := range raw {
		got := bpf.RawInstruction{Op: binary.NativeEndian.Uint16(p[8*i:]), Jt: p[8*i+2], Jf: p[8*i+3], K: binary.NativeEndian.Uint32(p[8*i+4:])}
		if got != r {
			t.Fatalf("instruction %d: %+v, want %+v", i, got, r)
		}
	}
	for _, bad := range [][]byte{nil, {}, p[:len(p)-3]} {
		if err := stage.LoadProgram(bad, false); err == nil {
			t.Fatalf("a program of %d bytes was loaded", len(bad))
		}
	}
}

// assembleLinear is the earlier, linear layout, kept as the reference the
// tree is checked against: the same start and rule blocks (prologue,
// ruleBlock), then each rule behind its own call-number test in policy
// order, then the allowlist as flat comparisons; EPERM for the rest. What
// TestFilterTree compares is thus the dispatch on the call number, which
// is what the tree changed; the rule blocks' own verdicts are checked by
// name there.
func assembleLinear(o FilterOptions) ([]bpf.RawInstruction, error) {
	_, prog, nr, err := prologue()
	if err != nil {
		return nil, err
	}
	for _, r := range rules(o) {
		n, err := nr(r.name)
		if err != nil {
			return nil, err
		}
		// [ld nr, jne nr → past the block, the rule's block]
		block := ruleBlock(r)
		prog = append(prog, bpf.LoadAbsolute{Off: offNr, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: n, SkipFalse: uint8(len(block))})
		prog = append(prog, block...)
	}
	allowed := make([]uint32, 0, len(allowedSyscalls)+1)
	for _, name := range append(append([]string{}, allowedSyscalls...), "ioctl") {
		n, err := nr(name)
		if err != nil {
			return nil, err
		}
		allowed = append(allowed, n)
	}
	prog = append(prog, bpf.LoadAbsolute{Off: offNr, Size: 4})
	// Chunks of at most 64 comparisons, each jumping to its own "allow".
	for len(allowed) > 0 {
		chunk := allowed[:min(64, len(allowed))]
		allowed = allowed[len(chunk):]
		for i, n := range chunk {
			prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: n, SkipTrue: uint8(len(chunk) - i)})
		}
		prog = append(prog, bpf.Jump{Skip: 1}, bpf.RetConstant{Val: retAllow})
	}
	prog = append(prog, bpf.RetConstant{Val: retEPERM})
	return bpf.Assemble(prog)
}
