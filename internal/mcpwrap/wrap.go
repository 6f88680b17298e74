package mcpwrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/egress/sanitize"
	"github.com/airlock-sandbox/airlock/internal/state"
	"github.com/airlock-sandbox/airlock/internal/version"
)

// ApprovalMeta is the key in a tools/call's _meta that carries the
// approval token; it is never forwarded to the wrapped server.
const ApprovalMeta = "airlock/approval"

// Tenant is the tenant approval tokens for wrapped tools are issued to.
const Tenant = "mcp-wrap"

// Defaults for Config's zero fields.
const (
	DefaultCallTimeout    = 60 * time.Second
	DefaultMaxResultBytes = 256 << 10
	maxDescription        = 4 << 10
	// maxOffered bounds one tool, prompt or resource the wrapped server
	// lists, as offered to the agent (its JSON, once sanitised): a larger
	// one is hidden.
	maxOffered = 64 << 10
)

// Config configures a Wrapper. It is copied.
type Config struct {
	// Argv is the wrapped server's command; approvals are bound to it.
	Argv   []string
	Policy Policy
	// OutputHosts are the hosts links and images in results may point to
	// (see package sanitize); none: only relative links survive.
	OutputHosts []string
	// CallTimeout bounds one relayed call (0: DefaultCallTimeout).
	CallTimeout time.Duration
	// MaxResultBytes caps a result's text (0: DefaultMaxResultBytes).
	MaxResultBytes int
	// IdleTimeout ends the wrapped server once no request has reached it
	// for this long and none is in flight (0: never idle).
	IdleTimeout time.Duration
	// Signer checks approval tokens; nil refuses every call that needs one.
	Signer *approve.Signer
	// Tenant is who approval tokens must be issued to (empty: Tenant).
	Tenant string
	// Redeem uses up an approval token, refusing one already used: a
	// token relays its call once. nil: the wrapper remembers the tokens it
	// has taken until they expire.
	Redeem func(ctx context.Context, token string, c approve.Claims) error
	// Audit receives one record per call and decision; nil: none.
	Audit func(Record)
	// Stderr receives the wrapped server's stderr (the operator's to read,
	// never the agent's); nil: discarded.
	Stderr io.Writer
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Rates are the policy's rate limits (NewRates), shared by the
	// wrappers whose calls count together, such as the instances of one
	// hosted server; nil: the wrapper's own.
	Rates *Rates
}

// Rates are a policy's per-tool rate limits.
type Rates struct{ limiters map[string]*rate.Limiter }

// NewRates returns p's rate limits, with no call counted yet.
func NewRates(p Policy) *Rates {
	r := &Rates{limiters: map[string]*rate.Limiter{}}
	for name, rule := range p.Tools {
		if rule.RatePerMinute > 0 {
			r.limiters[name] = rate.NewLimiter(rate.Every(time.Minute/time.Duration(rule.RatePerMinute)), rule.RatePerMinute)
		}
	}
	return r
}

// Wrapper relays tools from a wrapped server to the agent's client. It is
// safe for concurrent use.
type Wrapper struct {
	cfg      Config
	up       *mcp.ClientSession
	srv      *mcp.Server
	san      *sanitize.Sanitizer
	limiters map[string]*rate.Limiter
	args     map[string]*argRules // by tool; defArgs for the others
	defArgs  *argRules

	used state.Store // the tokens taken, without Config.Redeem

	listMu    sync.Mutex        // serialises listings
	listed    map[string]string // tool name -> what was offered, as JSON
	hidden    map[string]string // tool name -> why the last listing hid it
	prompts   map[string]string // prompt name -> what was offered, as JSON
	resources map[string]string // resource URI -> what was offered, as JSON

	// listAudit bounds the listing records written; those past it are
	// counted in suppressed and reported in one record.
	auditMu    sync.Mutex
	listAudit  *rate.Limiter
	suppressed int
	watching   atomic.Bool // the first listing is done: listAudit applies

	refreshc chan struct{} // the wrapped server's tools changed
	last     atomic.Int64  // unix nanoseconds of the last request
	inflight atomic.Int64

	att    airlock.Attached // nil for Connect
	copies sync.WaitGroup
	done   chan struct{}
	once   sync.Once
	endErr error
}

