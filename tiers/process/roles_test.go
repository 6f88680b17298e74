package process

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	wk "github.com/airlock-sandbox/airlock/tiers/process/worker"
)

// lateInit are packages the stage needs none of, each costly to
// initialise in the binaries that link them (protobuf descriptors of the
// cgroup statistics, eBPF, DNS, the egress policy, the interpreters). The
// stage binary must initialise none of them before its stage runs.
var lateInit = []string{
	"github.com/containerd/", "github.com/cilium/", "github.com/miekg/", "github.com/sirupsen/",
	"github.com/godbus/", "gopkg.in/yaml", "google.golang.org/protobuf/",
	"github.com/airlock-sandbox/airlock/egress", "github.com/airlock-sandbox/airlock/corpus",
	"github.com/airlock-sandbox/airlock/interp/", "github.com/airlock-sandbox/airlock/tiers/process/worker",
	"github.com/yuin/goldmark", "gonum.org/v1/plot", "cel.dev/", "github.com/tetratelabs/wazero",
}

// initTrace runs this test binary with env and the runtime's init trace
// on, fds 3 and 4 being a spec pipe at end of file and a status pipe, and
// returns the packages initialised (in order), the status the process
// reported on fd 4 (if any) and its standard error.
func initTrace(t *testing.T, env ...string) (inits []string, st stage.Status, stderr string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return initTraceOf(t, exe, env...)
}

// initTraceOf is initTrace for another binary.
func initTraceOf(t *testing.T, exe string, env ...string) (inits []string, st stage.Status, stderr string) {
	t.Helper()
	specR, specW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	specW.Close()
	defer specR.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer statusR.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(env, "GODEBUG=inittrace=1")
	cmd.ExtraFiles = []*os.File{specR, statusW}
	var trace bytes.Buffer
	cmd.Stderr = &trace
	_ = cmd.Run()
	statusW.Close()
	st, _ = stage.ReadStatus(statusR)
	sc := bufio.NewScanner(bytes.NewReader(trace.Bytes()))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 1 && f[0] == "init" {
			inits = append(inits, f[1])
		}
	}
	if len(inits) == 0 {
		t.Fatalf("no init trace:\n%s", trace.String())
	}
	return inits, st, trace.String()
}

// checkNoLateInit fails for each package of inits that is, or (for an
// entry ending in "/" or a partial path) starts with, an entry of late.
func checkNoLateInit(t *testing.T, inits, late []string, what string) {
	t.Helper()
	for _, pkg := range inits {
		for _, l := range late {
			if strings.HasPrefix(pkg, l) {
				t.Errorf("%s was initialised before the %s dispatched", pkg, what)
			}
		}
	}
	t.Logf("%d packages initialised before the %s", len(inits), what)
}

// TestStageBinaryInitOrder runs the stage binary as a container stage
// with the spec pipe at end of file, so the stage reports at once and
// exits, and checks that it initialised none of the late packages first:
// its main dispatches before anything else, and it links little.
func TestStageBinaryInitOrder(t *testing.T) {
	inits, st, stderr := initTraceOf(t, buildStage(t), stage.Env+"="+stage.Container)
	if !strings.Contains(st.Error, "reading base spec") {
		t.Fatalf("the stage did not run (status %+v):\n%s", st, stderr)
	}
	checkNoLateInit(t, inits, lateInit, "stage")
}

// TestWorkerRole runs this test binary as a guarded expr worker: started
// outside a user namespace, the worker refuses to go on. A worker name no
// registration knows is refused too.
func TestWorkerRole(t *testing.T) {
	_, _, stderr := initTrace(t, stage.Env+"="+stage.Worker, wk.Env+"=expr")
	if !strings.Contains(stderr, "not in a sandbox's user namespace") {
		t.Fatalf("the worker did not run or did not refuse the host's namespaces:\n%s", stderr)
	}
	_, _, stderr = initTrace(t, stage.Env+"="+stage.Worker, wk.Env+"=no-such-worker")
	if !strings.Contains(stderr, `no worker "no-such-worker"`) {
		t.Fatalf("an unknown worker was not refused:\n%s", stderr)
	}
}

