package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/replacefile"
	"github.com/airlock-sandbox/airlock/internal/statedir"
	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/internal/value"
	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
)

// StageBinaryName is the separate stage binary the tier looks for
// (tiers/process/cmd/airlock-stage): the sandbox's first stage without
// the rest of airlock, which starts several times faster than this binary
// re-executed.
const StageBinaryName = "airlock-stage"

// stageBinary is the program a sandbox's first stage runs: a separate
// stage binary, or this binary re-executed.
type stageBinary struct {
	file *os.File // opened once; executed through /proc/self/fd
	path string   // where it was found ("" for this binary)
	self bool     // the file is this binary
	// why says, for this binary, why no separate one is used.
	why string
}

// StageBinary returns the path of the separate stage binary this program's
// process tier uses (checked as it checks it: its owner, its mode, the
// stage code it carries), or "" when the tier re-executes its own binary.
// The gVisor tier starts its exec guard from it.
func StageBinary() string {
	sb, err := discoverStage()
	if err != nil || sb.self {
		return ""
	}
	return sb.path
}

// separate reports whether the stage is another binary than this one. The
// small stage binary carries no egress forwarder: a net-granted sandbox
// then also gets this binary, for the forwarder.
func (s *stageBinary) separate() bool { return !s.self }

var (
	foundStageOnce sync.Once
	foundStage     *stageBinary
	foundStageErr  error
)

// stageEnv names the stage binary to use, overriding the search (the
// tools' convention: AIRLOCK_<NAME>). Naming the running executable itself
// selects re-execution.
const stageEnv = "AIRLOCK_AIRLOCK_STAGE"

// discoverStage finds the stage binary once per process: the one $stageEnv
// names if set, else airlock-stage next to the running executable, then in
// the tools directory's bin and on $PATH. The first candidate that exists
// decides: if it is unusable (another stage code, a file others may
// write), the reason is kept and this binary is used.
func discoverStage() (*stageBinary, error) {
	foundStageOnce.Do(func() { foundStage, foundStageErr = findStage() })
	return foundStage, foundStageErr
}

func findStage() (*stageBinary, error) {
	self, err := selfExe()
	if err != nil {
		return nil, err
	}
	var candidates []string
	fallback := &stageBinary{file: self, self: true}
	if os.Getenv(stageEnv) == "" {
		if exe, err := os.Executable(); err == nil {
			candidates = append(candidates, filepath.Join(filepath.Dir(exe), StageBinaryName))
		}
	}
	if p, err := tools.Find(StageBinaryName); err == nil {
		candidates = append(candidates, p)
		fallback.why = "no " + StageBinaryName + " next to the executable or at " + p
	} else {
		fallback.why = "no " + StageBinaryName + " next to the executable; " + err.Error()
	}
	for _, p := range candidates {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		sb, err := openStage(p)
		if err != nil {
			fallback.why = err.Error()
			return fallback, nil
		}
		return sb, nil
	}
	return fallback, nil
}

// openStage opens the stage binary at p and checks that the tier may use
// it: a regular file that only root or this process's user (or the user
// who ran sudo: statedir.Owner) owns and may write (a sandbox's first stage runs with the tier's privileges before it
// confines itself), executable by the sandbox's unprivileged users, and
// carrying the stage code this binary carries.
func openStage(p string) (*stageBinary, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("stage binary %s: %w", p, err)
	}
	sb, err := checkStage(f, p)
	if err != nil {
		f.Close()
		return nil, err
	}
	return sb, nil
}

