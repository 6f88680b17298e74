package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"cel.dev/cel-go/cel"
	exprlang "github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
	"github.com/tetratelabs/wazero"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// The raw engines and peers measured beside the tiers. Each is the bare
// library or program a tier builds on, doing the same workload with none of
// airlock's checks, budgets or isolation.
func init() {
	RegisterBaseline(rawExpr)
	RegisterBaseline(celGo)
	RegisterBaseline(rawStarlark)
	RegisterBaseline(rawWazero)
	RegisterBaseline(forkExec)
	RegisterBaseline(bwrap)
	RegisterBaseline(runscRun)
	RegisterBaseline(qemuBoot)
}

func always() error { return nil }

func noop() {}

// warmOnly wraps a run prepared once into a Warm function.
func warmOnly(run Trial) func(context.Context) (Trial, func(), error) {
	return func(context.Context) (Trial, func(), error) { return run, noop, nil }
}

func want2(v any) error {
	if fmt.Sprint(v) != "2" {
		return fmt.Errorf("value %v, want 2", v)
	}
	return nil
}

func rawExpr() Target {
	return Target{
		Name: "raw-expr", Type: TypeRaw, Workload: airlock.KindExpr, For: []string{"expr"}, Available: always,
		ColdNote: "expr.Compile + vm.Run", WarmNote: "vm.Run of a compiled program",
		Cold: func(context.Context, int) (Trial, func(), error) {
			return func(context.Context) error {
				p, err := exprlang.Compile(ExprCode)
				if err != nil {
					return err
				}
				v, err := vm.Run(p, nil)
				if err != nil {
					return err
				}
				return want2(v)
			}, noop, nil
		},
		Warm: func(context.Context) (Trial, func(), error) {
			p, err := exprlang.Compile(ExprCode)
			if err != nil {
				return nil, nil, err
			}
			return func(context.Context) error {
				v, err := vm.Run(p, nil)
				if err != nil {
					return err
				}
				return want2(v)
			}, noop, nil
		},
	}
}

func celGo() Target {
	eval := func(p cel.Program) error {
		v, _, err := p.Eval(map[string]any{})
		if err != nil {
			return err
		}
		return want2(v.Value())
	}
	return Target{
		Name: "cel-go", Type: TypePeer, Workload: airlock.KindExpr, Available: always,
		ColdNote: "Env.Compile + Env.Program + Eval (the Env built untimed)", WarmNote: "Eval of a planned program",
		Cold: func(context.Context, int) (Trial, func(), error) {
			env, err := cel.NewEnv()
			if err != nil {
				return nil, nil, err
			}
			return func(context.Context) error {
				ast, iss := env.Compile(ExprCode)
				if iss.Err() != nil {
					return iss.Err()
				}
				p, err := env.Program(ast)
				if err != nil {
					return err
				}
				return eval(p)
			}, noop, nil
		},
		Warm: func(context.Context) (Trial, func(), error) {
			env, err := cel.NewEnv()
			if err != nil {
				return nil, nil, err
			}
			ast, iss := env.Compile(ExprCode)
			if iss.Err() != nil {
				return nil, nil, iss.Err()
			}
			p, err := env.Program(ast)
			if err != nil {
				return nil, nil, err
			}
			return func(context.Context) error { return eval(p) }, noop, nil
		},
	}
}

func rawStarlark() Target {
	opts := &syntax.FileOptions{}
	result := func(g starlark.StringDict) error { return want2(g["result"]) }
	return Target{
		Name: "raw-starlark", Type: TypeRaw, Workload: airlock.KindStarlark, For: []string{"starlark"}, Available: always,
		ColdNote: "starlark.ExecFileOptions (parse, resolve, compile, run) on a new thread", WarmNote: "Program.Init of a compiled program on a new thread",
		Cold: func(context.Context, int) (Trial, func(), error) {
			return func(context.Context) error {
				g, err := starlark.ExecFileOptions(opts, &starlark.Thread{}, "bench.star", StarlarkCode, nil)
				if err != nil {
					return err
				}
				return result(g)
			}, noop, nil
		},
		Warm: func(context.Context) (Trial, func(), error) {
			_, prog, err := starlark.SourceProgramOptions(opts, "bench.star", StarlarkCode, func(string) bool { return false })
			if err != nil {
				return nil, nil, err
			}
			return func(context.Context) error {
				g, err := prog.Init(&starlark.Thread{}, nil)
				if err != nil {
					return err
				}
				return result(g)
			}, noop, nil
		},
	}
}

