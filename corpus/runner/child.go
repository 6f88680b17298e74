package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus"
)

// ChildEnv marks a process as a corpus child: the program re-executed by
// the runner must call [Child] when [IsChild] reports true.
const ChildEnv = "AIRLOCK_CORPUS_CHILD"

// IsChild reports whether this process is a corpus child.
func IsChild() bool { return os.Getenv(ChildEnv) == "1" }

// spec is what the parent hands a child on its standard input.
type spec struct {
	Tier     string            `json:"tier,omitempty"`
	Case     *corpus.Case      `json:"case,omitempty"`
	Suite    string            `json:"suite,omitempty"` // a suite's case: its pseudo-tier and the case as JSON
	Raw      json.RawMessage   `json:"raw,omitempty"`
	Vars     map[string]string `json:"vars"`
	Module   string            `json:"module,omitempty"` // a file holding the WASM module to run
	MemoryMB int64             `json:"memory_mb"`
	WallMS   int64             `json:"wall_ms"`
}

// reply is what a child that survived writes on its standard output.
type reply struct {
	Result    airlock.Result `json:"result"`
	Judgement *Judgement     `json:"judgement,omitempty"`
}

// Child runs one case in this process and writes the result as JSON on
// stdout. It returns the process's exit code: 0 when the case ran (whatever
// its outcome), 2 when the child itself could not set the case up. A crash
// or a hang never returns: the parent sees the signal or the timeout.
//
// sources are the parent's (see [NewConfig]); suites are those the parent
// was given beyond [DefaultSuites].
func Child(sources []TierSource, stdin io.Reader, stdout, stderr io.Writer, suites ...Suite) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "corpus child: "+format+"\n", args...)
		return 2
	}
	var s spec
	if err := json.NewDecoder(io.LimitReader(stdin, 64<<20)).Decode(&s); err != nil {
		return fail("reading the case: %v", err)
	}
	if s.Suite != "" {
		return childSuite(s, withSuites(suites), stdout, stderr)
	}
	if s.Case == nil {
		return fail("the spec names neither a case nor a suite")
	}
	var f *TierSource
	for i := range sources {
		if sources[i].Name == s.Tier {
			f = &sources[i]
		}
	}
	if f == nil {
		return fail("no tier named %q", s.Tier)
	}
	tier, err := f.New()
	if err != nil {
		return fail("building tier %s: %v", s.Tier, err)
	}
	defer closeTier(tier)
	// An in-process tier shares this address space with the code it runs:
	// bound it, so a memory bomb that gets past the tier kills this child
	// (an escape) rather than the machine. OS-backed tiers are bounded by
	// their own cgroups and rlimits; their helpers (runsc, QEMU) need far
	// more address space than they use, so they are left alone here.
	if tier.Level() == airlock.LevelInterpreter && s.MemoryMB > 0 {
		lim := uint64(s.MemoryMB) << 20
		if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: lim, Max: lim}); err != nil {
			return fail("memory rlimit: %v", err)
		}
	}
	// Go's default is 1 GiB of goroutine stack before a fatal overflow;
	// growing to it takes long enough on a busy machine to hit the child's
	// timeout. A quarter of that ends unbounded recursion sooner; a case
	// that crashes here and would not on a real host is reported as an
	// escape, the conservative side.
	debug.SetMaxStack(256 << 20)
	job, err := s.Case.BuildJob(s.Vars)
	if err != nil {
		return fail("building the job: %v", err)
	}
	expandGrants(&job, s.Vars)
	if s.Module != "" {
		if job.Module, err = os.ReadFile(s.Module); err != nil {
			return fail("reading the module: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(s.WallMS)*time.Millisecond)
	defer cancel()
	res, err := s.Case.Exec(ctx, tier, job, s.Vars)
	if res.Tier == "" {
		res.Tier = tier.Name()
	}
	if err != nil && res.Stopped == nil && res.Error == nil {
		res.SetError(err)
	}
	if err := json.NewEncoder(stdout).Encode(reply{Result: res}); err != nil {
		return fail("writing the result: %v", err)
	}
	return 0
}

// expandGrants substitutes the runner's variables in granted paths (a case
// may grant ${GRANT_DIR}).
func expandGrants(job *airlock.Job, vars map[string]string) {
	for i, p := range job.Grants.FS.Read {
		for k, v := range vars {
			p = strings.ReplaceAll(p, "${"+k+"}", v)
		}
		job.Grants.FS.Read[i] = p
	}
}

// childSuite runs one case of a suite and writes its judgement.
func childSuite(s spec, suites []Suite, stdout, stderr io.Writer) int {
	for _, su := range suites {
		if su.Name != s.Suite {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(s.WallMS)*time.Millisecond)
		defer cancel()
		j := su.Run(ctx, s.Raw, s.Vars)
		if err := json.NewEncoder(stdout).Encode(reply{Judgement: &j}); err != nil {
			fmt.Fprintf(stderr, "corpus child: writing the result: %v\n", err)
			return 2
		}
		return 0
	}
	fmt.Fprintf(stderr, "corpus child: no suite named %q\n", s.Suite)
	return 2
}
