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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
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
	unavail error
}

// NewConfig returns the configuration for the executor of account
// (a name, for messages) listening on socket and running as uid.
func NewConfig(account, socket string, uid int) Config {
	return Config{account: account, socket: socket, uid: uid}
}

// WithUnavailable returns a copy whose tier admits nothing and says why:
// no account is configured, say. The router lists it all the same, so
// `airlock tiers` and `airlock explain` name level 5 and what it lacks.
func (c Config) WithUnavailable(err error) Config { c.unavail = err; return c }

// Tier is the account tier. It is safe for concurrent use.
type Tier struct {
	cfg    Config
	client *http.Client
}

// New returns the tier.
func New(cfg Config) *Tier {
	t := &Tier{cfg: cfg}
	t.client = &http.Client{Transport: &http.Transport{
		DialContext:       t.dial,
		DisableKeepAlives: true, // one connection per job: a dead executor fails that job alone
	}}
	return t
}

func (t *Tier) Name() string         { return Name }
func (t *Tier) Level() airlock.Level { return airlock.LevelAccount }

// Cost places the tier after every level-4 tier: it runs one of them,
// behind a socket.
func (t *Tier) Cost() time.Duration { return 2 * time.Second }

// Account returns the name of the account the tier hands jobs to.
func (t *Tier) Account() string { return t.cfg.account }

// Available reports whether the account's executor is there to reach.
func (t *Tier) Available() error {
	if t.cfg.unavail != nil {
		return t.cfg.unavail
	}
	st, err := os.Stat(t.cfg.socket)
	if err != nil || st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("the executor of account %s is not running (no socket at %s; start it: airlock account start %s)", t.cfg.account, t.cfg.socket, t.cfg.account)
	}
	return nil
}

// Admit refuses what the executor would not run for a reason the caller
// can know: a value passed through the caller, a kept instance.
func (t *Tier) Admit(job airlock.Job) error {
	reason := ""
	switch {
	case t.cfg.unavail != nil:
		reason = "unavailable: " + t.cfg.unavail.Error()
	case len(job.Grants.Secrets) > 0:
		reason = "grants.secrets pass a value through the caller; at level 5 name credentials by reference (grants.credentials, --credential ENV=REF)"
	case job.Lifecycle != "" && job.Lifecycle != airlock.LifecycleEphemeral:
		reason = "the account tier runs ephemeral jobs only"
	case job.Kind != airlock.KindCommand:
		reason = "the account tier runs command jobs (its executor's inner tier is an OS sandbox)"
	default:
		return nil
	}
	return &airlock.NotAdmitted{Tier: Name, Reason: reason}
}

// slack is how long past the job's own wall clock the caller waits for
// the executor's answer (its queue, its sandbox's start and tear-down).
const slack = 60 * time.Second

// Run hands the job to the executor and returns its Result unchanged,
// with a decision line of its own.
func (t *Tier) Run(ctx context.Context, job airlock.Job) (airlock.Result, error) {
	res := airlock.Result{Tier: Name, Level: airlock.LevelAccount, Clock: job.Clock, Seed: job.Seed}
	if err := t.Admit(job); err != nil {
		res.SetError(err)
		return res, err
	}
	// The executor routes among its own tiers.
	job.Tier = ""
	body, err := json.Marshal(job)
	if err != nil {
		return t.fail(res, fmt.Errorf("encoding the job: %w", err))
	}
	wall := job.Limits.Wall()
	if wall <= 0 {
		wall = airlock.DefaultLimitPolicy().Default.Wall()
	}
	ctx, cancel := context.WithTimeout(ctx, wall+slack)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://account/v1/run", bytes.NewReader(body))
	if err != nil {
		return t.fail(res, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return t.fail(res, t.lost(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return t.fail(res, t.lost(err))
	}
	var out airlock.Result
	if err := json.Unmarshal(data, &out); err != nil || out.Tier == "" {
		// Refused before any tier ran: the API's error shape.
		var apiErr struct {
			Error airlock.ErrorInfo `json:"error"`
		}
		if json.Unmarshal(data, &apiErr) != nil || apiErr.Error.Message == "" {
			return t.fail(res, fmt.Errorf("executor of account %s answered %s with no result", t.cfg.account, resp.Status))
		}
		res.Error = &apiErr.Error
		if out.Stopped != nil {
			res.Stopped = out.Stopped
		}
		err := res.Err()
		var na *airlock.NotAdmitted
		if errors.As(err, &na) {
			na.Tier = Name
			na.Reason = "executor of account " + t.cfg.account + ": " + na.Reason
			res.Error.Message = na.Error()
		}
		res.Decision = append(res.Decision, t.line())
		return res, err
	}
	out.Decision = append(out.Decision, t.line())
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

func (t *Tier) line() string {
	return fmt.Sprintf("account %s: ran by its executor (uid %d) over %s", t.cfg.account, t.cfg.uid, t.cfg.socket)
}

func (t *Tier) fail(res airlock.Result, err error) (airlock.Result, error) {
	res.SetError(err)
	res.Decision = append(res.Decision, t.line())
	return res, err
}

// lost names what a broken connection means for the job.
func (t *Tier) lost(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &airlock.Stop{Reason: airlock.StopTimeout, Detail: "the executor of account " + t.cfg.account + " did not answer within the job's wall clock"}
	}
	return fmt.Errorf("the executor of account %s went away before answering: %w", t.cfg.account, err)
}

// dial connects to the executor's socket and checks, with SO_PEERCRED,
// that the account's uid serves it: another user cannot stand in for the
// executor by taking over a stale socket path.
func (t *Tier) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", t.cfg.socket)
	if err != nil {
		return nil, fmt.Errorf("reaching the executor of account %s: %w", t.cfg.account, err)
	}
	if t.cfg.uid < 0 {
		return c, nil
	}
	cred, err := PeerCred(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	if int(cred.Uid) != t.cfg.uid {
		c.Close()
		return nil, fmt.Errorf("%s is served by uid %d, not by account %s (uid %d): refused", t.cfg.socket, cred.Uid, t.cfg.account, t.cfg.uid)
	}
	return c, nil
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