// ErrIdle ends a wrapped server that was idle for Config.IdleTimeout.
var ErrIdle = errors.New("the wrapped server was idle past its idle timeout")

// ErrClosed ends a wrapped server closed by its owner.
var ErrClosed = errors.New("the wrapped server was closed")

func newWrapper(cfg Config) (*Wrapper, error) {
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	san, err := sanitize.New(cfg.OutputHosts...)
	if err != nil {
		return nil, fmt.Errorf("output hosts: %w", err)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = DefaultMaxResultBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tenant == "" {
		cfg.Tenant = Tenant
	}
	cfg.Argv = append([]string(nil), cfg.Argv...)
	args, defArgs, err := cfg.Policy.compileArgs()
	if err != nil {
		return nil, err
	}
	if cfg.Rates == nil {
		cfg.Rates = NewRates(cfg.Policy)
	}
	w := &Wrapper{cfg: cfg, san: san, used: state.NewEmbedded(), limiters: cfg.Rates.limiters, listed: map[string]string{},
		prompts: map[string]string{}, resources: map[string]string{},
		args: args, defArgs: defArgs, refreshc: make(chan struct{}, 1), done: make(chan struct{}),
		listAudit: rate.NewLimiter(listAuditRate, listAuditBurst)}
	w.touch()
	// The server always offers tools, and says their list may change: the
	// wrapped server's list is followed.
	w.srv = mcp.NewServer(&mcp.Implementation{Name: "airlock-mcp-wrap", Version: version.String()}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	w.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			w.inflight.Add(1)
			defer func() { w.touch(); w.inflight.Add(-1) }()
			w.touch()
			return next(ctx, method, req)
		}
	})
	return w, nil
}

// Connect starts an MCP session with the wrapped server over t, lists its
// tools and returns the wrapper, whose Server offers those the policy
// allows. It follows the wrapped server's notifications that its tool
// list changed, applying the policy to the new list.
func Connect(ctx context.Context, cfg Config, t mcp.Transport) (*Wrapper, error) {
	w, err := newWrapper(cfg)
	if err != nil {
		return nil, err
	}
	if err := w.connect(ctx, t); err != nil {
		return nil, err
	}
	w.watch()
	return w, nil
}

func (w *Wrapper) connect(ctx context.Context, t mcp.Transport) error {
	changed := func() {
		select {
		case w.refreshc <- struct{}{}:
		default:
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "airlock-mcp-wrap", Version: version.String()}, &mcp.ClientOptions{
		// The handlers must not call back into the session they run on:
		// the listing happens in refreshLoop.
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { changed() },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { changed() },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { changed() },
	})
	up, err := client.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("the wrapped server did not start an MCP session: %w", err)
	}
	w.up = up
	if err := w.refresh(ctx); err != nil {
		_ = up.Close()
		return err
	}
	return nil
}

// watch starts what ends or follows the wrapper: the wrapped server's
// session ending, its tool list changing, idleness.
func (w *Wrapper) watch() {
	w.watching.Store(true)
	go func() {
		err := w.up.Wait()
		if err == nil {
			err = errors.New("the wrapped server ended its session")
		}
		w.end(err)
	}()
	go w.refreshLoop()
	if w.cfg.IdleTimeout > 0 {
		go w.idleLoop()
	}
}

// Start runs job (the wrapped server's command, cfg.Argv) attached on at,
// connects to it over its stdin and stdout within startTimeout, and
// returns the wrapper. The sandbox lives until the job's wall clock runs
// out, the server exits, it is idle past cfg.IdleTimeout, or Close.
func Start(ctx context.Context, at airlock.Attacher, job airlock.Job, cfg Config, startTimeout time.Duration) (*Wrapper, error) {
	w, err := newWrapper(cfg)
	if err != nil {
		return nil, err
	}
	att, err := at.Attach(context.WithoutCancel(ctx), job)
	if err != nil {
		return nil, err
	}
	w.att = att
	stderr := cfg.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	w.copies.Go(func() { _, _ = io.Copy(stderr, att.Stderr()) })
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := w.connect(sctx, &mcp.IOTransport{Reader: io.NopCloser(att.Stdout()), Writer: att.Stdin(), MaxLineLength: 16 << 20}); err != nil {
		att.Kill()
		res, werr := att.Wait()
		w.copies.Wait()
		if werr == nil {
			// The wrapped program ran and spoke no MCP: its failure, as
			// a program's runtime error is, not the wrapper's.
			return nil, &airlock.ErrorInfo{Kind: airlock.ErrRuntime, Message: fmt.Sprintf("%v (%s)", err, startEnd(res, nil))}
		}
		return nil, fmt.Errorf("%w (%s)", err, startEnd(res, werr))
	}
	go func() {
		_, err := att.Wait()
		if err == nil {
			err = errors.New("the wrapped server exited")
		}
		w.end(err)
	}()
	w.watch()
	return w, nil
}