func rawWazero() Target {
	call := func(ctx context.Context, r wazero.Runtime, m wazero.CompiledModule) error {
		mod, err := r.InstantiateModule(ctx, m, wazero.NewModuleConfig().WithName(""))
		if err != nil {
			return err
		}
		defer mod.Close(ctx)
		out, err := mod.ExportedFunction(WasmEntry).Call(ctx)
		if err != nil {
			return err
		}
		return want2(out[0])
	}
	return Target{
		Name: "raw-wazero", Type: TypeRaw, Workload: airlock.KindWasm, For: []string{"wasm"}, Available: always,
		ColdNote: "NewRuntime + CompileModule + instantiate + call + close", WarmNote: "instantiate a compiled module + call + close",
		Cold: func(context.Context, int) (Trial, func(), error) {
			return func(ctx context.Context) error {
				r := wazero.NewRuntime(ctx)
				defer r.Close(ctx)
				m, err := r.CompileModule(ctx, wasmModule)
				if err != nil {
					return err
				}
				return call(ctx, r, m)
			}, noop, nil
		},
		Warm: func(ctx context.Context) (Trial, func(), error) {
			r := wazero.NewRuntime(context.Background())
			m, err := r.CompileModule(ctx, wasmModule)
			if err != nil {
				_ = r.Close(context.Background())
				return nil, nil, err
			}
			return func(ctx context.Context) error { return call(ctx, r, m) },
				func() { _ = r.Close(context.Background()) }, nil
		},
	}
}

// command returns a cold-only target that runs a program to completion.
func command(name, typ string, for_ []string, note string, argv func() ([]string, func(), error), available func() error) Target {
	return Target{
		Name: name, Type: typ, Workload: airlock.KindCommand, For: for_, Available: available,
		ColdNote: note, WarmNote: "no warm path: every run starts the program afresh",
		Cold: func(context.Context, int) (Trial, func(), error) {
			args, done, err := argv()
			if err != nil {
				return nil, nil, err
			}
			return func(ctx context.Context) error {
				out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
				if err != nil {
					return fmt.Errorf("%s: %w: %s", filepath.Base(args[0]), err, value.Clip(string(out), 200))
				}
				return nil
			}, done, nil
		},
	}
}

// RawCommand is a cold-only raw engine for the tiers for_ running the
// command workload: each run starts the command line argv returns
// (prepared untimed, with its clean-up) and waits for it; available (nil:
// always) says why it cannot run here.
func RawCommand(name string, for_ []string, note string, argv func() ([]string, func(), error), available func() error) Target {
	if available == nil {
		available = always
	}
	return command(name, TypeRaw, for_, note, argv, available)
}

func forkExec() Target {
	return command("fork-exec", TypeRaw, []string{"seccomp", "process"}, "fork/exec of "+CommandPath+" and wait",
		func() ([]string, func(), error) { return []string{CommandPath}, noop, nil }, always)
}

func bwrap() Target {
	var path string
	return command("bwrap", TypePeer, []string{"seccomp", "process"},
		"bwrap --unshare-all --ro-bind / / --proc /proc --dev /dev "+CommandPath,
		func() ([]string, func(), error) {
			return []string{path, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", CommandPath}, noop, nil
		},
		func() (err error) { path, err = tools.Find("bwrap"); return err })
}

// runscRun is a cold `runsc run` of /bin/true in a bundle whose root is the
// host's / read-only, with no network: what the gVisor tier pays without
// its agent, pool or cgroups.
func runscRun() Target {
	var runsc string
	n := 0
	return command("runsc-run", TypeRaw, []string{"gvisor"},
		"runsc --network=none --platform=systrap run (a fresh bundle and sandbox)",
		func() ([]string, func(), error) {
			dir, err := os.MkdirTemp("", "airlock-bench-runsc-")
			if err != nil {
				return nil, nil, err
			}
			spec := map[string]any{
				"ociVersion": "1.0.0",
				"process":    map[string]any{"args": []string{CommandPath}, "cwd": "/", "env": []string{"PATH=/usr/bin:/bin"}, "user": map[string]int{"uid": 0, "gid": 0}},
				"root":       map[string]any{"path": "/", "readonly": true},
				"hostname":   "bench",
				"mounts":     []map[string]string{{"destination": "/proc", "type": "proc", "source": "proc"}},
				"linux":      map[string]any{"namespaces": []map[string]string{{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}}},
			}
			data, _ := json.Marshal(spec)
			if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
				_ = os.RemoveAll(dir)
				return nil, nil, err
			}
			n++
			id := "airlock-bench-" + strconv.Itoa(os.Getpid()) + "-" + strconv.Itoa(n)
			state := filepath.Join(dir, "state")
			done := func() {
				_ = exec.Command(runsc, "--root", state, "delete", "--force", id).Run()
				// runsc bind-mounts an empty network namespace into its
				// root for --network=none; it outlives the sandbox.
				_ = unix.Unmount(filepath.Join(state, "null-netns"), unix.MNT_DETACH)
				_ = os.RemoveAll(dir)
			}
			return []string{runsc, "--root", state, "--network=none", "--platform=systrap", "run", "--bundle", dir, id}, done, nil
		},
		func() (err error) {
			if os.Geteuid() != 0 {
				return errors.New("runsc run needs root")
			}
			runsc, err = tools.Find("runsc")
			return err
		})
}

