package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress/sanitize"
)

// Version is reported to MCP clients.
const Version = "v1"

// The MCP tools' inputs. Every run goes through the same path as POST
// /v1/run: the tenant's rules and quotas, the router, approvals and the
// audit trail.
type (
	common struct {
		Situation string `json:"situation,omitempty" jsonschema:"who wrote the code: expression, internal, public (default), multi-tenant or credentials"`
		Tier      string `json:"tier,omitempty" jsonschema:"run on this tier instead of letting the router choose"`
		WallMS    int64  `json:"wall_ms,omitempty" jsonschema:"wall-clock limit in milliseconds"`
		Approval  string `json:"approval,omitempty" jsonschema:"an approval token for a job the approval policy covers"`
	}
	exprInput struct {
		Expression string         `json:"expression" jsonschema:"an expr-lang expression, e.g. sum(items) / len(items)"`
		Input      map[string]any `json:"input,omitempty" jsonschema:"variables the expression can read"`
		common
	}
	starlarkInput struct {
		Code  string            `json:"code" jsonschema:"a Starlark script; the global 'result' is returned"`
		Input map[string]any    `json:"input,omitempty" jsonschema:"predeclared variables"`
		Entry string            `json:"entry,omitempty" jsonschema:"a function to call after the script ran"`
		Files map[string]string `json:"files,omitempty" jsonschema:"modules the script can load(), by name"`
		common
	}
	wasmInput struct {
		Module string   `json:"module_base64" jsonschema:"the WebAssembly module, base64"`
		Entry  string   `json:"entry,omitempty" jsonschema:"an exported function to call instead of _start"`
		Args   []string `json:"args,omitempty" jsonschema:"argv for a WASI command module"`
		Stdin  string   `json:"stdin,omitempty"`
		common
	}
	commandInput struct {
		Argv  []string          `json:"argv" jsonschema:"the program and its arguments"`
		Stdin string            `json:"stdin,omitempty"`
		Files map[string]string `json:"files,omitempty" jsonschema:"files placed in the scratch directory, by relative path"`
		common
	}
	explainInput struct {
		Kind string   `json:"kind" jsonschema:"expr, starlark, wasm or command"`
		Code string   `json:"code,omitempty"`
		Argv []string `json:"argv,omitempty"`
		common
	}
)

// ToolOutput is what every run tool returns: which tier ran the job and
// why, and what it produced, with URLs in the output neutralised by the
// output sanitiser.
type ToolOutput struct {
	Tier      string             `json:"tier"`
	Level     airlock.Level      `json:"level"`
	Decision  []string           `json:"decision,omitempty"`
	Value     any                `json:"value,omitempty"`
	Stdout    string             `json:"stdout,omitempty"`
	Stderr    string             `json:"stderr,omitempty"`
	ExitCode  int                `json:"exit_code"`
	Stopped   *airlock.Stop      `json:"stopped,omitempty"`
	Error     *airlock.ErrorInfo `json:"error,omitempty"`
	Sanitized []sanitize.Finding `json:"sanitized,omitempty"`
}

// mcpServers holds one MCP server per tenant, built on first use.
type mcpServers struct {
	mu  sync.Mutex
	per map[*tenant]*mcp.Server
	san *sanitize.Sanitizer
}

// MCP returns the MCP server whose tools run jobs as the named tenant (for
// stdio, where the process's user is the tenant).
func (s *Server) MCP(tenantName string) (*mcp.Server, error) {
	for _, t := range s.tenants {
		if t.Name == tenantName {
			return s.mcpFor(t)
		}
	}
	return nil, fmt.Errorf("no tenant named %q", tenantName)
}

// MCPHandler serves MCP over streamable HTTP; each request is
// authenticated with the tenant's API key, as the JSON API is, and an MCP
// session is bound to the tenant that opened it (the SDK refuses a session
// ID presented with another tenant's key).
func (s *Server) MCPHandler() http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		info := auth.TokenInfoFromContext(r.Context())
		if info == nil {
			return nil
		}
		for _, t := range s.tenants {
			if t.Name == info.UserID {
				srv, err := s.mcpFor(t)
				if err != nil {
					return nil
				}
				return srv
			}
		}
		return nil
	}, &mcp.StreamableHTTPOptions{MaxRequestBodyBytes: airlock.MaxJobBytes * 2})
	verify := func(_ context.Context, key string, _ *http.Request) (*auth.TokenInfo, error) {
		i, ok := s.keys.find(key)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: s.tenants[i].Name}, nil
	}
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
}

