// Package account is level 5: the job moves to an airlock executor that
// runs under another OS account, the one that holds the credentials the
// job names by reference. The caller's side is [Tier], a client of the
// executor's v1 HTTP API over a Unix socket; the executor's side is
// [Executor] (the peer-checked listener, the credential store, and a tier
// that resolves references, runs the job in its own inner sandbox tier and
// scrubs every resolved value from what it returns).
//
// Neither side ever holds a credential value for the caller: the caller
// sends references, and the executor returns scrubbed output.
package account

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
)

// Name is the tier's name.
const Name = "account"

// Config names the account a Tier hands jobs to. It is immutable: the
// With methods return copies.
type Config struct {
	account string
	socket  string
	uid     int // the executor's expected uid, -1: not checked
	remote  *Remote
	tls     *tls.Config
	unavail error
}

// NewConfig returns the configuration for the executor of account
// (a name, for messages) listening on socket and running as uid.
func NewConfig(account, socket string, uid int) Config {
	return Config{account: account, socket: socket, uid: uid}
}

// NewRemoteConfig returns the configuration for the executor of account
// on another machine, reached at rm.URL (https) over mutual TLS: the
// executor's certificate must chain to the CA in rm.CA alone, and the
// caller presents rm.Cert. A configuration that cannot be loaded makes an
// unavailable tier that says why.
func NewRemoteConfig(account string, rm Remote) Config {
	c := Config{account: account, uid: -1, remote: &rm}
	u, err := url.Parse(rm.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		c.unavail = fmt.Errorf("account %s: remote URL %q: want https://HOST:PORT", account, rm.URL)
		return c
	}
	if c.tls, err = clientTLS(rm); err != nil {
		c.unavail = fmt.Errorf("account %s: %w", account, err)
	}
	return c
}

// Name returns the account's name.
func (c Config) Name() string { return c.account }

// WithUnavailable returns a copy whose tier admits nothing and says why:
// no account is configured, say. The router lists it all the same, so
// `airlock tiers` and `airlock explain` name level 5 and what it lacks.
func (c Config) WithUnavailable(err error) Config { c.unavail = err; return c }

// Tier is the account tier. It reaches one or more accounts' executors:
// a job names the one it runs under (Job.Account), or runs under the
// tier's default. It is safe for concurrent use.
type Tier struct {
	def   *conn   // the default account; its cfg.unavail says why there is none
	all   []*conn // every account the tier reaches, the default first
	names []string
}

// conn is the client of one account's executor.
type conn struct {
	cfg    Config
	base   string
	client *http.Client
}

func newConn(cfg Config) *conn {
	c := &conn{cfg: cfg, base: "http://account"}
	// One connection per request: a dead executor fails that job alone.
	tr := &http.Transport{DisableKeepAlives: true}
	if cfg.remote != nil {
		c.base = strings.TrimSuffix(cfg.remote.URL, "/")
		tr.TLSClientConfig = cfg.tls
	} else {
		tr.DialContext = c.dial
	}
	c.client = &http.Client{Transport: tr}
	return c
}

// New returns the tier for the account def and, when more are given,
// those too, which a job reaches by naming them (Job.Account); a job that
// names none runs under def. A def made unavailable with no account name
// (NewConfig("", "", -1).WithUnavailable(why)) leaves the tier without a
// default: a job must name one of the others, and one that does not is
// refused with why. An account named twice is reached as first given.
func New(def Config, more ...Config) *Tier {
	t := &Tier{def: newConn(def)}
	if def.account != "" {
		t.all, t.names = append(t.all, t.def), append(t.names, def.account)
	}
	for _, cfg := range more {
		if cfg.account == "" || slices.Contains(t.names, cfg.account) {
			continue
		}
		t.all, t.names = append(t.all, newConn(cfg)), append(t.names, cfg.account)
	}
	return t
}

func (t *Tier) Name() string         { return Name }
func (t *Tier) Level() airlock.Level { return airlock.LevelAccount }

