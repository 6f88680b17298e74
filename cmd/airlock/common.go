package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/escalate"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/hostpath"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/netname"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/internal/tools"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// routerFlags are shared by the subcommands that route jobs.
type routerFlags struct {
	policy string
	tiers  tierFlags
	// limits is the limit policy the tiers are built with (zero:
	// airlock.DefaultLimitPolicy).
	limits airlock.LimitPolicy
	// images is the image store the tiers were given, once open (nil: none).
	images image.Resolver
}

func (f *routerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.policy, "policy", "", "routing policy `FILE` (JSON or YAML); default: the built-in policy")
	f.tiers.register(fs)
}

// open returns the router over the tiers, each built when a job first
// needs it (see tierset.Lazy), with the image store opened on first use.
// Call close when done.
func (f *routerFlags) open() (*escalate.Router, func(), error) { return f.openTiers(true) }

// openAll is open with every tier built at once, for a command that
// reports on all of them.
func (f *routerFlags) openAll() (*escalate.Router, func(), error) { return f.openTiers(false) }

func (f *routerFlags) openTiers(lazy bool) (*escalate.Router, func(), error) {
	policy := escalate.DefaultPolicy()
	if f.policy != "" {
		var err error
		if policy, err = escalate.LoadPolicy(f.policy); err != nil {
			return nil, nil, jobs.Invalid("policy", "%s", err.Error())
		}
	}
	build := tierset.Build
	if lazy {
		f.tiers.lazyImages = true
		build = tierset.Lazy
	}
	o, err := f.tiers.options(tierset.Options{Limits: f.limits})
	if err != nil {
		f.tiers.close()
		return nil, nil, err
	}
	tiers, err := build(o)
	if err != nil {
		f.tiers.close()
		return nil, nil, err
	}
	f.images = o.Images
	closeAll := func() {
		_ = tierset.Close(tiers)
		f.tiers.close()
	}
	r, err := escalate.New(policy, tiers)
	if err != nil {
		closeAll()
		return nil, nil, jobs.Invalid("policy", "%s", err.Error())
	}
	return r, closeAll, nil
}

// jobFlags are the job settings a subcommand can take from flags.
type jobFlags struct {
	kind, tier, situation, input, entry, clock, image string
	wall                                              time.Duration
	memory, output, steps                             int64
	seed                                              uint64
	read                                              pathList
	readAt                                            stringList // HOST=GUEST
	copies                                            pathList
	// The permission flags: each adds to the job's grants.
	net     stringList
	secrets stringList
	creds   stringList
	env     stringList
	files   stringList
	scratch int64
	spawn   bool
	out     outFlags // run's --collect and --out
}

func (f *jobFlags) register(fs *flag.FlagSet, withKind bool) {
	if withKind {
		fs.StringVar(&f.kind, "kind", "", "job `KIND`: expr, starlark, wasm or command (default: from the file extension)")
		f.out.register(fs)
	}
	fs.StringVar(&f.tier, "tier", "", "run on `TIER` instead of letting the router choose (with no --situation, a level-3 tier runs the job as internal)")
	fs.StringVar(&f.situation, "situation", "", "the job's `SITUATION`: expression, internal, public (default), multi-tenant or credentials")
	fs.StringVar(&f.input, "input", "", "input variables as a `JSON` object, or @FILE")
	fs.StringVar(&f.entry, "entry", "", "`FUNCTION` to call (Starlark, WASM)")
	fs.StringVar(&f.clock, "clock", "", "pin the clock to `TIME` (RFC 3339); default: now, recorded in the result")
	fs.Uint64Var(&f.seed, "seed", 0, "entropy `SEED`; default: random, recorded in the result")
	fs.DurationVar(&f.wall, "wall", 0, "wall-clock limit `DURATION`, e.g. 2s (default: the tier's)")
	fs.Int64Var(&f.memory, "memory", 0, "memory limit in `MB` (MiB)")
	fs.Int64Var(&f.output, "output", 0, "output limit in `BYTES`")
	fs.Int64Var(&f.steps, "steps", 0, "interpreter step limit `N`")
	fs.Var(&f.read, "allow-read", "grant read-only access to the host path `PATH` (repeatable; relative to the working directory); a job file's own read grants must lie under one")
	fs.Var(&f.read, "read", "`PATH`: the same as --allow-read")
	fs.Var(&f.readAt, "read-at", "grant read-only access to the host path `HOST=GUEST`, shown at the absolute path GUEST inside the sandbox instead of its own (repeatable; HOST relative to the working directory)")
	fs.Var(&f.copies, "copy", "grant the host path `PATH` as a writable copy made at start: changes stay in the sandbox and count against --scratch (repeatable; with --read-at, the copy is at its guest path)")
	fs.Var(&f.net, "allow-net", "allow egress to `HOST[:PORT][=METHOD,...]` (repeatable; default port: 80 and 443, methods: GET and HEAD)")
	fs.Int64Var(&f.scratch, "scratch", 0, "size of the writable scratch directory in `MB` (default: the tier's)")
	fs.BoolVar(&f.spawn, "allow-spawn", false, "let the program start other programs")
	fs.StringVar(&f.image, "image", "", "the `IMAGE` a command runs in: a name the image store knows (airlock images), a reference pinned by digest, or host (default: python where it is built, else host)")
	fs.Var(&f.secrets, "secret", "pass the environment variable `NAME` to the job as a secret (repeatable; its value is taken from this environment)")
	fs.Var(&f.creds, "credential", "give the program the credential `ENV=REF`: the variable ENV set to the credential the account's executor holds as REF (repeatable; level 5 only; the value never passes through this process)")
	fs.Var(&f.env, "env", "set `NAME=VALUE` in the program's environment (repeatable; recorded and replayed, unlike a secret)")
	fs.Var(&f.files, "file", "place the local file `LOCAL[:PATH]` in the scratch directory at PATH (default: its base name; repeatable; any bytes)")
}

