package mcpwrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"

	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/egress/sanitize"
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
)

// Config configures a Wrapper. It is copied by New.
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
	// Signer checks approval tokens; nil refuses every call that needs one.
	Signer *approve.Signer
	// Audit receives one JSON line per call and decision; nil: none.
	Audit io.Writer
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Wrapper relays tools from an upstream client session. It is safe for
// concurrent use.
type Wrapper struct {
	cfg      Config
	up       *mcp.ClientSession
	san      *sanitize.Sanitizer
	limiters map[string]*rate.Limiter
	auditMu  sync.Mutex
}

// New returns a wrapper over the session to the wrapped server.
func New(cfg Config, up *mcp.ClientSession) (*Wrapper, error) {
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
	cfg.Argv = append([]string(nil), cfg.Argv...)
	w := &Wrapper{cfg: cfg, up: up, san: san, limiters: map[string]*rate.Limiter{}}
	for name, r := range cfg.Policy.Tools {
		if r.RatePerMinute > 0 {
			w.limiters[name] = rate.NewLimiter(rate.Every(time.Minute/time.Duration(r.RatePerMinute)), r.RatePerMinute)
		}
	}
	return w, nil
}

// Server lists the wrapped server's tools and returns an MCP server
// offering those the policy allows, each relayed through Call. Tool
// descriptions come from the untrusted server: they are sanitised and
// capped like results. The list is taken once (a later list_changed of
// the wrapped server is not followed).
func (w *Wrapper) Server(ctx context.Context) (*mcp.Server, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "airlock-mcp-wrap"}, nil)
	n := 0
	for tool, err := range w.up.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("listing the wrapped server's tools: %w", err)
		}
		if n++; n > 1000 {
			return nil, errors.New("listing the wrapped server's tools: more than 1000")
		}
		if !w.cfg.Policy.allowed(tool.Name) {
			w.audit(record{Event: "list", Tool: tool.Name, Decision: "hidden", Reason: "denied by policy"})
			continue
		}
		t := &mcp.Tool{Name: tool.Name, Title: tool.Title, InputSchema: tool.InputSchema, Annotations: tool.Annotations}
		t.Description = w.text(tool.Description, maxDescription)
		if w.cfg.Policy.Tools[tool.Name].Approval {
			t.Description += fmt.Sprintf("\n\n(airlock: each call needs an approval token in _meta %q, bound to its exact arguments)", ApprovalMeta)
		}
		if err := addTool(srv, t, w.handler(tool.Name)); err != nil {
			w.audit(record{Event: "list", Tool: tool.Name, Decision: "hidden", Reason: err.Error()})
			continue
		}
		w.audit(record{Event: "list", Tool: tool.Name, Decision: "listed"})
	}
	return srv, nil
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
	rec := record{Event: "call", Tool: tool, ArgsBytes: len(args)}
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
	d, err := approve.OfToolCall(w.cfg.Argv, tool, args)
	if err != nil {
		return refuse("invalid", err.Error())
	}
	rec.ArgsDigest = string(d)
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
		if _, err := w.cfg.Signer.Check(token, d, Tenant, start); err != nil {
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
		return refuse("failed", fmt.Sprintf("the wrapped server failed %s: %v", tool, err))
	}
	out := w.clean(res, &rec)
	rec.Decision = "relayed"
	w.audit(rec)
	return out
}

// clean keeps a result's text, sanitised and capped; any other content is
// replaced by a note, and structured content is dropped: the agent's model
// reads only what passed the sanitiser.
func (w *Wrapper) clean(res *mcp.CallToolResult, rec *record) *mcp.CallToolResult {
	out := &mcp.CallToolResult{IsError: res.IsError}
	budget := w.cfg.MaxResultBytes
	for _, c := range res.Content {
		tc, ok := c.(*mcp.TextContent)
		if !ok {
			out.Content = append(out.Content, &mcp.TextContent{Text: fmt.Sprintf("[airlock: %T content withheld]", c)})
			rec.Withheld++
			continue
		}
		rec.ResultBytes += len(tc.Text)
		text, findings := w.san.Markdown([]byte(tc.Text))
		rec.Findings += len(findings)
		s := string(text)
		if len(s) > budget {
			s = strings.ToValidUTF8(s[:budget], "") + fmt.Sprintf("\n[airlock: result truncated at %d bytes]", w.cfg.MaxResultBytes)
			rec.Truncated = true
		}
		budget -= min(len(s), budget)
		out.Content = append(out.Content, &mcp.TextContent{Text: s})
	}
	return out
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

func errResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// record is one audit line.
type record struct {
	Time        time.Time `json:"time"`
	Event       string    `json:"event"` // list, call, start, exit
	Tool        string    `json:"tool,omitempty"`
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

// Event logs a lifecycle event (the wrapped server's start and exit).
func (w *Wrapper) Event(event, reason string) {
	w.audit(record{Event: event, Reason: reason})
}

func (w *Wrapper) audit(r record) {
	if w.cfg.Audit == nil {
		return
	}
	r.Time = w.cfg.Now().UTC()
	line, _ := json.Marshal(r)
	w.auditMu.Lock()
	defer w.auditMu.Unlock()
	_, _ = w.cfg.Audit.Write(append(line, '\n'))
}

// Issue returns an approval token for calling tool with args on the server
// started as argv, valid for ttl.
func Issue(s *approve.Signer, argv []string, tool string, args json.RawMessage, ttl time.Duration, now time.Time) (string, error) {
	d, err := approve.OfToolCall(argv, tool, args)
	if err != nil {
		return "", err
	}
	return s.Issue(approve.Claims{Digest: d, Tenant: Tenant, Expires: now.Add(ttl)}), nil
}
