package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
)

// buildStage builds the separate stage binary from this source, as
// `make setup` does, into a directory of the test's own.
func buildStage(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the airlock-stage binary; skipped with -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.Skipf(t, "no go command to build the airlock-stage binary with: %v", err)
	}
	exe := filepath.Join(t.TempDir(), StageBinaryName)
	build := exec.Command(goTool, "build", "-o", exe, "github.com/airlock-sandbox/airlock/tiers/process/cmd/airlock-stage")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", StageBinaryName, err, out)
	}
	return exe
}

// pooledSandbox is a pooled sandbox waiting for its job.
func pooledSandbox(t testing.TB, tier *Tier) *sandbox {
	t.Helper()
	ready := tier.pool.Ready(poolKey{})
	if len(ready) == 0 {
		t.Fatal("no pooled sandbox")
	}
	return ready[0]
}

// TestStageBinary: with a separate stage binary configured, a container's
// PID 1 (seen from the host) is that binary, not the test binary, and jobs
// run on both tiers with their output, exit status and limits as usual.
func TestStageBinary(t *testing.T) {
	exe := buildStage(t)
	t.Run("container", func(t *testing.T) {
		cfg := testConfig(t).WithStageBinary(exe).WithPool(1)
		tier := newTestTier(t, bothTiers[0], cfg)
		if !tier.stage.separate() || tier.stage.path != exe {
			t.Fatalf("stage binary %+v, want %s", tier.stage, exe)
		}
		waitPoolFilled(t, tier, 1)
		running, err := os.Stat("/proc/" + strconv.Itoa(pooledSandbox(t, tier).pid) + "/exe")
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.Stat(exe)
		if !os.SameFile(running, want) {
			t.Fatalf("the pooled sandbox's stage is not %s", exe)
		}
		checkRuns(t, tier)
		assertClean(t, tier, cfg)
	})
	t.Run("filter", func(t *testing.T) {
		cfg := testConfig(t).WithStageBinary(exe)
		tier := newTestTier(t, bothTiers[1], cfg)
		if !tier.stage.separate() {
			t.Fatalf("stage binary %+v, want %s", tier.stage, exe)
		}
		checkRuns(t, tier)
		assertClean(t, tier, cfg)
	})
}

// checkRuns runs a job that writes, reads and fails.
func checkRuns(t *testing.T, tier *Tier) {
	t.Helper()
	res, err := tier.Run(context.Background(), cmdJob("sh", "-c", "echo hi > f && cat f && exit 3"))
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Stderr)
	}
	if string(res.Stdout) != "hi\n" || res.ExitCode != 3 {
		t.Fatalf("stdout %q exit %d, want \"hi\\n\" and 3 (stderr %q)", res.Stdout, res.ExitCode, res.Stderr)
	}
}

// TestStageBinaryEgress: the small stage binary has no egress code; a
// net-granted container started from it runs this binary's forwarder and
// reaches the granted origin (and only it) as from the full binary.
func TestStageBinaryEgress(t *testing.T) {
	exe := buildStage(t)
	checkEgress(t, func(c Config) Config { return c.WithStageBinary(exe) })
}