// startEnd says how a wrapped server that started no MCP session ended.
func startEnd(res airlock.Result, err error) string {
	switch stop, stopped := airlock.AsStop(err); {
	case stopped && stop.Reason == airlock.StopKilled, res.Stopped != nil && res.Stopped.Reason == airlock.StopKilled:
		return "it was still running, without answering, and was ended"
	case err != nil:
		return "it ended: " + err.Error()
	case res.Stopped != nil:
		return "it was stopped: " + res.Stopped.Error()
	default:
		return fmt.Sprintf("it exited with status %d", res.ExitCode)
	}
}

// Server is the MCP server offering the wrapped server's tools to the
// agent's client. Its sessions are closed when the wrapper ends.
func (w *Wrapper) Server() *mcp.Server { return w.srv }

// Done is closed when the wrapper has ended; Err then says why.
func (w *Wrapper) Done() <-chan struct{} { return w.done }

// Err is why the wrapper ended (nil while it runs).
func (w *Wrapper) Err() error {
	select {
	case <-w.done:
		return w.endErr
	default:
		return nil
	}
}

// Close ends the wrapper: the wrapped server's sandbox is killed and the
// agent's sessions are closed. It waits for the sandbox to be gone.
func (w *Wrapper) Close() error {
	// An owner that closes an idle wrapper (an HTTP session timing out
	// as the idle timeout passes) ends it for idleness, whichever timer
	// fired first.
	if w.idlePast() {
		w.end(ErrIdle)
	}
	w.end(ErrClosed)
	if w.att != nil {
		_, _ = w.att.Wait()
		w.copies.Wait()
	}
	return nil
}

// end ends the wrapper once, for err.
func (w *Wrapper) end(err error) {
	w.once.Do(func() {
		w.endErr = err
		close(w.done)
		w.audit(Record{Event: "exit", Reason: err.Error()})
		if w.att != nil {
			w.att.Kill()
		}
		if w.up != nil {
			_ = w.up.Close()
		}
		for ss := range w.srv.Sessions() {
			_ = ss.Close()
		}
	})
}

func (w *Wrapper) touch() { w.last.Store(time.Now().UnixNano()) }

// idlePast reports whether the wrapper has an idle timeout, no request in
// flight, and none for at least that long.
func (w *Wrapper) idlePast() bool {
	return w.cfg.IdleTimeout > 0 && w.inflight.Load() == 0 &&
		time.Since(time.Unix(0, w.last.Load())) >= w.cfg.IdleTimeout
}

// idleLoop ends the wrapper once no request has come for IdleTimeout and
// none is in flight.
func (w *Wrapper) idleLoop() {
	idle := w.cfg.IdleTimeout
	t := time.NewTimer(idle)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		since := time.Since(time.Unix(0, w.last.Load()))
		switch {
		case w.inflight.Load() > 0:
			t.Reset(idle)
		case w.idlePast():
			w.end(ErrIdle)
			return
		default:
			t.Reset(idle - since)
		}
	}
}

// refreshLoop re-lists the wrapped server's tools when it says they
// changed, at most a few times a second however often it says so.
func (w *Wrapper) refreshLoop() {
	lim := rate.NewLimiter(rate.Every(250*time.Millisecond), 2)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-w.done; cancel() }()
	for {
		select {
		case <-w.done:
			return
		case <-w.refreshc:
		}
		if lim.Wait(ctx) != nil {
			return
		}
		if err := w.refresh(ctx); err != nil {
			w.audit(Record{Event: "list", Decision: "failed", Reason: w.failure(err)})
		}
	}
}

