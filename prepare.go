package airlock

import (
	"path"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/netname"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// LimitPolicy is an operator's choice of default and maximum limits.
type LimitPolicy struct {
	Default Limits
	Max     Limits
}

// DefaultLimitPolicy is the policy of tiers that are not given one.
func DefaultLimitPolicy() LimitPolicy { return defaultLimitPolicy }

var defaultLimitPolicy = LimitPolicy{
	Default: Limits{WallMS: 10_000, CPUMS: 10_000, MemoryMB: 256, OutputBytes: 1 << 20, Pids: 64, Files: 256, Steps: 10_000_000},
	Max:     Limits{WallMS: 600_000, CPUMS: 600_000, MemoryMB: 8192, OutputBytes: 64 << 20, Pids: 4096, Files: 65_536, Steps: 10_000_000_000},
}

// Resolve fills the zero fields of l from the policy's defaults and refuses
// any field above the policy's maximum, or below zero.
func (p LimitPolicy) Resolve(l Limits) (Limits, error) {
	if l == (Limits{}) { // the common case: every limit from the defaults
		return p.defaults(), nil
	}
	var err error
	if l.WallMS, err = resolve("limits.wall_ms", l.WallMS, p.Default.WallMS, p.Max.WallMS); err != nil {
		return l, err
	}
	if l.CPUMS, err = resolve("limits.cpu_ms", l.CPUMS, p.Default.CPUMS, p.Max.CPUMS); err != nil {
		return l, err
	}
	if l.MemoryMB, err = resolve("limits.memory_mb", l.MemoryMB, p.Default.MemoryMB, p.Max.MemoryMB); err != nil {
		return l, err
	}
	if l.OutputBytes, err = resolve("limits.output_bytes", l.OutputBytes, p.Default.OutputBytes, p.Max.OutputBytes); err != nil {
		return l, err
	}
	if l.Pids, err = resolve("limits.pids", l.Pids, p.Default.Pids, p.Max.Pids); err != nil {
		return l, err
	}
	if l.Files, err = resolve("limits.files", l.Files, p.Default.Files, p.Max.Files); err != nil {
		return l, err
	}
	if l.Steps, err = resolve("limits.steps", l.Steps, p.Default.Steps, p.Max.Steps); err != nil {
		return l, err
	}
	if l.WallMS <= 0 {
		l.WallMS = defaultLimitPolicy.Default.WallMS // the wall clock is never off
	}
	return l, nil
}

// defaults is what Resolve makes of zero limits.
func (p *LimitPolicy) defaults() Limits {
	l := p.Default
	if l.WallMS <= 0 {
		l.WallMS = defaultLimitPolicy.Default.WallMS // the wall clock is never off
	}
	return l
}

func resolve(name string, v, def, max int64) (int64, error) {
	switch {
	case v < 0:
		return v, invalid(name, "must not be negative")
	case v == 0:
		return def, nil
	case max > 0 && v > max:
		return v, invalid(name, "%d is above the maximum %d", v, max)
	}
	return v, nil
}

// Prepare validates a job and returns the copy a tier runs: limits resolved
// against the policy, situation and lifecycle defaulted, and the clock and
// seed chosen when the job did not pin them (both are recorded in the
// Result so the run can be replayed).
func (p LimitPolicy) Prepare(job Job) (Job, error) {
	err := p.PrepareInPlace(&job, time.Now())
	return job, err
}

// RefusedBelowAccount returns the refusal every tier below level 5 gives
// a job with grants.credentials or an account, and nil for any other job:
// only an executor under the account that holds them resolves
// credentials, so a tier that prepares the job itself would run it
// without them. Prepare refuses such a job; a router checks it before a
// tier's Admit, so that its explanation and its run agree.
func (job *Job) RefusedBelowAccount() error {
	if len(job.Grants.Credentials) > 0 {
		return &NotAdmitted{Reason: reasonCredentials}
	}
	if job.Account != "" {
		return &NotAdmitted{Reason: reasonAccount}
	}
	return nil
}

// PrepareInPlace is [LimitPolicy.Prepare] on the caller's copy of a job,
// with the instant to pin an unpinned clock to, for tiers whose warm path
// already read the time and should not copy the Job struct twice more. On
// an error the job is left partly prepared and must not be run.
func (p *LimitPolicy) PrepareInPlace(job *Job, now time.Time) error {
	if err := job.Validate(); err != nil {
		return err
	}
	if err := job.RefusedBelowAccount(); err != nil {
		return err
	}
	if job.Limits == (Limits{}) {
		job.Limits = p.defaults()
	} else {
		var err error
		if job.Limits, err = p.Resolve(job.Limits); err != nil {
			return err
		}
	}
	if job.Situation == "" {
		job.Situation = SituationPublic
	}
	if job.Lifecycle == "" {
		job.Lifecycle = LifecycleEphemeral
	}
	if job.Clock.IsZero() {
		job.Clock = truncMicro(now)
	}
	if job.Seed == 0 {
		job.Seed = value.NewSeed()
	}
	return nil
}

// truncMicro is now.UTC().Truncate(time.Microsecond) without the general
// division: the remainder lies within the current second.
func truncMicro(now time.Time) time.Time {
	now = now.UTC() // also drops the monotonic reading
	return now.Add(-time.Duration(now.Nanosecond() % 1000))
}

// blank reports whether s is empty or white space only, as
// strings.TrimSpace(s) == "" does, returning at the first ASCII byte that
// is not a space (the first byte of nearly every program).
func blank(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= utf8.RuneSelf:
			return strings.TrimSpace(s[i:]) == ""
		case c != ' ' && c != '\t' && c != '\n' && c != '\v' && c != '\f' && c != '\r':
			return false
		}
	}
	return true
}