// TestStageBinaryRefused: a configured stage binary the tier may not
// trust, or that speaks another protocol, fails New with the reason; the
// test binary itself is accepted and recognised as this binary.
func TestStageBinaryRefused(t *testing.T) {
	exe := buildStage(t)
	dir := t.TempDir()
	copyTo := func(name string, mode os.FileMode) string {
		b, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("#!/bin/sh\necho 0123456789abcdef\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	crashing := filepath.Join(dir, "crashing")
	if err := os.WriteFile(crashing, []byte("#!/bin/sh\necho broken >&2\nexit 7\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "absent"), "stage binary not found"},
		{"directory", dir, "not a regular file"},
		{"group-writable", copyTo("gw", 0o775), "writable by group or others"},
		{"world-writable", copyTo("ww", 0o757), "writable by group or others"},
		{"not-executable-by-others", copyTo("private", 0o750), "not executable by other users"},
		{"other-stage-code", other, "carries other stage code"},
		{"fails", crashing, "broken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tier, err := New(testConfig(t).WithStageBinary(tc.path))
			if err == nil {
				tier.Close()
				t.Fatalf("New accepted %s", tc.path)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			if tc.name == "missing" && !errors.Is(err, errNoStage) {
				t.Fatalf("error %v is not errNoStage", err)
			}
		})
	}
	t.Run("owned-by-another-user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			testenv.Skipf(t, "chown to another user needs root")
		}
		p := copyTo("chowned", 0o755)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err := New(testConfig(t).WithStageBinary(p))
		if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Fatalf("New: %v, want the owner refused", err)
		}
		// Root run through sudo trusts the user who ran it, as it trusts
		// the tools directory that user built.
		t.Setenv("SUDO_UID", "65534")
		tier, err := New(testConfig(t).WithStageBinary(p))
		if err != nil {
			t.Fatalf("New under sudo by the binary's owner: %v", err)
		}
		tier.Close()
	})
	t.Run("self", func(t *testing.T) {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range bothTiers { // the re-execution fallback, at both levels
			cfg := testConfig(t).WithStageBinary(self)
			tier := newTestTier(t, tc, cfg)
			if tier.stage.separate() {
				t.Fatalf("the test binary was not recognised as this binary: %+v", tier.stage)
			}
			checkRuns(t, tier)
			assertClean(t, tier, cfg)
		}
	})
}

// TestStageDiscovery: without a configured binary, the one the
// environment names is used if it is good (naming this binary selects
// re-execution), and a bad or missing one is reported as the reason this
// binary is used instead.
func TestStageDiscovery(t *testing.T) {
	exe := buildStage(t)
	bad := filepath.Join(t.TempDir(), StageBinaryName)
	if err := os.WriteFile(bad, []byte("#!/bin/sh\necho stale\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path     string
		separate bool
		why      string
	}{
		{exe, true, ""},
		{self, false, ""},
		{bad, false, "carries other stage code"},
		{filepath.Join(t.TempDir(), "absent"), false, "not found"},
	} {
		t.Setenv(stageEnv, tc.path)
		sb, err := findStage()
		if err != nil {
			t.Fatal(err)
		}
		if sb.separate() != tc.separate || !strings.Contains(sb.why, tc.why) {
			t.Errorf("%s: found %+v, want separate=%v and a reason saying %q", tc.path, sb, tc.separate, tc.why)
		}
		if sb.path != "" {
			sb.file.Close()
		}
	}
}

// TestStageDigestCache: a stage binary's digest is asked once and kept
// beside it; the next check of the same file asks nothing. A changed
// binary, a kept digest of other code, a kept file others may write and
// (as root) one another user owns are each asked again. The stage here is a script that counts its runs
// and answers this binary's digest.
func TestStageDigestCache(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	counter := filepath.Join(dir, "runs")
	p := filepath.Join(dir, StageBinaryName)
	script := fmt.Sprintf("#!/bin/sh\necho run >> %s\necho %s\n", counter, stage.CodeDigest())
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	runs := func() int {
		b, _ := os.ReadFile(counter)
		return strings.Count(string(b), "run")
	}
	check := func(wantRuns int, what string) {
		t.Helper()
		sb, err := openStage(p)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		sb.file.Close()
		if got := runs(); got != wantRuns {
			t.Fatalf("%s: the stage ran %d times, want %d", what, got, wantRuns)
		}
	}
	check(1, "first check")
	if _, err := os.Stat(p + ".digest"); err != nil {
		t.Fatalf("no digest kept: %v", err)
	}
	check(1, "same file")
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	check(2, "changed binary")
	check(2, "changed binary, kept again")

	kept, err := os.ReadFile(p + ".digest")
	if err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(string(kept), stage.CodeDigest(), "0123456789abcdef", 1)
	if err := os.WriteFile(p+".digest", []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	check(3, "kept digest of other code")
	if err := os.Chmod(p+".digest", 0o666); err != nil {
		t.Fatal(err)
	}
	check(4, "kept file writable by others")
	if os.Geteuid() == 0 {
		if err := os.Chown(p+".digest", 65534, 65534); err != nil {
			t.Fatal(err)
		}
		check(5, "kept file of another user")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "."+StageBinaryName+".digest-*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