// placeFiles adds the --file files to the job.
func (f *jobFlags) placeFiles(job *airlock.Job) error {
	for _, spec := range f.files {
		local, dest, ok := strings.Cut(spec, ":")
		if !ok {
			dest = filepath.Base(local)
		}
		data, err := readLocal(local)
		if err != nil {
			return jobs.Invalid("--file", "%v", err)
		}
		if job.Files == nil {
			job.Files = map[string]string{}
		}
		if _, dup := job.Files[dest]; dup {
			return jobs.Invalid("--file", "%s is placed twice", dest)
		}
		job.Files[dest] = string(data)
	}
	return nil
}

// netRule parses an --allow-net value: HOST[:PORT][=METHOD,...].
func netRule(spec string) (airlock.NetRule, error) {
	bad := func(format string, args ...any) (airlock.NetRule, error) {
		return airlock.NetRule{}, jobs.Invalid("--allow-net", "%q: "+format, append([]any{spec}, args...)...)
	}
	hostPort, methods, hasMethods := strings.Cut(spec, "=")
	var r airlock.NetRule
	if hasMethods {
		for _, m := range strings.Split(methods, ",") {
			m = strings.ToUpper(strings.TrimSpace(m))
			if m == "" {
				return bad("an empty method")
			}
			r.Methods = append(r.Methods, m)
		}
	}
	if strings.Contains(hostPort, "://") {
		return bad("want a host name, not a URL: HOST[:PORT][=METHOD,...], e.g. api.example.com:443=GET,POST")
	}
	r.Host = hostPort
	if h, p, err := net.SplitHostPort(hostPort); err == nil {
		port, err := strconv.Atoi(p)
		if err != nil || port < 1 || port > 65535 {
			return bad("port %q is not a number from 1 to 65535", p)
		}
		r.Host, r.Ports = h, []int{port}
	} else if strings.Count(hostPort, ":") == 1 {
		return bad("%v", err)
	}
	if r.Host == "" || strings.ContainsAny(r.Host, "/ ") {
		return bad("want HOST[:PORT][=METHOD,...], e.g. api.example.com:443=GET,POST")
	}
	if _, _, err := netname.Rule(r.Host); err != nil {
		return bad("%v", err)
	}
	return r, nil
}