// Validate checks a job's shape without resolving limits: a known kind with
// its payload, known situation and lifecycle, safe file names, well-formed
// grants and JSON-compatible input.
func (job *Job) Validate() error {
	switch job.Kind {
	case KindExpr, KindStarlark:
		if blank(job.Code) {
			return invalid("code", "is empty")
		}
	case KindWasm:
		if len(job.Module) == 0 {
			return invalid("module", "is empty")
		}
	case KindCommand:
		if len(job.Argv) == 0 || job.Argv[0] == "" {
			return invalid("argv", "needs a program")
		}
		for _, a := range job.Argv {
			if strings.IndexByte(a, 0) >= 0 {
				return invalid("argv", "contains a NUL byte")
			}
			// The job's wire form is JSON, and so are the gVisor and
			// microVM tiers' own: bytes that are not UTF-8 would reach the
			// program as U+FFFD on some tiers and as they are on others.
			if !utf8.ValidString(a) {
				return invalid("argv", "%q is not valid UTF-8", a)
			}
		}
	case "":
		return invalid("kind", "is missing (want expr, starlark, wasm or command)")
	default:
		return invalid("kind", "unknown kind %q (want expr, starlark, wasm or command)", job.Kind)
	}
	switch job.Situation {
	case "", SituationExpression, SituationInternal, SituationPublic, SituationMultiTenant, SituationCredentials:
	default:
		return invalid("situation", "unknown situation %q (want expression, internal, public, multi-tenant or credentials)", job.Situation)
	}
	if job.Account != "" && !validAccount(job.Account) {
		return invalid("account", "%q: want a lower-case letter, then up to 23 lower-case letters, digits or '-'", job.Account)
	}
	switch job.Lifecycle {
	case "", LifecycleEphemeral:
	case LifecycleSession, LifecyclePersistent:
		if job.Session == "" {
			return invalid("session", "is required for lifecycle %q", job.Lifecycle)
		}
	default:
		return invalid("lifecycle", "unknown lifecycle %q", job.Lifecycle)
	}
	if len(job.Files) > 0 {
		names := value.SortedKeys(job.Files)
		for _, name := range names {
			if err := checkRelPath(name); err != nil {
				return invalid("files["+name+"]", "%s", err.Error())
			}
		}
		// A file whose name another file needs as a directory cannot be
		// placed: the job is invalid, not a tier's failure.
		for _, name := range names {
			for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
				if _, ok := job.Files[dir]; ok {
					return invalid("files["+name+"]", "%s is placed as a file and is also needed as a directory", dir)
				}
			}
		}
	}
	if len(job.Collect) > 0 {
		if err := validateCollect(job); err != nil {
			return err
		}
	}
	if err := validateGrants(&job.Grants); err != nil {
		return err
	}
	if len(job.Env) > 0 {
		if err := validateEnv(job); err != nil {
			return err
		}
	}
	if job.Entry != "" && job.Kind != KindStarlark && job.Kind != KindWasm {
		return invalid("entry", "%s job calls no entry function (entry is for starlark and wasm jobs)", article(job.Kind))
	}
	if job.Image != "" {
		// The image store judges the reference itself; here only what no
		// store would take.
		switch {
		case job.Kind != KindCommand:
			return invalid("image", "%s job runs in no image (images are for command jobs)", article(job.Kind))
		case len(job.Image) > 512 || strings.ContainsFunc(job.Image, func(r rune) bool { return r <= ' ' || r > '~' }):
			// Printable ASCII only: a look-alike letter or a control
			// would show an approver one image and run another.
			return invalid("image", "not an image name or reference (printable ASCII; a registry's international name in its xn-- form)")
		}
	}
	if len(job.Input) > 0 {
		if err := value.Check(job.Input, 0); err != nil {
			return invalid("input", "%s", err.Error())
		}
	}
	return nil
}