// refresh follows the wrapped server's lists: its tools, and its prompts
// and resources when the policy relays them. Only the tools' listing
// failing is an error; a prompts or resources listing that fails is
// audited and leaves that list as it was.
func (w *Wrapper) refresh(ctx context.Context) error {
	w.listMu.Lock()
	defer w.listMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	if err := errors.Join(w.refreshPrompts(ctx), w.refreshResources(ctx)); err != nil {
		w.audit(Record{Event: "list", Decision: "failed", Reason: w.failure(err)})
	}
	return w.refreshTools(ctx)
}

// refreshTools lists the wrapped server's tools and offers the agent those the
// policy allows: a tool gone from the list, or now denied or malformed,
// is withdrawn, a new or changed one is offered. The server notifies the
// agent's client when its list changed. Tool descriptions come from the
// untrusted server: they are sanitised and capped like results.
func (w *Wrapper) refreshTools(ctx context.Context) error {
	type offer struct {
		tool *mcp.Tool
		key  string
	}
	var offers []offer
	seen := map[string]bool{}
	// A tool hidden is audited when it is first hidden (or for another
	// reason), not at every listing that hides it again.
	hidden := map[string]string{}
	hide := func(name, why string) {
		name = w.text(name, maxDescription)
		if prev, ok := hidden[name]; ok && prev == why {
			return // listed twice
		}
		hidden[name] = why
		if prev, ok := w.hidden[name]; !ok || prev != why {
			w.audit(Record{Event: "list", Tool: name, Decision: "hidden", Reason: why})
		}
	}
	for tool, err := range w.tools(ctx) {
		if err != nil {
			return err
		}
		// An odd name (a long one among them) is hidden before it is
		// remembered.
		if why := odd(tool.Name, &w.cfg.Policy); why != "" {
			hide(tool.Name, why)
			continue
		}
		if seen[tool.Name] {
			continue
		}
		seen[tool.Name] = true
		if !w.cfg.Policy.allowed(tool.Name) {
			hide(tool.Name, "denied by policy")
			continue
		}
		t := &mcp.Tool{Name: tool.Name, Title: w.text(tool.Title, maxDescription), InputSchema: w.schema(tool.InputSchema)}
		t.Description = w.text(tool.Description, maxDescription)
		if tool.Annotations != nil {
			// Only the title: the hints (read-only, idempotent, not
			// destructive, closed world) are the wrapped server's claims,
			// which a client trusting airlock could act on (not asking
			// the user); without them it sees the cautious defaults.
			t.Annotations = &mcp.ToolAnnotations{Title: w.text(tool.Annotations.Title, maxDescription)}
		}
		if w.cfg.Policy.Tools[tool.Name].Approval {
			t.Description += fmt.Sprintf("\n\n(airlock: each call needs an approval token in _meta %q, bound to its exact arguments)", ApprovalMeta)
		}
		key, err := json.Marshal(t)
		if err == nil && len(key) > maxOffered {
			err = fmt.Errorf("%d bytes as JSON, over the limit of %d", len(key), maxOffered)
		}
		if err != nil {
			hide(tool.Name, "malformed tool: "+err.Error())
			continue
		}
		offers = append(offers, offer{t, string(key)})
	}
	now := map[string]bool{}
	for _, o := range offers {
		name := o.tool.Name
		if w.listed[name] == o.key {
			now[name] = true
			continue
		}
		if err := addTool(w.srv, o.tool, w.handler(name)); err != nil {
			hide(name, err.Error())
			continue
		}
		w.listed[name] = o.key
		now[name] = true
		w.audit(Record{Event: "list", Tool: name, Decision: "listed"})
	}
	w.hidden = hidden
	if gone := w.withdraw(w.listed, now, func(name string) Record { return Record{Tool: name} }); len(gone) > 0 {
		w.srv.RemoveTools(gone...)
	}
	return nil
}