// permissions adds the permission flags to the job's grants.
func (f *jobFlags) permissions(job *airlock.Job) error {
	for _, spec := range f.net {
		r, err := netRule(spec)
		if err != nil {
			return err
		}
		job.Grants.Net = append(job.Grants.Net, r)
	}
	for _, name := range f.secrets {
		if name == "" || strings.ContainsAny(name, "= ") {
			return jobs.Invalid("--secret", "%q: want the NAME of a variable in this environment", name)
		}
		v, ok := os.LookupEnv(name)
		if !ok {
			return jobs.Invalid("--secret", "%s is not set in this environment", name)
		}
		if job.Grants.Secrets == nil {
			job.Grants.Secrets = map[string]string{}
		}
		job.Grants.Secrets[name] = v
	}
	for _, kv := range f.creds {
		name, ref, ok := strings.Cut(kv, "=")
		if !ok || name == "" || ref == "" {
			return jobs.Invalid("--credential", "%q: want ENV=REF", kv)
		}
		job.Grants.Credentials = append(job.Grants.Credentials, airlock.Credential{Env: name, Ref: ref})
	}
	for _, kv := range f.env {
		name, v, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return jobs.Invalid("--env", "%q: want NAME=VALUE", kv)
		}
		if job.Env == nil {
			job.Env = map[string]string{}
		}
		job.Env[name] = v
	}
	if f.scratch < 0 {
		return jobs.Invalid("--scratch", "must not be negative")
	}
	if f.scratch > 0 {
		job.Grants.FS.ScratchMB = f.scratch
	}
	if f.spawn {
		job.Grants.Spawn = true
	}
	return nil
}

// apply copies the flags that were set onto a job.
func (f *jobFlags) apply(job *airlock.Job) error {
	if f.kind != "" {
		job.Kind = airlock.Kind(f.kind)
	}
	if f.tier != "" {
		job.Tier = f.tier
	}
	if f.image != "" {
		job.Image = f.image
	}
	if f.situation != "" {
		job.Situation = airlock.Situation(f.situation)
	}
	if f.entry != "" {
		job.Entry = f.entry
	}
	if f.input != "" {
		in, err := parseInput(f.input)
		if err != nil {
			return err
		}
		job.Input = in
	}
	if f.clock != "" {
		t, err := time.Parse(time.RFC3339Nano, f.clock)
		if err != nil {
			return jobs.Invalid("clock", "%q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", f.clock)
		}
		job.Clock = t
	}
	if f.seed != 0 {
		job.Seed = f.seed
	}
	if f.wall < 0 {
		return jobs.Invalid("limits.wall_ms", "must not be negative")
	}
	if f.wall > 0 {
		job.Limits.WallMS = max(f.wall.Milliseconds(), 1)
	}
	if f.memory != 0 {
		job.Limits.MemoryMB = f.memory
	}
	if f.output != 0 {
		job.Limits.OutputBytes = f.output
	}
	if f.steps != 0 {
		job.Limits.Steps = f.steps
	}
	if err := f.permissions(job); err != nil {
		return err
	}
	if err := f.placeFiles(job); err != nil {
		return err
	}
	return f.resolveReads(job)
}

// resolveReads adds the --read paths to the job's grants and resolves
// every read grant to the real path it names, as the server does: the
// caller's --read paths are the only roots, so a job file cannot grant
// itself a host path its caller did not name.
func (f *jobFlags) resolveReads(job *airlock.Job) error {
	// A path a flag names that is not there is that flag's mistake: say
	// which flag, and the path it made of what was typed.
	for _, fl := range []struct {
		name  string
		paths []string
	}{{"allow-read", f.read}, {"copy", f.copies}} {
		for _, p := range fl.paths {
			if _, err := os.Stat(p); err != nil {
				return jobs.Invalid("--"+fl.name, "%s: %v (a relative path is taken from the working directory)", p, unwrapPathErr(err))
			}
		}
	}
	for _, spec := range f.readAt {
		if host, _, ok := strings.Cut(spec, "="); ok && host != "" {
			if abs, err := filepath.Abs(host); err == nil {
				host = abs
			}
			if _, err := os.Stat(host); err != nil {
				return jobs.Invalid("--read-at", "%s: %v (a relative path is taken from the working directory)", host, unwrapPathErr(err))
			}
		}
	}
	g := &job.Grants.FS
	placed, err := f.placeGrants(g)
	if err != nil {
		return err
	}
	for _, p := range f.read {
		if !slices.Contains(g.Read, p) {
			g.Read = append(g.Read, p)
		}
	}
	return resolveUnder(g, append(slices.Clone(f.read), placed...), "read", "grant it with --read")
}

// resolveUnder resolves every read grant of g to the real path it names
// and refuses one outside the roots the caller named (flag: the flag that
// names them; hint: what a refusal adds).
func resolveUnder(g *airlock.FSGrant, roots []string, flag, hint string) error {
	if len(g.Read) == 0 {
		return nil
	}
	r, err := hostpath.NewRoots(roots, nil)
	if err != nil {
		return jobs.Invalid(flag, "%s", err.Error())
	}
	err = r.ResolveFS(g)
	if d := (*airlock.Denied)(nil); errors.As(err, &d) {
		d.Detail += "; " + hint
	}
	return err
}

