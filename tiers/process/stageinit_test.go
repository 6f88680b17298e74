package process

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
	wk "github.com/airlock-sandbox/airlock/tiers/process/worker"
)

// lateInit are packages this test binary links beyond the stage's own
// dependencies, each initialised late (their imports reach packages that
// sort after the stage's) and some costly (protobuf descriptors of the
// cgroup statistics, eBPF, DNS). A stage that imported one of them, or
// anything else that made it wait for them, would initialise after them;
// in the airlock binary that same mistake lets goldmark, gonum/plot,
// cel-go, jsonschema and protobuf run first (30-40 ms before the stage).
var lateInit = []string{
	"github.com/containerd/", "github.com/cilium/", "github.com/miekg/", "github.com/sirupsen/",
	"github.com/godbus/", "gopkg.in/yaml", "google.golang.org/protobuf/reflect/",
	"google.golang.org/protobuf/types/", "google.golang.org/protobuf/internal/filedesc",
	"github.com/airlock-sandbox/airlock/egress", "github.com/airlock-sandbox/airlock/corpus",
	"github.com/airlock-sandbox/airlock/interp/", "github.com/airlock-sandbox/airlock/tiers/process",
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

// TestStageInitOrder runs this binary as a container stage with the
// spec pipe at end of file, so the stage reports at once and exits, and
// checks that the stage dispatched before any of the late packages was
// initialised (the Go spec's initialisation order: packages sorted by
// import path, each as soon as its imports are done — the stage package
// imports little, so it comes early).
func TestStageInitOrder(t *testing.T) {
	inits, st, stderr := initTrace(t, stage.Env+"="+stage.Container)
	if !strings.Contains(st.Error, "reading base spec") {
		t.Fatalf("the stage did not run (status %+v):\n%s", st, stderr)
	}
	checkNoLateInit(t, inits, lateInit, "stage")
}

// workerLateInit are packages of this test binary that a guarded expr
// worker needs none of. The worker waits for expr-lang, whose imports
// include standard packages sorted late (regexp, text/...), so less comes
// before it than before the stage: in the airlock binary 179 of 231
// packages (goldmark, jsonschema, wazero, egress and MCP are skipped;
// gonum/plot, cel-go and protobuf are not).
var workerLateInit = []string{
	"github.com/airlock-sandbox/airlock/egress", "github.com/airlock-sandbox/airlock/corpus",
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest", "github.com/miekg/",
}

// TestWorkerInitOrder does the same for a guarded expr worker, linked
// through its entry package (exprworker): started outside a user
// namespace, the worker refuses to go on, after it has dispatched.
func TestWorkerInitOrder(t *testing.T) {
	inits, _, stderr := initTrace(t, stage.Env+"="+stage.Worker, wk.Env+"=expr")
	if !strings.Contains(stderr, "not in a sandbox's user namespace") {
		t.Fatalf("the worker did not run or did not refuse the host's namespaces:\n%s", stderr)
	}
	checkNoLateInit(t, inits, workerLateInit, "worker")
	for _, pkg := range inits {
		if pkg == "github.com/airlock-sandbox/airlock/tiers/process" {
			t.Error("the process package was initialised before the worker dispatched")
		}
	}
}

// binaryLateInit are the costly packages of the airlock binary (its bench,
// MCP and peer dependencies, WASM), none of which a stage may wait for. A
// few cheap leaves (protobuf's detrand, cel's operators, parts of expr) are
// ready so early that they initialise first, at little cost.
var binaryLateInit = []string{
	"github.com/yuin/goldmark", "gonum.org/v1/plot", "github.com/google/jsonschema-go",
	"google.golang.org/protobuf/reflect/", "google.golang.org/protobuf/types/",
	"cel.dev/cel-go/cel", "cel.dev/cel-go/common/types", "github.com/modelcontextprotocol/go-sdk/mcp",
	"github.com/tetratelabs/wazero",
}

// TestBinaryStageInitOrder pins the same property on the airlock binary
// itself, which links far more than this test binary: it is built, run as
// a container stage with the init trace on, and must dispatch before any
// of its costly packages initialises.
func TestBinaryStageInitOrder(t *testing.T) {
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
}
