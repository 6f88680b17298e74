package account

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
)

// ExecutorName is the name of the executor's own tier: level 5, because
// it runs under the account, around an inner sandbox tier.
const ExecutorName = "executor"

// Executor is the tier an account's executor serves: it resolves a job's
// credential references from the account's store, runs the job in the
// inner tier (a sandbox: the account boundary adds to isolation, it does
// not replace it) and scrubs every resolved value from the Result.
type Executor struct {
	inner  airlock.Tier
	store  string
	issuer *Issuer
	limits airlock.LimitPolicy

	// owners are the callers (see [WithPeer]) that opened the sessions
	// open now, by id: each is its opener's alone.
	mu      sync.Mutex
	owners  map[string]string
	opening map[string]int // sessions being opened, by caller
}

// NewExecutor returns the executor's tier over inner, resolving
// references from the store file at storePath (see [AddStatic]) and
// minting OIDC tokens with issuer (nil: oidc references are refused).
func NewExecutor(inner airlock.Tier, storePath string, issuer *Issuer) *Executor {
	return &Executor{inner: inner, store: storePath, issuer: issuer, limits: airlock.DefaultLimitPolicy()}
}

func (e *Executor) Name() string         { return ExecutorName }
func (e *Executor) Level() airlock.Level { return airlock.LevelAccount }

// Cost is the inner tier's: the executor adds a file read.
func (e *Executor) Cost() time.Duration {
	if c, ok := e.inner.(interface{ Cost() time.Duration }); ok {
		return c.Cost()
	}
	return time.Second
}

// Available is the inner tier's.
func (e *Executor) Available() error {
	if p, ok := e.inner.(airlock.Prober); ok {
		if err := p.Available(); err != nil {
			return fmt.Errorf("inner tier %s: %w", e.inner.Name(), err)
		}
	}
	return nil
}

// Close closes the inner tier.
func (e *Executor) Close() error {
	if c, ok := e.inner.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// innerJob is the job the inner tier sees: credentials become secrets
// (values from vals, or placeholders for admission).
func innerJob(job airlock.Job, vals map[string]string) airlock.Job {
	creds := job.Grants.Credentials
	job.Grants.Credentials = nil
	if len(creds) > 0 {
		s := make(map[string]string, len(creds))
		for _, c := range creds {
			s[c.Env] = vals[c.Env]
		}
		job.Grants.Secrets = s
	}
	job.Tier = ""
	return job
}

// Admit refuses a value passed in by the caller, then asks the inner tier.
func (e *Executor) Admit(job airlock.Job) error {
	if len(job.Grants.Secrets) > 0 {
		return &airlock.NotAdmitted{Tier: ExecutorName, Reason: "grants.secrets are refused at level 5: name credentials by reference (grants.credentials)"}
	}
	return e.inner.Admit(innerJob(job, nil))
}

// Run resolves, runs and scrubs.
func (e *Executor) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	return e.run(ctx, job, e.inner.Name(), e.inner.Run, nil)
}

// OpenSession opens a session of the inner tier, where it keeps them:
// each run in it is resolved and scrubbed like a job of its own, and
// tokens are minted per run.
func (e *Executor) OpenSession(ctx context.Context, opts airlock.SessionOptions) (airlock.Session, error) {
	st, ok := e.inner.(airlock.SessionTier)
	if !ok {
		return nil, &airlock.NotAdmitted{Tier: ExecutorName, Reason: "this executor's inner tier " + e.inner.Name() + " keeps no sessions"}
	}
	peer := peerOf(ctx)
	// Counted and reserved at once: sessions a caller is opening count
	// as held, so that opening many at once gets no more.
	e.mu.Lock()
	mine := e.opening[peer]
	for _, owner := range e.owners {
		if owner == peer {
			mine++
		}
	}
	if mine >= MaxSessionsPerCaller {
		e.mu.Unlock()
		return nil, &airlock.NotAdmitted{Tier: ExecutorName, Reason: fmt.Sprintf("caller %s holds %d sessions of this executor, the most one caller may: close one first", peer, mine)}
	}
	if e.opening == nil {
		e.opening = map[string]int{}
	}
	e.opening[peer]++
	e.mu.Unlock()
	s, err := st.OpenSession(ctx, opts)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.opening[peer]--; e.opening[peer] == 0 {
		delete(e.opening, peer)
	}
	if err != nil {
		return nil, err
	}
	x := &execSession{e: e, s: s, owner: peer}
	if e.owners == nil {
		e.owners = map[string]string{}
	}
	e.owners[s.ID()] = x.owner
	return x, nil
}

// MaxSessionsPerCaller bounds the sessions one caller holds open on an
// executor: its callers share one tenant of the executor's server, whose
// session quota one caller alone must not use up.
const MaxSessionsPerCaller = 8

// MaxCredentials is the most credentials a job may name (Job.Validate
// refuses more): each is a value the executor resolves, an OIDC token it
// signs, and scrubs from everything the job returns.
const MaxCredentials = 64

// MaxSessionValues bounds the distinct credential values one session's
// runs resolve (each OIDC token minted is one): every run in the session
// is scrubbed of them all.
const MaxSessionValues = 256

type execSession struct {
	e     *Executor
	s     airlock.Session
	owner string // the caller that opened it

	// values are those resolved by the session's runs so far: what one
	// run leaves in the session (a file, a variable) a later run may
	// print, with or without credentials of its own.
	mu     sync.Mutex
	values []string
}