// placeGrants adds the --read-at and --copy grants to g, each host path
// also as a read grant, and returns those host paths.
func (f *jobFlags) placeGrants(g *airlock.FSGrant) ([]string, error) {
	var placed []string
	for _, spec := range f.readAt {
		host, guest, ok := strings.Cut(spec, "=")
		if !ok || host == "" || guest == "" {
			return nil, jobs.Invalid("read-at", "%q: want HOST=GUEST", spec)
		}
		abs, err := filepath.Abs(host)
		if err != nil {
			return nil, jobs.Invalid("read-at", "%s: %v", host, err)
		}
		placed = append(placed, abs)
		if g.At == nil {
			g.At = map[string]string{}
		}
		g.At[abs] = guest
		if !slices.Contains(g.Read, abs) {
			g.Read = append(g.Read, abs)
		}
	}
	for _, p := range f.copies {
		if !slices.Contains(g.Copy, p) {
			g.Copy = append(g.Copy, p)
		}
		if !slices.Contains(g.Read, p) {
			g.Read = append(g.Read, p)
		}
	}
	return append(placed, f.copies...), nil
}

func parseInput(s string) (map[string]any, error) {
	data := []byte(s)
	if name, ok := strings.CutPrefix(s, "@"); ok {
		var err error
		if data, err = readLocal(name); err != nil {
			return nil, jobs.Invalid("input", "%v", err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return nil, jobs.Invalid("input", "want a JSON object: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, jobs.Invalid("input", "trailing data after the JSON object")
	}
	in, ok := raw.(map[string]any)
	if !ok && raw != nil {
		return nil, jobs.Invalid("input", "want a JSON object of variables, such as {\"x\": 21}")
	}
	if dup := value.FirstDuplicateKey(data); dup != nil {
		return nil, jobs.Invalid("input."+dup.Path, "given twice")
	}
	norm, err := value.Normalize(in)
	if err != nil {
		return nil, jobs.Invalid("input", "%v", err)
	}
	if norm == nil {
		return nil, nil
	}
	return norm.(map[string]any), nil
}

// readLocal reads a file the command line names (a script, a module,
// --file, --input @FILE) and refuses one larger than a job may be, so that
// /dev/zero or a huge file is an error rather than all the memory there is.
func readLocal(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("%s is a directory, not a file", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, value.MaxJobBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > value.MaxJobBytes {
		return nil, fmt.Errorf("%s is larger than a job may be (%d bytes)", name, value.MaxJobBytes)
	}
	return data, nil
}

// readStdin reads standard input unless it is a terminal.
func readStdin(r io.Reader) (string, error) {
	if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return "", nil
		}
	}
	data, err := io.ReadAll(io.LimitReader(r, value.MaxJobBytes+1))
	if err != nil {
		return "", fmt.Errorf("reading standard input: %w", err)
	}
	if len(data) > value.MaxJobBytes {
		return "", jobs.Invalid("stdin", "larger than %d bytes", value.MaxJobBytes)
	}
	return string(data), nil
}

// writeJSON writes v as indented JSON without HTML escaping.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// report prints the result of job for people: the program's output
// passes through, a value is printed as JSON, and an error is one line on
// stderr.
func (e *env) report(job *airlock.Job, res airlock.Result, err error) int {
	io.WriteString(e.stdout, res.Stdout)
	io.WriteString(e.stderr, res.Stderr)
	if err != nil {
		return e.fail(err)
	}
	if res.Value != nil {
		if werr := writeJSON(e.stdout, res.Value); werr != nil {
			return e.fail(fmt.Errorf("printing value: %w", werr))
		}
	}
	if res.ExitCode != 0 {
		// One line, with what the status likely means where a shell says
		// only "Permission denied" (the exec a withheld spawn grant
		// refused) or "not found" (a script's interpreter, such as node
		// for a .js file, or a program the image lacks).
		why := ""
		switch {
		case res.ExitCode == 126 && job.Kind == airlock.KindCommand && !job.Grants.Spawn:
			why = ": a refused exec (without --allow-spawn the program may not run other programs)"
		case res.ExitCode == 127 && job.Kind == airlock.KindCommand:
			why = ": a program not found (the image the job ran in may lack it; --image names another, airlock images lists them, airlock image build node adds one)"
		}
		fmt.Fprintf(e.stderr, "airlock: program exited with status %d%s\n", res.ExitCode, why)
		return programExit(res.ExitCode)
	}
	return exitOK
}

// programExit is airlock's exit status for a program that ran to its end
// with a non-zero status: that status, as docker run and kubectl exec
// return theirs, so scripts read the program's own codes. A status that
// no exit could carry is exitFailed.
func programExit(status int) int {
	if status < 1 || status > 255 {
		return exitFailed
	}
	return status
}

// jobCommand is what eval and run share: the job and router flags, --json,
// and the parsed arguments.
type jobCommand struct {
	jf        jobFlags
	rf        routerFlags
	json      *bool
	job       *string // run's --job
	pos, rest []string
}

// evalJobFlags are the job flags an expression takes.
var evalJobFlags = []string{"tier", "situation", "input", "clock", "seed", "wall", "memory", "output", "steps"}

// onlyFlags registers on fs the flags register would, but only those
// named, in that order: a subcommand lists, and takes, only the flags
// that apply to it. A flag kept is the same flag (its value, usage and
// default).
func onlyFlags(fs *flag.FlagSet, register func(*flag.FlagSet), names ...string) {
	all := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	register(all)
	for _, n := range names {
		f := all.Lookup(n)
		if f == nil {
			panic("onlyFlags: no flag --" + n)
		}
		fs.Var(f.Value, f.Name, f.Usage)
	}
}

// parseJobCommand registers the shared flags for the named command (files
// says whether --file applies), parses the arguments and returns them; when
// ok is false the command returns code.
func (e *env) parseJobCommand(name, jsonHelp string, files bool) (jc *jobCommand, code int, ok bool) {
	fs := e.flags(commands[name])
	jc = &jobCommand{json: fs.Bool("json", false, jsonHelp), job: new(string)}
	if name == "run" {
		fs.StringVar(jc.job, "job", "", "run the Job written as JSON in `FILE` (- for stdin)")
	}
	if name == "eval" {
		// An expression runs in-process on the expr tier: it takes its
		// input and limits, and none of a program's grants or the other
		// tiers' settings.
		onlyFlags(fs, func(fs *flag.FlagSet) { jc.jf.register(fs, false) }, evalJobFlags...)
		onlyFlags(fs, jc.rf.register, "policy")
	} else {
		jc.jf.register(fs, files)
		jc.rf.register(fs)
	}
	if wantsJSON(e.args) {
		// --json promises one Result on stdout, also for a bad flag.
		e.flagFailed = func(msg string) {
			var res airlock.Result
			res.SetError(jobs.Invalid("", "%s", msg))
			if err := writeJSON(e.stdout, res); err != nil {
				fmt.Fprintf(e.stderr, "airlock: writing result: %v\n", err)
			}
		}
		defer func() { e.flagFailed = nil }()
	}
	jc.pos, jc.rest, code, ok = e.parse(fs)
	if ok && len(jc.pos) == 0 && len(jc.rest) == 0 && name == "eval" {
		return nil, e.missingArgs("takes an EXPR to evaluate"), false
	}
	return jc, code, ok
}

// wantsJSON reports whether args set --json before a "--" (the flags may
// not parse, so they are looked at one by one).
func wantsJSON(args []string) bool {
	on := false
	for _, a := range args {
		if a == "--" {
			break
		}
		name, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		on = !hasValue
		if hasValue {
			on, _ = strconv.ParseBool(v)
		}
	}
	return on
}

// impliedSituation is the situation a job runs as when the operator names
// a tier on the command line (--tier) but no situation. Without it the
// default, public, would refuse any tier below virtualisation, so
// `airlock run --tier process -- ...` could never run. The operator who
// types a tier has chosen the boundary, so the job runs as internal
// (the operator's own tooling) when that tier's level meets the internal
// rule but not the public one. It returns "" otherwise: when the job
// names a situation, when the tier is unknown, when public already
// applies, and when the tier is below internal's level too (a level-2 or
// interpreter tier for a command job: the router then refuses as usual,
// and its refusal says which situation would do).
//
// Only the --tier flag implies a situation: a job file's own "tier" field
// does not, since a job from elsewhere must not lower its own situation.
func impliedSituation(r *escalate.Router, job *airlock.Job) airlock.Situation {
	if job.Situation != "" || job.Tier == "" || job.Tier == escalate.TierAuto {
		return ""
	}
	level := airlock.Level(-1)
	for _, t := range r.Tiers() {
		if t.Name() == job.Tier {
			level = t.Level()
		}
	}
	if level < 0 {
		return ""
	}
	meets := func(s airlock.Situation) bool {
		trial := *job
		trial.Situation = s
		x := r.Explain(&trial)
		return x.Rule != "" && x.MinLevel <= level
	}
	if meets(airlock.SituationPublic) || !meets(airlock.SituationInternal) {
		return ""
	}
	return airlock.SituationInternal
}

// implySituation sets the situation a --tier flag implies (see
// impliedSituation) and returns the line that records it in the result's
// decision, or "" when nothing was implied.
func implySituation(r *escalate.Router, job *airlock.Job, jf *jobFlags) string {
	if jf.tier == "" || jf.situation != "" {
		return ""
	}
	s := impliedSituation(r, job)
	if s == "" {
		return ""
	}
	job.Situation = s
	return fmt.Sprintf("situation %s: implied by --tier %s, as no situation was given (pass --situation to choose another)", s, job.Tier)
}

// runFlagged runs a job built from the command line, with the situation
// its --tier flag implies recorded first in the result's decision.
// An image the store refuses is refused first, as explain refuses it,
// whether or not some tier could run the job.
func runFlagged(ctx context.Context, r *escalate.Router, images image.Resolver, job airlock.Job, jf *jobFlags) (airlock.Result, error) {
	if err := checkImage(images, job.Image); err != nil {
		return airlock.Result{}, err
	}
	note := implySituation(r, &job, jf)
	res, err := r.Run(ctx, job)
	err = missingBackend(r, job, err)
	if note != "" {
		res.Decision = append([]string{note}, res.Decision...)
	}
	return res, err
}

// readJob reads and decodes one job from r (a file or stdin).
func readJob(r io.Reader) (airlock.Job, error) {
	data, err := io.ReadAll(io.LimitReader(r, value.MaxJobBytes+1))
	if err != nil {
		return airlock.Job{}, fmt.Errorf("reading job: %w", err)
	}
	return airlock.DecodeJob(data)
}

// backendMissing is a refusal for want of a backend (runsc, QEMU, a guest
// kernel) rather than by policy: every tier that may run the job is
// unavailable, and at least one for a backend that is not installed. It
// stays a *airlock.NotAdmitted for the wire; the CLI gives it its own
// exit status, exitMissing.
type backendMissing struct {
	refusal error
	missing []string
}

func (b *backendMissing) Error() string {
	msg := "backend missing: " + strings.Join(b.missing, "; ")
	if !strings.Contains(msg, "make install") {
		msg += " (install it: `make setup` in a checkout, or `make install PREFIX=...` there)"
	}
	return msg
}

func (b *backendMissing) Unwrap() error { return b.refusal }

// missingBackend returns err as a *backendMissing when the router refused
// job because the tiers it may use (those at or above the rule's minimum
// level that the rule allows, or the one --tier names) are all unavailable
// and some of them lack an installed backend; any other error as it is.
func missingBackend(r *escalate.Router, job airlock.Job, err error) error {
	if _, ok := errors.AsType[*airlock.NotAdmitted](err); !ok {
		return err
	}
	x := r.Explain(&job)
	if x.Rule == "" {
		return err // no rule: the policy's refusal
	}
	var allowed []string
	for _, rule := range r.Policy().Rules {
		if rule.Name == x.Rule {
			allowed = rule.Tiers
		}
	}
	explicit := job.Tier != "" && job.Tier != escalate.TierAuto
	var missing []string
	for _, t := range r.Tiers() {
		if t.Level() < x.MinLevel || (len(allowed) > 0 && !slices.Contains(allowed, t.Name())) || (explicit && t.Name() != job.Tier) {
			continue
		}
		why := r.Unavailable(t.Name())
		if why == nil {
			return err // a tier that may run it refused it: policy
		}
		if errors.Is(why, tools.ErrNotFound) {
			// The tier's name once, whether or not its reason starts with it.
			missing = append(missing, t.Name()+": "+strings.TrimPrefix(why.Error(), t.Name()+": "))
		}
	}
	if len(missing) == 0 {
		return err
	}
	return &backendMissing{refusal: err, missing: missing}
}

// unwrapPathErr is a *fs.PathError's own error ("no such file or
// directory"), for a message that names the path once.
func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