// odd says why a tool's name is not offered, or "": a name the MCP
// specification does not allow (1 to 128 of A-Z a-z 0-9 _ - .), which
// clients do not expect and where look-alike letters, spaces and
// markdown hide, or one equal but for case to a tool the policy names,
// which would escape that tool's rule.
func odd(name string, p *Policy) string {
	if name == "" || len(name) > 128 || strings.ContainsFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
	}) {
		return "a name outside the MCP specification's (1 to 128 of A-Z a-z 0-9 _ - .)"
	}
	for named := range p.Tools {
		if named != name && strings.EqualFold(named, name) {
			return fmt.Sprintf("equal but for case to %s, which the policy names", named)
		}
	}
	return ""
}

// withdraw forgets what offered holds that the wrapped server's new list
// (now) lacks, audits each as withdrawn (rec names it), and returns them.
func (w *Wrapper) withdraw(offered map[string]string, now map[string]bool, rec func(key string) Record) []string {
	var gone []string
	for key := range offered {
		if !now[key] {
			gone = append(gone, key)
			delete(offered, key)
			r := rec(key)
			r.Event, r.Decision = "list", "withdrawn"
			w.audit(r)
		}
	}
	return gone
}

// addTool adds a tool, turning the SDK's panic on a malformed schema (the
// wrapped server chose it) into an error.
func addTool(srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed tool: %v", r)
		}
	}()
	if t.InputSchema == nil {
		return errors.New("malformed tool: no input schema")
	}
	srv.AddTool(t, h)
	return nil
}

func (w *Wrapper) handler(tool string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var token string
		if v, ok := req.Params.Meta[ApprovalMeta].(string); ok {
			token = v
		}
		return w.Call(ctx, tool, req.Params.Arguments, token), nil
	}
}