func (x *execSession) ID() string { return x.s.ID() }

func (x *execSession) Close() error {
	x.e.mu.Lock()
	delete(x.e.owners, x.s.ID())
	x.e.mu.Unlock()
	return x.s.Close()
}

// Run refuses a caller other than the one that opened the session: what
// the session's runs left in it (a value resolved for its opener alone)
// is the opener's.
func (x *execSession) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	if peer := peerOf(ctx); peer != x.owner {
		err := &airlock.NotAdmitted{Tier: ExecutorName, Reason: "unknown session " + x.s.ID()}
		res := airlock.Result{Tier: ExecutorName, Level: airlock.LevelAccount}
		res.SetError(err)
		return res, err
	}
	return x.e.run(ctx, job, x.e.inner.Name()+" (session)", x.s.Run, x)
}

// run resolves job's references, runs it with run and scrubs the result
// of every value resolved for it, and, in a session, of every value the
// session's earlier runs resolved.
func (e *Executor) run(ctx context.Context, job airlock.Job, where string, run func(context.Context, airlock.Job) (airlock.Result, error), sess *execSession) (airlock.Result, error) {
	res := airlock.Result{Tier: ExecutorName, Level: airlock.LevelAccount, Clock: job.Clock, Seed: job.Seed}
	if err := e.Admit(job); err != nil {
		res.SetError(err)
		return res, err
	}
	vals := map[string]string{}
	var values, names []string
	if len(job.Grants.Credentials) > 0 {
		st, err := loadStore(e.store)
		if err != nil {
			res.SetError(err)
			return res, err
		}
		for _, c := range job.Grants.Credentials {
			v, kind, err := e.value(ctx, st, &job, c.Ref)
			if err != nil {
				err = &airlock.NotAdmitted{Tier: ExecutorName, Reason: err.Error()}
				res.SetError(err)
				return res, err
			}
			vals[c.Env] = v
			values = append(values, v)
			names = append(names, c.Env+"="+c.Ref+" ("+kind+")")
		}
	}
	sort.Strings(names)
	if sess != nil {
		sess.mu.Lock()
		var fresh []string
		for _, v := range values {
			if !slices.Contains(sess.values, v) && !slices.Contains(fresh, v) {
				fresh = append(fresh, v)
			}
		}
		if n := len(sess.values) + len(fresh); n > MaxSessionValues {
			// Refused before it runs, and its values never reach the
			// session: the session's other runs go on.
			sess.mu.Unlock()
			err := &airlock.NotAdmitted{Tier: ExecutorName, Reason: fmt.Sprintf("the session would hold %d credential values, more than the %d one session scrubs: open a new session", n, MaxSessionValues)}
			res.SetError(err)
			return res, err
		}
		sess.values = append(sess.values, fresh...)
		values = slices.Clone(sess.values)
		sess.mu.Unlock()
	}
	sc := newScrubber(values)
	// Output is not passed on as the inner tier produces it (a caller may
	// ask the executor's server for a stream): a chunk is not scrubbed,
	// and a value may be cut between chunks. A sink gets the scrubbed
	// output once the run ends, as the Result holds it.
	sink := airlock.OutputSink(ctx)
	out, err := run(airlock.WithOutput(ctx, nil), innerJob(job, vals))
	sc.result(&out)
	if sink != nil {
		if out.Stdout != "" {
			sink(airlock.Stdout, []byte(out.Stdout))
		}
		if out.Stderr != "" {
			sink(airlock.Stderr, []byte(out.Stderr))
		}
	}
	line := "executor: ran on " + where
	if len(names) > 0 {
		line = "executor: resolved " + strings.Join(names, ", ") + "; ran on " + where + "; resolved values scrubbed from the output"
	}
	out.Decision = append(out.Decision, line)
	if err != nil {
		// The typed error, rebuilt from the scrubbed result.
		if rebuilt := out.Err(); rebuilt != nil {
			err = rebuilt
		} else {
			err = fmt.Errorf("%s", sc.text(err.Error()))
		}
	}
	return out, err
}

// value resolves ref for the caller in ctx: a stored value, or a token
// minted for this job; kind says which, for the decision line.
func (e *Executor) value(ctx context.Context, st *store, job *airlock.Job, ref string) (string, string, error) {
	c, err := st.lookup(ref)
	if err != nil {
		return "", "", err
	}
	if peer := peerOf(ctx); len(c.Callers) > 0 && !slices.Contains(c.Callers, peer) {
		return "", "", fmt.Errorf("credential %q may not be used by %s (only by %s)", ref, peer, strings.Join(c.Callers, ", "))
	}
	if c.Type != "oidc" {
		return c.Value, "static: long-lived, not minted for this job", nil
	}
	if e.issuer == nil {
		return "", "", fmt.Errorf("credential %q is an OIDC token, and this executor has no issuer", ref)
	}
	// The token lives as long as the job may, and names the caller and
	// the exact job.
	limits, err := e.limits.Resolve(job.Limits)
	if err != nil {
		return "", "", err
	}
	peer := peerOf(ctx)
	digest := approve.Of(job, ExecutorName, peer)
	deadline := e.issuer.now().Add(limits.Wall())
	tok, err := e.issuer.Mint(Claims{Subject: peer + ":sha256:" + string(digest), Audience: c.Audience, Scopes: c.Scopes,
		Deadline: deadline})
	return tok, "oidc: minted for this job, expires " + deadline.Add(Skew).UTC().Format(time.RFC3339), err
}