func (s *Server) mcpFor(t *tenant) (*mcp.Server, error) {
	s.mcp.mu.Lock()
	defer s.mcp.mu.Unlock()
	if srv := s.mcp.per[t]; srv != nil {
		return srv, nil
	}
	if s.mcp.san == nil {
		san, err := sanitize.New(s.cfg.OutputHosts...)
		if err != nil {
			return nil, fmt.Errorf("output hosts: %w", err)
		}
		s.mcp.san = san
		s.mcp.per = map[*tenant]*mcp.Server{}
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "airlock", Version: Version}, &mcp.ServerOptions{
		Instructions: "airlock runs untrusted code in the cheapest isolation boundary that still holds. Each tool result says which tier ran the job and why.",
	})
	run := func(ctx context.Context, req *mcp.CallToolRequest, job airlock.Job, c common) (*mcp.CallToolResult, ToolOutput, error) {
		if err := isolationChosen(t, c); err != nil {
			return toolError(err)
		}
		return s.mcpRun(ctx, t, req, job, c)
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "evaluate_expression", InputSchema: inputSchema[exprInput](t.MCPIsolation), Description: "Evaluate an expression (expr-lang) against input variables. No I/O; microseconds."},
		func(ctx context.Context, req *mcp.CallToolRequest, in exprInput) (*mcp.CallToolResult, ToolOutput, error) {
			return run(ctx, req, airlock.Job{Kind: airlock.KindExpr, Code: in.Expression, Input: in.Input}, in.common)
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "run_starlark", InputSchema: inputSchema[starlarkInput](t.MCPIsolation), Description: "Run a Starlark (Python-like) script with a step budget; no filesystem or network."},
		func(ctx context.Context, req *mcp.CallToolRequest, in starlarkInput) (*mcp.CallToolResult, ToolOutput, error) {
			return run(ctx, req, airlock.Job{Kind: airlock.KindStarlark, Code: in.Code, Input: in.Input, Entry: in.Entry, Files: in.Files}, in.common)
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "run_wasm", InputSchema: inputSchema[wasmInput](t.MCPIsolation), Description: "Run a WebAssembly module (WASI) with a memory cap and no host access unless granted."},
		func(ctx context.Context, req *mcp.CallToolRequest, in wasmInput) (*mcp.CallToolResult, ToolOutput, error) {
			job := airlock.Job{Kind: airlock.KindWasm, Entry: in.Entry, Argv: in.Args, Stdin: in.Stdin}
			raw, _ := json.Marshal(in.Module)
			if err := json.Unmarshal(raw, &job.Module); err != nil {
				return toolError(airlock.Invalid("module_base64", "want base64: %v", err))
			}
			return run(ctx, req, job, in.common)
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "run_command", InputSchema: inputSchema[commandInput](t.MCPIsolation), Description: "Run a program in an OS sandbox; the router picks the tier (process, gVisor or microVM) from the situation."},
		func(ctx context.Context, req *mcp.CallToolRequest, in commandInput) (*mcp.CallToolResult, ToolOutput, error) {
			return run(ctx, req, airlock.Job{Kind: airlock.KindCommand, Argv: in.Argv, Stdin: in.Stdin, Files: in.Files}, in.common)
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "explain", InputSchema: inputSchema[explainInput](t.MCPIsolation), Description: "Explain which tier the router would choose for a job, and why each cheaper tier was passed over."},
		func(ctx context.Context, req *mcp.CallToolRequest, in explainInput) (*mcp.CallToolResult, any, error) {
			err := isolationChosen(t, in.common)
			job := airlock.Job{Kind: airlock.Kind(in.Kind), Code: in.Code, Argv: in.Argv}
			if err == nil {
				job, err = normalize(job, in.common)
			}
			if err == nil {
				err = t.admit(&job) // the tenant's situation, as a run would have
			}
			if err != nil {
				r, _, _ := toolError(err)
				return r, nil, nil
			}
			x := s.router.Explain(&job)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(x.Lines(), "\n")}}}, x, nil
		})
	s.mcp.per[t] = srv
	return srv, nil
}

// inputSchema is the tool's input schema inferred from In, without
// "situation" and "tier" unless the tenant's MCP clients may choose them:
// whoever the agent obeys must not lower its own boundary. The schema
// refuses unknown properties, so a call that passes them anyway fails.
func inputSchema[In any](isolation bool) *jsonschema.Schema {
	sc, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("MCP input schema: %v", err)) // the types are fixed at compile time
	}
	if !isolation {
		delete(sc.Properties, "situation")
		delete(sc.Properties, "tier")
	}
	return sc
}