// Call decides on and relays one call. Every refusal and failure is a
// result with IsError set whose text starts "airlock: ", so the agent's
// model reads why.
func (w *Wrapper) Call(ctx context.Context, tool string, args json.RawMessage, token string) *mcp.CallToolResult {
	start := w.cfg.Now()
	rec := Record{Event: "call", Tool: tool, ArgsBytes: len(args)}
	refuse := func(decision, why string) *mcp.CallToolResult {
		rec.Decision, rec.Reason = decision, why
		w.audit(rec)
		return errResult("airlock: " + why)
	}
	p := &w.cfg.Policy
	if !p.allowed(tool) {
		return refuse("denied", fmt.Sprintf("tool %s is denied by policy", tool))
	}
	if max := p.maxArgs(tool); len(args) > max {
		return refuse("denied", fmt.Sprintf("the arguments of %s are %d bytes, over the limit of %d", tool, len(args), max))
	}
	if err := plainUnicode(args); err != nil {
		return refuse("denied", fmt.Sprintf("tool %s: %v", tool, err))
	}
	d, err := approve.OfToolCall(w.cfg.Argv, tool, args)
	if err != nil {
		return refuse("invalid", err.Error())
	}
	rec.ArgsDigest = string(d)
	rules := w.args[tool]
	if rules == nil {
		rules = w.defArgs
	}
	if err := checkKeys(args, rules.named()); err != nil {
		return refuse("denied", fmt.Sprintf("tool %s: %v", tool, err))
	}
	if err := rules.check(args); err != nil {
		return refuse("denied", fmt.Sprintf("tool %s: %v", tool, err))
	}
	if lim := w.limiters[tool]; lim != nil && !lim.AllowN(start, 1) {
		return refuse("rate_limited", fmt.Sprintf("tool %s is over its rate of %d calls a minute", tool, p.Tools[tool].RatePerMinute))
	}
	if p.Tools[tool].Approval {
		switch {
		case token == "":
			return refuse(approve.Required, fmt.Sprintf("%s: tool %s needs an approval for these exact arguments (digest %s)", approve.Required, tool, d))
		case w.cfg.Signer == nil:
			return refuse(approve.Stale, "no approval key is configured")
		}
		claims, err := w.cfg.Signer.Check(token, d, w.cfg.Tenant, start)
		if err == nil {
			err = w.redeem(ctx, token, claims, start)
		}
		if err != nil {
			return refuse(approve.Stale, err.Error())
		}
		rec.Approved = true
	}
	cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	res, err := w.up.CallTool(cctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	rec.DurationMS = w.cfg.Now().Sub(start).Milliseconds()
	switch {
	case err != nil && cctx.Err() == context.DeadlineExceeded && ctx.Err() == nil:
		return refuse("timeout", fmt.Sprintf("the wrapped server did not answer %s within %v; the call was cancelled", tool, w.cfg.CallTimeout))
	case err != nil:
		return refuse("failed", fmt.Sprintf("the wrapped server failed %s: %s", tool, w.failure(err)))
	}
	out := w.clean(res, &rec)
	rec.Decision = "relayed"
	w.audit(rec)
	return out
}

// redeem uses up token (see Config.Redeem): by default in a state of the
// wrapper's own, which forgets tokens once they expire.
func (w *Wrapper) redeem(ctx context.Context, token string, c approve.Claims, now time.Time) error {
	if w.cfg.Redeem != nil {
		return w.cfg.Redeem(ctx, token, c)
	}
	_ = w.used.Sweep(ctx, now)
	ok, err := w.used.Redeem(ctx, state.Redemption{Token: state.TokenHash(token), Digest: string(c.Digest), Tenant: c.Tenant, Expires: c.Expires})
	if err == nil && !ok {
		err = errors.New(approve.Stale + ": the token was already used (a token relays its call once; ask for another approval)")
	}
	return err
}

// clean keeps a result's text, sanitised and capped; any other content is
// replaced by a note, and structured content is dropped: the agent's model
// reads only what passed the sanitiser. The result is one text block,
// sanitised whole: a client shows a result's blocks run together, so a
// link split across blocks, each harmless alone, would form again.
func (w *Wrapper) clean(res *mcp.CallToolResult, rec *Record) *mcp.CallToolResult {
	out := &mcp.CallToolResult{IsError: res.IsError}
	if len(res.Content) == 0 {
		return out
	}
	var b block
	for _, c := range res.Content {
		b.add(c, rec)
	}
	budget := w.cfg.MaxResultBytes
	out.Content = []mcp.Content{&mcp.TextContent{Text: w.joined(&b, &budget, rec)}}
	return out
}

// block gathers content items that a client shows run together (a tool
// result's blocks, a resource's contents, consecutive prompt messages of
// one role), to be sanitised as one text: a link split across items,
// each harmless alone, would otherwise form again. Withheld items are
// counted by kind, so that their notes stay short however many there are.
type block struct {
	texts    []string
	withheld []string       // the kinds withheld, in order
	count    map[string]int // by kind
}

// add takes c's text, or notes that its other content is withheld.
func (b *block) add(c mcp.Content, rec *Record) {
	if tc, ok := c.(*mcp.TextContent); ok {
		b.texts = append(b.texts, tc.Text)
		return
	}
	var kind string
	switch c.(type) {
	case *mcp.ImageContent:
		kind = "image"
	case *mcp.AudioContent:
		kind = "audio"
	case *mcp.EmbeddedResource:
		kind = "embedded resource"
	case *mcp.ResourceLink:
		kind = "resource link"
	default:
		kind = "non-text"
	}
	b.withhold(kind, rec)
}

// withhold notes an item of kind that is not relayed.
func (b *block) withhold(kind string, rec *Record) {
	rec.Withheld++
	if b.count == nil {
		b.count = map[string]int{}
	}
	if b.count[kind] == 0 {
		b.withheld = append(b.withheld, kind)
	}
	b.count[kind]++
}

// joined is b's texts sanitised together and capped to what is left of
// budget, followed by a note of what was withheld.
func (w *Wrapper) joined(b *block, budget *int, rec *Record) string {
	var parts []string
	if len(b.texts) > 0 {
		parts = append(parts, w.capped(strings.Join(b.texts, "\n"), budget, rec))
	}
	for _, kind := range b.withheld {
		if n := b.count[kind]; n == 1 {
			parts = append(parts, fmt.Sprintf("[airlock: %s content withheld]", kind))
		} else {
			parts = append(parts, fmt.Sprintf("[airlock: %d items of %s content withheld]", n, kind))
		}
	}
	return strings.Join(parts, "\n")
}

// text sanitises and caps untrusted text shown to the agent.
func (w *Wrapper) text(s string, max int) string {
	s = w.san.MarkdownString(s)
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "…"
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "")
	}
	return s
}