// binaryLateInit are the costly packages of the airlock binary (its bench,
// MCP and peer dependencies, WASM), none of which its stage (started from
// cmd/airlock/internal/earlystage) may wait for. A few cheap leaves
// (protobuf's detrand, cel's operators, parts of expr) are ready so early
// that they initialise first, at little cost.
var binaryLateInit = []string{
	"github.com/yuin/goldmark", "gonum.org/v1/plot", "github.com/google/jsonschema-go",
	"google.golang.org/protobuf/reflect/", "google.golang.org/protobuf/types/",
	"cel.dev/cel-go/cel", "cel.dev/cel-go/common/types", "github.com/modelcontextprotocol/go-sdk/mcp",
	"github.com/tetratelabs/wazero",
}

// workerLateInit are packages of the airlock binary that its expr worker
// (started from cmd/airlock/internal/earlyexpr) needs none of. The worker
// waits for expr-lang, whose imports include standard packages sorted
// late, so more comes before it than before the stage.
var workerLateInit = []string{
	"github.com/yuin/goldmark", "github.com/google/jsonschema-go",
	"github.com/modelcontextprotocol/go-sdk/mcp", "github.com/airlock-sandbox/airlock/egress",
	"github.com/airlock-sandbox/airlock/corpus", "github.com/airlock-sandbox/airlock/internal/testing/tiertest",
	"github.com/airlock-sandbox/airlock/tiers/gvisor", "github.com/miekg/",
}

// TestBinaryRoles pins the dispatch of the airlock binary itself: built,
// it runs as a container stage, and as an expr worker, before any of its
// costly packages initialises when started in that role; refuses a role
// it does not know with one line and status 2, before anything else; and
// started without a role it is the CLI, and never a stage (its status
// pipe stays empty).
func TestBinaryRoles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the airlock binary; skipped with -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Skipf(t, "no go command to build the airlock binary with: %v", err)
	}
	exe := filepath.Join(t.TempDir(), "airlock")
	build := exec.Command(goTool, "build", "-o", exe, "github.com/airlock-sandbox/airlock/cmd/airlock")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the airlock binary: %v\n%s", err, out)
	}
	inits, st, stderr := initTraceOf(t, exe, stage.Env+"="+stage.Container)
	if !strings.Contains(st.Error, "reading base spec") {
		t.Fatalf("the stage did not run (status %+v):\n%s", st, stderr)
	}
	checkNoLateInit(t, inits, binaryLateInit, "stage")
	inits, _, stderr = initTraceOf(t, exe, stage.Env+"="+stage.Worker, wk.Env+"=expr")
	if !strings.Contains(stderr, "not in a sandbox's user namespace") {
		t.Fatalf("the expr worker did not run or did not refuse the host's namespaces:\n%s", stderr)
	}
	checkNoLateInit(t, inits, workerLateInit, "expr worker")
	if slices.Contains(inits, "github.com/airlock-sandbox/airlock/tiers/process") {
		t.Error("the process package was initialised before the expr worker dispatched")
	}
	_, _, stderr = initTraceOf(t, exe, stage.Env+"="+stage.Worker, wk.Env+"=starlark")
	if !strings.Contains(stderr, "not in a sandbox's user namespace") {
		t.Fatalf("the Starlark worker (main's role) did not run:\n%s", stderr)
	}

	cmd := exec.Command(exe, "help")
	cmd.Env = []string{stage.Env + "=process-no-such-stage"}
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || len(out) != 0 {
		t.Fatalf("unknown role: %v, stdout %q; want status 2 and no output", err, out)
	}
	if lines := strings.Split(strings.TrimSuffix(string(exit.Stderr), "\n"), "\n"); len(lines) != 1 ||
		!strings.Contains(lines[0], `unknown role "process-no-such-stage"`) {
		t.Fatalf("unknown role: stderr %q; want one line naming it", exit.Stderr)
	}

	inits, st, stderr = initTraceOf(t, exe)
	if st != (stage.Status{}) || len(inits) == 0 || !strings.Contains(stderr, "airlock") {
		t.Fatalf("without a role: status %+v, stderr:\n%s", st, stderr)
	}
}
