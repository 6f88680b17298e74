package process

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
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

// TestStageInitOrder runs this binary as a container stage with the
// runtime's init trace on, the spec pipe at end of file so the stage
// reports at once and exits, and checks that the stage dispatched before
// any of the late packages was initialised (the Go spec's initialisation
// order: packages sorted by import path, each as soon as its imports are
// done — the stage package imports little, so it comes early).
func TestStageInitOrder(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
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
	cmd.Env = []string{stage.Env + "=" + stage.Container, "GODEBUG=inittrace=1"}
	cmd.ExtraFiles = []*os.File{specR, statusW}
	var trace bytes.Buffer
	cmd.Stderr = &trace
	runErr := cmd.Run()
	statusW.Close()
	var st stage.Status
	if err := json.NewDecoder(statusR).Decode(&st); err != nil || !strings.Contains(st.Error, "reading base spec") {
		t.Fatalf("the stage did not run (status %+v, %v; exit %v):\n%s", st, err, runErr, trace.String())
	}
	var inits []string
	sc := bufio.NewScanner(&trace)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 1 && f[0] == "init" {
			inits = append(inits, f[1])
		}
	}
	if len(inits) == 0 {
		t.Fatalf("no init trace:\n%s", trace.String())
	}
	for _, pkg := range inits {
		for _, late := range lateInit {
			if strings.HasPrefix(pkg, late) {
				t.Errorf("%s was initialised before the stage dispatched", pkg)
			}
		}
	}
	t.Logf("%d packages initialised before the stage", len(inits))
}