// isolationChosen refuses a call that names a situation or tier when the
// tenant's MCP clients may not (a client that skips schema validation).
func isolationChosen(t *tenant, c common) error {
	if !t.MCPIsolation && (c.Situation != "" || c.Tier != "") {
		return &airlock.NotAdmitted{Reason: fmt.Sprintf("tenant %s's MCP tools run as situation %s; they take no situation or tier", t.Name, t.defSit)}
	}
	return nil
}

// normalize applies the common fields and sends the job through the
// strict wire decoder, so a tool call and POST /v1/run see the same job.
func normalize(job airlock.Job, c common) (airlock.Job, error) {
	job.Situation, job.Tier, job.Limits.WallMS = airlock.Situation(c.Situation), c.Tier, c.WallMS
	data, err := json.Marshal(job)
	if err != nil {
		return job, airlock.Invalid("input", "%v", err)
	}
	return airlock.DecodeJobBytes(data)
}

func toolError(err error) (*mcp.CallToolResult, ToolOutput, error) {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, ToolOutput{Error: &airlock.ErrorInfo{Kind: airlock.KindOf(err), Message: err.Error()}}, nil
}

func (s *Server) mcpRun(ctx context.Context, t *tenant, _ *mcp.CallToolRequest, job airlock.Job, c common) (*mcp.CallToolResult, ToolOutput, error) {
	job, err := normalize(job, c)
	if err != nil {
		return toolError(err)
	}
	res, err := s.execute(ctx, &runRequest{t: t, job: job, token: c.Approval})
	if res.Tier == "" && err != nil {
		return toolError(err)
	}
	out := ToolOutput{Tier: res.Tier, Level: res.Level, Decision: res.Decision, ExitCode: res.ExitCode, Stopped: res.Stopped, Error: res.Error}
	var f1, f2, f3 []sanitize.Finding
	out.Stdout, f1 = s.clean(res.Stdout)
	out.Stderr, f2 = s.clean(res.Stderr)
	out.Value, f3 = s.cleanValue(res.Value, 0)
	out.Sanitized = append(append(f1, f2...), f3...)
	var text strings.Builder
	fmt.Fprintf(&text, "tier: %s (level %d)\n", out.Tier, out.Level)
	if len(out.Decision) > 0 {
		fmt.Fprintf(&text, "why: %s\n", strings.Join(out.Decision, "; "))
	}
	if out.Value != nil {
		v, _ := json.Marshal(out.Value)
		fmt.Fprintf(&text, "value: %s\n", v)
	}
	if out.Stdout != "" {
		fmt.Fprintf(&text, "stdout:\n%s\n", out.Stdout)
	}
	if out.Stderr != "" {
		fmt.Fprintf(&text, "stderr:\n%s\n", out.Stderr)
	}
	if out.ExitCode != 0 {
		fmt.Fprintf(&text, "exit code: %d\n", out.ExitCode)
	}
	switch {
	case out.Stopped != nil:
		fmt.Fprintf(&text, "stopped: %s %s\n", out.Stopped.Reason, out.Stopped.Detail)
	case out.Error != nil:
		fmt.Fprintf(&text, "error: %s: %s\n", out.Error.Kind, out.Error.Message)
	}
	if len(out.Sanitized) > 0 {
		fmt.Fprintf(&text, "note: %d link(s) to hosts that are not allowed were neutralised\n", len(out.Sanitized))
	}
	return &mcp.CallToolResult{
		IsError: out.Stopped != nil || out.Error != nil || out.ExitCode != 0,
		Content: []mcp.Content{&mcp.TextContent{Text: text.String()}},
	}, out, nil
}

func (s *Server) clean(text string) (string, []sanitize.Finding) {
	if text == "" {
		return text, nil
	}
	out, f := s.mcp.san.Markdown([]byte(text))
	return string(out), f
}

// cleanValue sanitises every string inside a value.
func (s *Server) cleanValue(v any, depth int) (any, []sanitize.Finding) {
	if depth > airlock.MaxValueDepth {
		return nil, nil
	}
	switch x := v.(type) {
	case string:
		return s.clean(x)
	case []any:
		var all []sanitize.Finding
		out := make([]any, len(x))
		for i, e := range x {
			var f []sanitize.Finding
			out[i], f = s.cleanValue(e, depth+1)
			all = append(all, f...)
		}
		return out, all
	case map[string]any:
		var all []sanitize.Finding
		out := make(map[string]any, len(x))
		for k, e := range x {
			var f []sanitize.Finding
			out[k], f = s.cleanValue(e, depth+1)
			all = append(all, f...)
		}
		return out, all
	}
	return v, nil
}