func checkStage(f *os.File, p string) (*stageBinary, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stage binary %s: %w", p, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("stage binary %s: not a regular file", p)
	}
	if uid, ok := statedir.Owner(st); !ok {
		return nil, fmt.Errorf("stage binary %s: owned by uid %d, neither root nor this process's user", p, uid)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("stage binary %s: writable by group or others (mode %v)", p, st.Mode().Perm())
	}
	if st.Mode().Perm()&0o001 == 0 {
		return nil, fmt.Errorf("stage binary %s: not executable by other users, so a sandbox cannot execute it", p)
	}
	want := stage.CodeDigest()
	if cachedDigest(p, st) == want {
		return newStageBinary(f, p, st), nil
	}
	// The digest is asked of the opened file, so the binary checked is the
	// binary every sandbox executes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fds := newFdTable(stage.FdFirst)
	cmd := exec.CommandContext(ctx, stage.FdPath(fds.add(f)))
	cmd.ExtraFiles = fds.files
	cmd.Env = []string{stage.Env + "=" + stage.Digest}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("stage binary %s: asking its stage code: %v %s", p, err, strings.TrimSpace(errOut.String()))
	}
	if got := strings.TrimSpace(out.String()); got != want {
		return nil, fmt.Errorf("stage binary %s carries other stage code (digest %q, this binary's %q): rebuild it from this source (`make setup`)", p, value.Clip(got, 40), want)
	}
	cacheDigest(p, st, want)
	return newStageBinary(f, p, st), nil
}

func newStageBinary(f *os.File, p string, st os.FileInfo) *stageBinary {
	sb := &stageBinary{file: f, path: p}
	if self, err := selfExe(); err == nil {
		if sst, err := self.Stat(); err == nil && os.SameFile(st, sst) {
			sb.self = true
		}
	}
	return sb
}

// Asking a stage binary for its digest is an exec that costs about as much
// as the rest of a CLI run's start, so the answer is kept in a file beside
// the separate stage binary (its path and ".digest"), for that very file: its device, inode, size, modification and change
// times. Any change to the binary (a rebuild, a copy, a chmod) misses.
// The file is trusted as the binary is: its owner passes statedir.Owner,
// and it is not writable by group or others. A directory this user cannot write keeps
// no cache, and every check asks again.
const digestFileVersion = "airlock-stage-digest/1"

// digestKey identifies the file st describes.
func digestKey(st os.FileInfo) string {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d %d %d %d %d", sys.Dev, sys.Ino, sys.Size, sys.Mtim.Nano(), sys.Ctim.Nano())
}

// cachedDigest is the digest kept for the stage binary at p as st
// describes it, or "".
func cachedDigest(p string, st os.FileInfo) string {
	key := digestKey(st)
	if key == "" || filepath.Base(p) != StageBinaryName {
		return ""
	}
	f, err := os.OpenFile(p+".digest", os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	cst, err := f.Stat()
	if err != nil || !cst.Mode().IsRegular() || cst.Mode().Perm()&0o022 != 0 {
		return ""
	}
	if _, ok := statedir.Owner(cst); !ok {
		return ""
	}
	var b [256]byte
	n, _ := f.Read(b[:])
	version, rest, _ := strings.Cut(strings.TrimSpace(string(b[:n])), " ")
	digest, gotKey, _ := strings.Cut(rest, " ")
	if version != digestFileVersion || gotKey != key {
		return ""
	}
	return digest
}

// cacheDigest keeps digest for the stage binary at p as st describes it,
// if its directory takes the file.
func cacheDigest(p string, st os.FileInfo, digest string) {
	key := digestKey(st)
	if key == "" || filepath.Base(p) != StageBinaryName {
		return
	}
	_ = replacefile.Write(p+".digest", 0o644, fmt.Appendf(nil, "%s %s %s\n", digestFileVersion, digest, key))
}

// errNoStage is wrapped when an explicitly configured stage binary is
// missing.
var errNoStage = errors.New("stage binary not found")

// stageBin is the stage binary this tier's sandboxes start with: the
// configured one, else the one found for the process (or this binary).
func (t *Tier) stageBin() (*stageBinary, error) {
	if t.stage != nil {
		return t.stage, nil
	}
	return discoverStage()
}