// failure is the text of an error the wrapped server answered: its
// words, sanitised and capped like its descriptions.
func (w *Wrapper) failure(err error) string { return w.text(err.Error(), maxDescription) }

// schema is a tool's input schema as offered to the agent: the wrapped
// server wrote it, so every string in it (descriptions, titles, examples,
// defaults) passes the sanitiser. Property names are kept: they are the
// arguments' names. A schema that is not JSON is offered as it was and
// refused by the SDK (see addTool).
func (w *Wrapper) schema(s any) any {
	data, err := json.Marshal(s)
	if err != nil || len(data) > maxOffered {
		return s // refused by its size, or as malformed
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return s
	}
	var clean func(v any) any
	clean = func(v any) any {
		switch x := v.(type) {
		case string:
			return w.san.MarkdownString(x)
		case []any:
			for i := range x {
				x[i] = clean(x[i])
			}
		case map[string]any:
			for k := range x {
				x[k] = clean(x[k])
			}
		}
		return v
	}
	return clean(v)
}

func errResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// Record is one audit record: a call and its decision, a listing of a
// tool, or the wrapped server's start or exit.
type Record struct {
	Time        time.Time `json:"time"`
	Event       string    `json:"event"` // list, call, prompt, read, start, exit
	Tool        string    `json:"tool,omitempty"`
	Prompt      string    `json:"prompt,omitempty"`
	Resource    string    `json:"resource,omitempty"` // its URI
	Decision    string    `json:"decision,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	ArgsDigest  string    `json:"args_digest,omitempty"`
	ArgsBytes   int       `json:"args_bytes,omitempty"`
	Approved    bool      `json:"approved,omitempty"`
	ResultBytes int       `json:"result_bytes,omitempty"`
	Truncated   bool      `json:"truncated,omitempty"`
	Findings    int       `json:"findings,omitempty"` // links and images neutralised
	Withheld    int       `json:"withheld,omitempty"` // non-text content items dropped
	DurationMS  int64     `json:"duration_ms,omitempty"`
}

// Event records a lifecycle event (the wrapped server's start).
func (w *Wrapper) Event(event, reason string) {
	w.audit(Record{Event: event, Reason: reason})
}

// A wrapped server decides how often its lists change: after its first
// listing (audited whole), past listAuditBurst listing records at most
// listAuditRate a second are written, and the rest counted.
const (
	listAuditRate  = 2
	listAuditBurst = maxListed
)

func (w *Wrapper) audit(r Record) {
	if w.cfg.Audit == nil {
		return
	}
	if r.Event == "list" || r.Event == "exit" {
		w.auditMu.Lock()
		if r.Event == "list" && w.watching.Load() && !w.listAudit.Allow() {
			w.suppressed++
			w.auditMu.Unlock()
			return
		}
		n := w.suppressed
		w.suppressed = 0
		w.auditMu.Unlock()
		if n > 0 {
			w.cfg.Audit(Record{Time: w.cfg.Now().UTC(), Event: "list", Decision: "suppressed",
				Reason: fmt.Sprintf("%d listing records were not written: the wrapped server changed its lists faster than they are audited", n)})
		}
	}
	r.Time = w.cfg.Now().UTC()
	w.cfg.Audit(r)
}

// JSONLines returns an audit function that writes each record to out as a
// line of JSON.
func JSONLines(out io.Writer) func(Record) {
	var mu sync.Mutex
	return func(r Record) {
		line, _ := json.Marshal(r)
		mu.Lock()
		defer mu.Unlock()
		_, _ = out.Write(append(line, '\n'))
	}
}

// Issue returns an approval token for calling tool with args on the server
// started as argv, by tenant (empty: Tenant), valid for ttl.
func Issue(s *approve.Signer, tenant string, argv []string, tool string, args json.RawMessage, ttl time.Duration, now time.Time) (string, error) {
	d, err := approve.OfToolCall(argv, tool, args)
	if err != nil {
		return "", err
	}
	if tenant == "" {
		tenant = Tenant
	}
	return s.Issue(approve.Claims{Digest: d, Tenant: tenant, Expires: now.Add(ttl)}), nil
}
