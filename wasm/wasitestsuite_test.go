package wasm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// wasiSuiteEnv names the directory holding the WebAssembly WASI test suite
// (preview 1: tests/<language>/testsuite/wasm32-wasip1/NAME.wasm and
// NAME.json). The suite is data from outside the project, so the test is
// opt-in: without the variable it skips, under CI too.
const wasiSuiteEnv = "AIRLOCK_WASI_TESTSUITE"

// wasiKnownDifferences are the suite's tests whose verdict through the tier
// differs from raw wazero on purpose or by a documented limitation
// (docs/wasm.md), keyed by language/name. A difference not listed fails the
// test, and so does a listed one that no longer differs.
var wasiKnownDifferences = map[string]string{
	// The test accepts either of POSIX's and Linux's answers; raw wazero
	// gives neither, because its host files are Go *os.File, whose WriteAt
	// refuses a file opened with O_APPEND. The scratch writes at the
	// offset, as POSIX says.
	"c/pwrite-with-append": "raw wazero refuses pwrite on an O_APPEND host file; the scratch writes at the offset",
}

// wasiSpec is a test's JSON specification; missing fields take the
// defaults the suite's specification gives.
type wasiSpec struct {
	Args     []string          `json:"args"`
	Env      map[string]string `json:"env"`
	Dirs     []string          `json:"dirs"` // preopened under their own (relative) names
	Root     string            `json:"root"` // preopened as "/"
	Stdin    string            `json:"stdin"`
	ExitCode int               `json:"exit_code"`
	Stdout   *string           `json:"stdout"`
	Stderr   *string           `json:"stderr"`
}

// wasiRun is what one run of a suite test produced.
type wasiRun struct {
	exit           int
	stdout, stderr string
	err            error
}

// verdict judges a run as the suite's runner does: the exit code, and the
// expected stdout and stderr as prefixes of the output.
func (s *wasiSpec) verdict(r wasiRun) (bool, string) {
	switch {
	case r.err != nil:
		return false, r.err.Error()
	case r.exit != s.ExitCode:
		return false, fmt.Sprintf("exit code %d, want %d (stderr %q)", r.exit, s.ExitCode, clip(r.stderr))
	case s.Stdout != nil && !strings.HasPrefix(r.stdout, *s.Stdout):
		return false, fmt.Sprintf("stdout %q, want prefix %q", clip(r.stdout), *s.Stdout)
	case s.Stderr != nil && !strings.HasPrefix(r.stderr, *s.Stderr):
		return false, fmt.Sprintf("stderr %q, want prefix %q", clip(r.stderr), *s.Stderr)
	}
	return true, "pass"
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

type wasiTest struct {
	name string // language/name
	wasm string // the module's path
	spec wasiSpec
}

func loadWASISuite(t *testing.T, root string) []wasiTest {
	t.Helper()
	mods, err := filepath.Glob(filepath.Join(root, "tests", "*", "testsuite", "wasm32-wasip1", "*.wasm"))
	if err != nil || len(mods) == 0 {
		t.Fatalf("%s=%s holds no tests/*/testsuite/wasm32-wasip1/*.wasm (%v)", wasiSuiteEnv, root, err)
	}
	var tests []wasiTest
	for _, m := range mods {
		lang := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(m))))
		base := strings.TrimSuffix(m, ".wasm")
		wt := wasiTest{name: lang + "/" + filepath.Base(base), wasm: m}
		if b, err := os.ReadFile(base + ".json"); err == nil {
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields() // a field this runner ignores would silently weaken the test
			if err := dec.Decode(&wt.spec); err != nil {
				t.Fatalf("%s.json: %v", base, err)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		tests = append(tests, wt)
	}
	return tests
}