// Cost places the tier after every level-4 tier: it runs one of them,
// behind a socket.
func (t *Tier) Cost() time.Duration { return 2 * time.Second }

// Account returns the name of the tier's default account ("" when it
// has none).
func (t *Tier) Account() string { return t.def.cfg.account }

// Accounts returns the names of the accounts the tier reaches, the
// default first. A server checks a job's account against its tenant's
// allowlist by them.
func (t *Tier) Accounts() []string { return slices.Clone(t.names) }

// Available reports whether an account's executor is there to reach:
// the default's, or, with no default, any other's.
func (t *Tier) Available() error {
	err := t.def.available()
	if err == nil || t.def.cfg.account != "" {
		return err
	}
	var first error
	for _, c := range t.all {
		cerr := c.available()
		if cerr == nil {
			return nil
		}
		if first == nil {
			first = cerr
		}
	}
	if first != nil {
		return fmt.Errorf("%w; and none of them is reachable: %w", err, first)
	}
	return err
}

func (c *conn) available() error {
	if c.cfg.unavail != nil {
		return c.cfg.unavail
	}
	if c.cfg.remote != nil {
		return nil // reached per job; its certificate is checked then
	}
	st, err := os.Stat(c.cfg.socket)
	if err != nil || st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("the executor of account %s is not running (no socket at %s; start it: airlock account start %s)", c.cfg.account, c.cfg.socket, c.cfg.account)
	}
	return nil
}

// pick returns the account a job runs under, or why it cannot run.
func (t *Tier) pick(name string) (*conn, error) {
	if name == "" {
		if t.def.cfg.unavail != nil {
			return nil, &airlock.NotAdmitted{Tier: Name, Reason: "unavailable: " + t.def.cfg.unavail.Error()}
		}
		return t.def, nil
	}
	for _, c := range t.all {
		if c.cfg.account == name {
			// The tier is available when any account is: this one's
			// executor is checked here.
			if err := c.available(); err != nil {
				return nil, &airlock.NotAdmitted{Tier: Name, Reason: "unavailable: " + err.Error()}
			}
			return c, nil
		}
	}
	configured := "none"
	if len(t.names) > 0 {
		configured = strings.Join(t.names, ", ")
	}
	return nil, &airlock.NotAdmitted{Tier: Name, Reason: fmt.Sprintf("account %s is not one this caller is configured to use (configured: %s)", name, configured)}
}

// Admit refuses what the executor would not run for a reason the caller
// can know: an account the tier does not reach, a value passed through
// the caller, a session's lifecycle outside a session. What the
// executor's own tier runs (kinds, images) is the executor's to decide;
// its refusal comes back with the account named.
func (t *Tier) Admit(job airlock.Job) error {
	_, err := t.admit(&job)
	return err
}

func (t *Tier) admit(job *airlock.Job) (*conn, error) {
	c, err := t.pick(job.Account)
	if err != nil {
		return nil, err
	}
	reason := ""
	switch {
	case len(job.Grants.Secrets) > 0:
		reason = "grants.secrets pass a value through the caller; at level 5 name credentials by reference (grants.credentials, --credential ENV=REF)"
	case job.Lifecycle != "" && job.Lifecycle != airlock.LifecycleEphemeral:
		reason = fmt.Sprintf("a job of lifecycle %s runs in a session of the account tier (OpenSession), not on its own", job.Lifecycle)
	default:
		return c, nil
	}
	return nil, &airlock.NotAdmitted{Tier: Name, Reason: reason}
}

// slack is how long past the job's own wall clock the caller waits for
// the executor's answer (its queue, its sandbox's start and tear-down).
const slack = 60 * time.Second