// qemuBoot boots the microVM tier's kernel on the tier's machine type with
// no root: the kernel panics at "unable to mount root" and, with panic=-1
// and -no-reboot, QEMU exits. That is the bare boot a microVM pays before
// any guest code runs: a lower bound, cheaper than the package benchmark's
// bare boot (same initramfs, /bin/true as init).
func qemuBoot() Target {
	var qemu, kernel string
	accel, cpu := "tcg,thread=multi", "qemu64,+smep" // the tier's model under TCG
	t := command("qemu-boot", TypeRaw, []string{"microvm"},
		"qemu -M microvm, the tier's kernel, no root: boot until the kernel gives up",
		func() ([]string, func(), error) {
			line := "console=ttyS0 quiet loglevel=1 cryptomgr.notests pci=off tsc=reliable no_timer_check panic=-1"
			if khz := tools.TSCkHz(); khz > 0 {
				// Without it a TCG guest can spin calibrating its clock.
				line += " tsc_early_khz=" + strconv.FormatInt(khz, 10)
			}
			return []string{qemu, "-M", "microvm,x-option-roms=off,rtc=on,pit=off,pic=off", "-accel", accel, "-cpu", cpu,
				"-m", "256", "-nodefaults", "-no-user-config", "-display", "none", "-nic", "none", "-no-reboot",
				"-serial", "null", "-kernel", kernel, "-append", line}, noop, nil
		},
		func() (err error) {
			if qemu, kernel, err = guestTools(); err != nil {
				return err
			}
			if tools.KVMBoots(qemu, kernel, "") {
				accel, cpu = "kvm", "host"
			}
			return nil
		})
	t.Accel = func() string { return strings.SplitN(accel, ",", 2)[0] }
	return t
}

// guestTools finds QEMU and the microVM tier's guest kernel.
func guestTools() (qemu, kernel string, err error) {
	if qemu, err = tools.Find("qemu-system-x86_64"); err != nil {
		return "", "", err
	}
	kernel, err = tools.File("AIRLOCK_MICROVM_KERNEL", "microvm/vmlinux")
	return qemu, kernel, err
}

// WholeProcess is a cold-only peer that runs argv (an airlock command, say)
// with env added to this environment, to completion, start-up and exit
// included, and is compared with versus, the target doing the same
// whole-process work without it (bwrap for `airlock run --tier process`);
// for_ names the tiers it is shown beside; available (nil: always) says
// why it cannot run here.
func WholeProcess(name string, workload airlock.Kind, for_ []string, versus string, available func() error, env, argv []string) Target {
	if available == nil {
		available = always
	}
	return Target{
		Name: name, Type: TypePeer, Workload: workload, For: for_, Versus: versus, Available: available,
		ColdNote: strings.Join(argv[1:], " ") + " (the whole process)", WarmNote: "no warm path: every run starts the program afresh",
		Cold: func(context.Context, int) (Trial, func(), error) {
			return func(ctx context.Context) error {
				cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
				cmd.Env = append(os.Environ(), env...)
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("%s: %w: %s", name, err, value.Clip(string(out), 200))
				}
				return nil
			}, noop, nil
		},
	}
}