// TestWASITestsuite runs every test of the WASI test suite on raw wazero,
// configured as the suite's runner configures a runtime (wazero's WASI,
// host directories preopened), and through the tier (the fixtures as job
// files in the scratch, the environment as the job's env), and compares
// the verdicts.
func TestWASITestsuite(t *testing.T) {
	root := os.Getenv(wasiSuiteEnv)
	if root == "" {
		t.Skipf("%s is not set: the WASI test suite is opt-in data from outside the project", wasiSuiteEnv)
	}
	tests := loadWASISuite(t, root)
	tier := newTier(t, NewConfig())
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)

	var rawPass, tierPass int
	var unexpected []string
	seen := map[string]bool{}
	for _, wt := range tests {
		mod, err := os.ReadFile(wt.wasm)
		if err != nil {
			t.Fatal(err)
		}
		raw := runWASIRaw(ctx, t, rt, wt, mod)
		rawOK, rawWhy := wt.spec.verdict(raw)
		tr := runWASITier(ctx, t, tier, wt, mod)
		tierOK, tierWhy := wt.spec.verdict(tr)
		if rawOK {
			rawPass++
		}
		if tierOK {
			tierPass++
		}
		reason, known := wasiKnownDifferences[wt.name]
		seen[wt.name] = true
		switch {
		case rawOK != tierOK && !known:
			unexpected = append(unexpected, fmt.Sprintf("%s: raw %s; tier %s", wt.name, rawWhy, tierWhy))
		case rawOK == tierOK && known:
			unexpected = append(unexpected, fmt.Sprintf("%s: listed as a known difference (%s) but both %s", wt.name, reason, passFail(rawOK)))
		case rawOK != tierOK:
			t.Logf("%s: known difference (%s): raw %s; tier %s", wt.name, reason, rawWhy, tierWhy)
		case !rawOK:
			t.Logf("%s: fails on both: raw %s; tier %s", wt.name, rawWhy, tierWhy)
		}
	}
	for name := range wasiKnownDifferences {
		if !seen[name] {
			unexpected = append(unexpected, name+": listed as a known difference but not in the suite")
		}
	}
	t.Logf("%d tests: %d pass on raw wazero, %d through the tier", len(tests), rawPass, tierPass)
	sort.Strings(unexpected)
	for _, u := range unexpected {
		t.Error(u)
	}
}

func passFail(ok bool) string {
	if ok {
		return "pass"
	}
	return "fail"
}

// runWASIRaw runs a test on wazero alone, as the suite's runner would:
// fixture directories copied to a temporary directory (tests write to
// them) and preopened from the host, the real clocks and entropy.
func runWASIRaw(ctx context.Context, t *testing.T, rt wazero.Runtime, wt wasiTest, mod []byte) wasiRun {
	t.Helper()
	fsc := wazero.NewFSConfig()
	dir := filepath.Dir(wt.wasm)
	if wt.spec.Root != "" {
		fsc = fsc.WithDirMount(copyFixture(t, filepath.Join(dir, wt.spec.Root)), "/")
	}
	for _, d := range wt.spec.Dirs {
		fsc = fsc.WithDirMount(copyFixture(t, filepath.Join(dir, d)), d)
	}
	var stdout, stderr bytes.Buffer
	mc := wazero.NewModuleConfig().
		WithName("").
		WithArgs(append([]string{filepath.Base(wt.wasm)}, wt.spec.Args...)...).
		WithStdin(strings.NewReader(wt.spec.Stdin)).
		WithStdout(&stdout).
		WithStderr(&stderr).
		WithSysWalltime().
		WithSysNanotime().
		WithSysNanosleep().
		WithRandSource(rand.Reader).
		WithFSConfig(fsc)
	for _, k := range value.SortedKeys(wt.spec.Env) {
		mc = mc.WithEnv(k, wt.spec.Env[k])
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	r := wasiRun{}
	m, err := rt.InstantiateWithConfig(ctx, mod, mc)
	if m != nil {
		_ = m.Close(ctx)
	}
	var exit *sys.ExitError
	switch {
	case errors.As(err, &exit) && ctx.Err() == nil:
		r.exit = int(exit.ExitCode())
	case err != nil:
		r.err = err
	}
	r.stdout, r.stderr = stdout.String(), stderr.String()
	return r
}

// runWASITier runs a test through the tier: the contents of the fixture
// directories become the job's files, in the scratch that is the guest's
// "/" (a root fixture at the top, a listed directory under its name).
func runWASITier(ctx context.Context, t *testing.T, tier *Tier, wt wasiTest, mod []byte) wasiRun {
	t.Helper()
	files := map[string]string{}
	dir := filepath.Dir(wt.wasm)
	if wt.spec.Root != "" {
		addFixtureFiles(t, files, filepath.Join(dir, wt.spec.Root), "")
	}
	for _, d := range wt.spec.Dirs {
		addFixtureFiles(t, files, filepath.Join(dir, d), d+"/")
	}
	job := airlock.Job{
		Kind:   airlock.KindWasm,
		Module: mod,
		Argv:   wt.spec.Args,
		Stdin:  wt.spec.Stdin,
		Files:  files,
		Env:    wt.spec.Env,
	}
	res, err := tier.Run(ctx, job)
	return wasiRun{exit: res.ExitCode, stdout: res.Stdout, stderr: res.Stderr, err: err}
}

// copyFixture copies a fixture directory to a fresh temporary directory,
// writable as a checkout of the suite would be.
func copyFixture(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
		return fmt.Errorf("%s: fixtures hold only files and directories", p)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// addFixtureFiles adds a fixture directory's files to a job's files under
// prefix. An empty directory has no job-file form: it fails the test
// rather than vanish.
func addFixtureFiles(t *testing.T, files map[string]string, src, prefix string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			ents, err := os.ReadDir(p)
			if err == nil && len(ents) == 0 {
				return fmt.Errorf("%s: an empty directory cannot be a job file", p)
			}
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[prefix+filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