// Run hands the job to the executor and returns its Result unchanged,
// with a decision line of its own.
func (t *Tier) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	res := airlock.Result{Tier: Name, Level: airlock.LevelAccount, Clock: job.Clock, Seed: job.Seed}
	c, err := t.admit(&job)
	if err != nil {
		res.SetError(err)
		return res, err
	}
	return c.run(ctx, "/v1/run", job, res)
}

func (c *conn) run(ctx context.Context, path string, job airlock.Job, res airlock.Result) (airlock.Result, error) {
	// The executor routes among its own tiers, and is the account.
	job.Tier, job.Account = "", ""
	body, err := json.Marshal(job)
	if err != nil {
		return c.fail(res, fmt.Errorf("encoding the job: %w", err))
	}
	wall := job.Limits.Wall()
	if wall <= 0 {
		wall = airlock.DefaultLimitPolicy().Default.Wall()
	}
	ctx, cancel := context.WithTimeout(ctx, wall+slack)
	defer cancel()
	status, data, err := c.do(ctx, http.MethodPost, path, body)
	if err != nil {
		return c.fail(res, err)
	}
	var out airlock.Result
	uerr := json.Unmarshal(data, &out)
	if uerr == nil && out.Tier == "" && out.Error == nil && out.Stopped != nil {
		// Refused before any tier ran, as a stop: a host path the
		// executor does not grant its callers.
		st := *out.Stopped
		st.Detail = "executor of account " + c.cfg.account + ": " + st.Detail
		res.Stopped = &st
		res.Decision = append(res.Decision, c.line())
		return res, res.Err()
	}
	if uerr != nil || out.Tier == "" {
		// Refused before any tier ran: the API's error shape.
		err := c.apiError(status, data)
		res.SetError(err)
		res.Decision = append(res.Decision, c.line())
		return res, err
	}
	out.Decision = append(out.Decision, c.line())
	// The executor answers with the whole (scrubbed) Result: a sink gets
	// the output then, so that what it was given equals the Result.
	if sink := airlock.OutputSink(ctx); sink != nil {
		if out.Stdout != "" {
			sink(airlock.Stdout, []byte(out.Stdout))
		}
		if out.Stderr != "" {
			sink(airlock.Stderr, []byte(out.Stderr))
		}
	}
	return out, out.Err()
}

// do sends one request to the executor and reads its answer.
func (c *conn) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, c.lost(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, nil, c.lost(err)
	}
	return resp.StatusCode, data, nil
}

// apiError is the typed error of an answer in the API's error shape, a
// refusal naming the account.
func (c *conn) apiError(status int, data []byte) error {
	var apiErr struct {
		Error airlock.ErrorInfo `json:"error"`
	}
	if json.Unmarshal(data, &apiErr) != nil || apiErr.Error.Message == "" {
		return fmt.Errorf("executor of account %s answered %d %s with no result", c.cfg.account, status, http.StatusText(status))
	}
	res := airlock.Result{Error: &apiErr.Error}
	err := res.Err()
	var na *airlock.NotAdmitted
	if errors.As(err, &na) {
		msg := na.Error() // the executor's words, naming the tier that refused
		na.Tier = Name
		na.Reason = "executor of account " + c.cfg.account + ": " + msg
	}
	return err
}

func (c *conn) line() string {
	if c.cfg.remote != nil {
		return fmt.Sprintf("account %s: ran by its executor at %s (mutual TLS, its CA pinned)", c.cfg.account, c.cfg.remote.URL)
	}
	return fmt.Sprintf("account %s: ran by its executor (uid %d) over %s", c.cfg.account, c.cfg.uid, c.cfg.socket)
}

func (c *conn) fail(res airlock.Result, err error) (airlock.Result, error) {
	res.SetError(err)
	res.Decision = append(res.Decision, c.line())
	return res, err
}

// lost names what a broken connection means for the job.
func (c *conn) lost(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &airlock.Stop{Reason: airlock.StopTimeout, Detail: "the executor of account " + c.cfg.account + " did not answer within the job's wall clock"}
	}
	if c.cfg.remote != nil {
		if refused := tlsRefusal(c.cfg.account, c.cfg.remote.URL, c.cfg.remote.CA, err); refused != nil {
			return refused
		}
	}
	return fmt.Errorf("the executor of account %s went away before answering: %w", c.cfg.account, err)
}