// pathError is a path refused as a job file name.
type pathError string

func (e pathError) Error() string { return string(e) }

func checkRelPath(name string) error {
	switch {
	case name == "":
		return pathError("empty file name")
	case strings.IndexByte(name, 0) >= 0:
		return pathError("file name contains a NUL byte")
	case strings.HasPrefix(name, "/"):
		return pathError("file name must be relative")
	case path.Clean(name) != name || name == "." || name == ".." || strings.HasPrefix(name, "../"):
		return pathError("file name must be clean and stay inside the scratch (no '..', '.', '//' or trailing '/')")
	}
	return nil
}

// maxScratchMB bounds grants.fs.scratch_mb: 1 TiB, far from where a
// size in bytes wraps (2^44 MB is 2^64 bytes, which a tmpfs would take as
// no limit at all).
const maxScratchMB = 1 << 20

// maxCollect bounds the number of patterns in Job.Collect.
const maxCollect = 64

func validateCollect(job *Job) error {
	if job.Kind != KindCommand && job.Kind != KindWasm {
		return invalid("collect", "only command and wasm jobs have a scratch directory to collect files from")
	}
	if len(job.Collect) > maxCollect {
		return invalid("collect", "%d patterns; at most %d", len(job.Collect), maxCollect)
	}
	for i, p := range job.Collect {
		if err := checkCollectPattern(p); err != nil {
			return invalid("collect", "pattern %d: %s", i, err.Error())
		}
	}
	return nil
}

// checkCollectPattern: a clean relative path or path.Match pattern of
// printable characters, with no "." or ".." element, that stays inside
// the scratch directory.
func checkCollectPattern(p string) error {
	switch {
	case p == "":
		return pathError("empty pattern")
	case len(p) > 1024:
		return pathError("longer than 1024 bytes")
	case !utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return !unicode.IsPrint(r) }):
		return pathError("only printable characters")
	case strings.HasPrefix(p, "/"):
		return pathError("must be relative to the scratch directory")
	case p == "." || path.Clean(p) != p || slices.Contains(strings.Split(p, "/"), ".."):
		return pathError("must be clean and stay inside the scratch (no '..', '.', '//' or trailing '/')")
	}
	if _, err := path.Match(p, ""); err != nil {
		return pathError("not a path.Match pattern: " + err.Error())
	}
	return nil
}