// OpenSession opens a session on the executor of opts.Account (empty:
// the default account): its runs go to one instance of the executor's own
// tier, which keeps their state; the executor's tier must keep sessions
// (the microVM does not). A run in it may name no other account.
func (t *Tier) OpenSession(ctx context.Context, opts airlock.SessionOptions) (airlock.Session, error) {
	c, err := t.pick(opts.Account)
	if err != nil {
		return nil, err
	}
	if opts.Workspace != "" {
		return nil, &airlock.NotAdmitted{Tier: Name, Reason: "persistent workspaces do not pass to an account's executor"}
	}
	req := map[string]any{"tier": ExecutorName}
	if opts.TTL > 0 {
		req["ttl"] = opts.TTL.String()
	}
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(ctx, slack)
	defer cancel()
	status, data, err := c.do(ctx, http.MethodPost, "/v1/sessions", body)
	if err != nil {
		return nil, err
	}
	var open struct {
		ID string `json:"id"`
	}
	if status != http.StatusCreated || json.Unmarshal(data, &open) != nil || open.ID == "" {
		return nil, c.apiError(status, data)
	}
	id := opts.ID
	if id == "" {
		id = open.ID
	}
	return &session{c: c, id: id, remote: open.ID}, nil
}

// session is a session of the executor's, known to the caller by id.
type session struct {
	c      *conn
	id     string // the caller's name for it
	remote string // the executor's
}

func (s *session) ID() string { return s.id }

func (s *session) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	res := airlock.Result{Tier: Name, Level: airlock.LevelAccount, Clock: job.Clock, Seed: job.Seed}
	if job.Account != "" && job.Account != s.c.cfg.account {
		err := &airlock.NotAdmitted{Tier: Name, Reason: fmt.Sprintf("the session runs under account %s, not %s", s.c.cfg.account, job.Account)}
		res.SetError(err)
		return res, err
	}
	job.Session, job.Lifecycle = "", ""
	if len(job.Grants.Secrets) > 0 {
		err := &airlock.NotAdmitted{Tier: Name, Reason: "grants.secrets pass a value through the caller; at level 5 name credentials by reference (grants.credentials, --credential ENV=REF)"}
		res.SetError(err)
		return res, err
	}
	return s.c.run(ctx, "/v1/sessions/"+url.PathEscape(s.remote)+"/run", job, res)
}

// Close closes the executor's session; one the executor no longer knows
// (closed when idle, or the executor restarted) is closed already.
func (s *session) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), slack)
	defer cancel()
	status, data, err := s.c.do(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(s.remote), nil)
	if err != nil {
		return err
	}
	if status == http.StatusNoContent || status == http.StatusNotFound {
		return nil
	}
	return s.c.apiError(status, data)
}

// dial connects to the executor's socket and checks, with SO_PEERCRED,
// that the account's uid serves it: another user cannot stand in for the
// executor by taking over a stale socket path.
func (c *conn) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", c.cfg.socket)
	if err != nil {
		return nil, fmt.Errorf("reaching the executor of account %s: %w", c.cfg.account, err)
	}
	if c.cfg.uid < 0 {
		return nc, nil
	}
	cred, err := PeerCred(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	if int(cred.Uid) != c.cfg.uid {
		nc.Close()
		return nil, fmt.Errorf("%s is served by uid %d, not by account %s (uid %d): refused", c.cfg.socket, cred.Uid, c.cfg.account, c.cfg.uid)
	}
	return nc, nil
}

// PeerCred returns the credentials of the process at the other end of a
// Unix socket connection.
func PeerCred(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("not a Unix socket connection: %T", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if credErr != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	return cred, nil
}