// validateFSPlacement checks grants.fs.at and grants.fs.copy. Both name
// host paths that must also be read grants: a host path named only there
// would slip past every allowlist that looks at grants.fs.read.
func validateFSPlacement(fs *FSGrant) error {
	hosts := make([]string, 0, len(fs.At))
	for h := range fs.At {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	guests := make(map[string]string, len(fs.Read))
	for _, h := range fs.Read {
		g := fs.GuestPath(h)
		if other, dup := guests[g]; dup && other != h {
			return invalid("grants.fs.at", "%s and %s would both appear at guest path %s", other, h, g)
		}
		guests[g] = h
		// Every tier mounts its own /proc, /sys and /dev: a grant shown
		// there, at its own path or placed, would cover part of them.
		for _, sys := range []string{"/proc", "/sys", "/dev"} {
			if g != sys && !strings.HasPrefix(g, sys+"/") {
				continue
			}
			if _, placed := fs.At[h]; placed {
				return invalid("grants.fs.at", "guest path %s for %s is reserved for the system (/proc, /sys, /dev)", g, h)
			}
			return invalid("grants.fs.read", "%s would appear under the sandbox's own %s (place it elsewhere with grants.fs.at, --read-at HOST=GUEST)", h, sys)
		}
	}
	for _, h := range hosts {
		g := fs.At[h]
		switch {
		case !slices.Contains(fs.Read, h):
			return invalid("grants.fs.at", "%q is not in grants.fs.read", h)
		case !strings.HasPrefix(g, "/") || path.Clean(g) != g:
			return invalid("grants.fs.at", "guest path %q for %s must be a clean absolute path", g, h)
		}
	}
	for i, h := range fs.Copy {
		if !slices.Contains(fs.Read, h) {
			return invalid("grants.fs.copy", "entry %d (%q) is not in grants.fs.read", i, h)
		}
		if slices.Contains(fs.Copy[:i], h) {
			return invalid("grants.fs.copy", "entry %d (%q) is listed twice", i, h)
		}
	}
	return nil
}

func validateGrants(g *Grants) error {
	if len(g.FS.Read) == 0 && len(g.FS.At) == 0 && len(g.FS.Copy) == 0 && g.FS.ScratchMB == 0 && len(g.Net) == 0 && len(g.Secrets) == 0 && len(g.Credentials) == 0 {
		return nil // nothing granted, nothing to check
	}
	for i, p := range g.FS.Read {
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
			return invalid("grants.fs.read", "entry %d (%q) must be a clean absolute path", i, p)
		}
	}
	if err := validateFSPlacement(&g.FS); err != nil {
		return err
	}
	if g.FS.ScratchMB < 0 {
		return invalid("grants.fs.scratch_mb", "must not be negative")
	}
	if g.FS.ScratchMB > maxScratchMB {
		return invalid("grants.fs.scratch_mb", "%d is above the maximum %d (1 TiB)", g.FS.ScratchMB, maxScratchMB)
	}
	for i, r := range g.Net {
		if strings.TrimSpace(r.Host) == "" {
			return invalid("grants.net", "rule %d has no host", i)
		}
		// The egress gateway compiles the rules with the same checks
		// (package netname): a rule it would refuse is refused here,
		// before a tier is chosen or an approval asked for.
		if _, _, err := netname.Rule(r.Host); err != nil {
			return invalid("grants.net", "rule %d (%q): %s", i, r.Host, err)
		}
		for _, m := range r.Methods {
			if strings.ToUpper(m) != m || !netname.IsToken(m) {
				return invalid("grants.net", "rule %d: method %q must be an upper-case HTTP method", i, m)
			}
		}
		for _, p := range r.Ports {
			if p < 1 || p > 65535 {
				return invalid("grants.net", "rule %d: port %d out of range", i, p)
			}
		}
		switch r.Scheme {
		case "", "http", "https":
		default:
			return invalid("grants.net", "rule %d: scheme %q (want http, https or none for both)", i, r.Scheme)
		}
		for _, p := range r.Paths {
			if err := value.CheckPathPattern(p); err != nil {
				return invalid("grants.net", "rule %d: path %q: %s", i, p, err)
			}
		}
	}
	for name, v := range g.Secrets {
		if !validEnvName(name) {
			return invalid("grants.secrets", "%q is not a valid variable name", name)
		}
		if !utf8.ValidString(v) {
			// Not quoted: it is a secret.
			return invalid("grants.secrets", "the value of %s is not valid UTF-8", name)
		}
	}
	if len(g.Credentials) > maxCredentials {
		return invalid("grants.credentials", "%d entries, above the %d a job may name", len(g.Credentials), maxCredentials)
	}
	for i, c := range g.Credentials {
		switch {
		case !validEnvName(c.Env):
			return invalid("grants.credentials", "entry %d: env %q is not a valid variable name", i, c.Env)
		case !validRef(c.Ref):
			return invalid("grants.credentials", "entry %d: ref %q must be 1-64 letters, digits, '.', '_' or '-'", i, c.Ref)
		}
		if _, ok := g.Secrets[c.Env]; ok {
			return invalid("grants.credentials", "entry %d: %s is also in grants.secrets", i, c.Env)
		}
		for _, d := range g.Credentials[:i] {
			if d.Env == c.Env {
				return invalid("grants.credentials", "entry %d: %s is set twice", i, c.Env)
			}
		}
	}
	return nil
}

// maxCredentials is the most credentials a job may name: each is a value
// the executor resolves (an OIDC token it signs) and scrubs from
// everything the job returns (account.MaxCredentials).
const maxCredentials = 64

// validRef reports whether s can name a credential in an executor's store.
func validRef(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		switch {
		case c == '_', c == '-', c == '.', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		default:
			return false
		}
	}
	return true
}

// validateEnv checks a job's plain environment: valid names and values,
// none also a secret (which would be shadowed one way or the other), and a
// kind that has an environment.
func validateEnv(job *Job) error {
	if job.Kind == KindExpr || job.Kind == KindStarlark {
		return invalid("env", "%s job has no environment", article(job.Kind))
	}
	for name, v := range job.Env {
		switch {
		case !validEnvName(name):
			return invalid("env", "%q is not a valid variable name", name)
		case strings.IndexByte(v, 0) >= 0:
			return invalid("env["+name+"]", "contains a NUL byte")
		case !utf8.ValidString(v):
			return invalid("env["+name+"]", "is not valid UTF-8")
		}
		if _, ok := job.Grants.Secrets[name]; ok {
			return invalid("env["+name+"]", "is also in grants.secrets")
		}
		for _, c := range job.Grants.Credentials {
			if c.Env == name {
				return invalid("env["+name+"]", "is also in grants.credentials")
			}
		}
	}
	return nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// validAccount reports whether name can name an account (and its OS
// user): a lower-case letter, then up to 23 lower-case letters, digits
// or '-'.
func validAccount(name string) bool {
	if len(name) == 0 || len(name) > 24 || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 1; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// article is kind with its indefinite article, for messages: "an expr",
// "a starlark".
func article(kind Kind) string {
	if kind == KindExpr {
		return "an " + string(kind)
	}
	return "a " + string(kind)
}
