package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/egress/sanitize"
	"github.com/airlock-sandbox/airlock/escalate"
	"github.com/airlock-sandbox/airlock/internal/httpguard"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/value"
	"github.com/airlock-sandbox/airlock/internal/version"
	"github.com/airlock-sandbox/airlock/internal/wirebytes"
)

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
		Code  string         `json:"code" jsonschema:"a Starlark script; the global 'result' is returned"`
		Input map[string]any `json:"input,omitempty" jsonschema:"predeclared variables"`
		Entry string         `json:"entry,omitempty" jsonschema:"a function to call after the script ran"`
		Files wirebytes.Map  `json:"files,omitempty" jsonschema:"modules the script can load(), by name: text, or {\"base64\": ...}"`
		common
	}
	wasmInput struct {
		Module  string        `json:"module_base64" jsonschema:"the WebAssembly module, base64"`
		Entry   string        `json:"entry,omitempty" jsonschema:"an exported function to call instead of _start"`
		Args    []string      `json:"args,omitempty" jsonschema:"argv for a WASI command module"`
		Stdin   string        `json:"stdin,omitempty"`
		Files   wirebytes.Map `json:"files,omitempty" jsonschema:"files placed in the module's scratch directory, by relative path: text, or {\"base64\": ...} for other bytes"`
		Collect []string      `json:"collect,omitempty" jsonschema:"paths or glob patterns (path.Match), relative to the scratch directory, of files to return once the module ends (regular files only, 16 MiB in all)"`
		common
	}
	commandInput struct {
		Argv    []string      `json:"argv" jsonschema:"the program and its arguments"`
		Stdin   string        `json:"stdin,omitempty"`
		Files   wirebytes.Map `json:"files,omitempty" jsonschema:"files placed in the scratch directory, by relative path: text, or {\"base64\": ...} for other bytes"`
		Collect []string      `json:"collect,omitempty" jsonschema:"paths or glob patterns (path.Match), relative to the scratch directory, of files to return once the program ends (regular files only, 16 MiB in all)"`
		Image   string        `json:"image,omitempty" jsonschema:"the environment: a catalogue name such as python or minimal, or a reference pinned by digest (default: the operator's)"`
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
// output sanitiser. Output and files that are not UTF-8 text are
// {"base64": ...}, as in the JSON API.
type ToolOutput struct {
	Tier         string             `json:"tier"`
	Level        airlock.Level      `json:"level"`
	Decision     []string           `json:"decision,omitempty"`
	Value        any                `json:"value,omitempty"`
	Stdout       wirebytes.Text     `json:"stdout,omitempty"`
	Stderr       wirebytes.Text     `json:"stderr,omitempty"`
	ExitCode     *int               `json:"exit_code,omitempty"` // for programs (command, wasm)
	Files        wirebytes.Map      `json:"files,omitempty"`     // what collect named
	FilesSkipped []string           `json:"files_skipped,omitempty"`
	Stopped      *airlock.Stop      `json:"stopped,omitempty"`
	Error        *airlock.ErrorInfo `json:"error,omitempty"`
	Sanitized    []sanitize.Finding `json:"sanitized,omitempty"`
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

// mcpEnvelope is what a tool call may add to a job's bytes: the JSON-RPC
// envelope and the tool's own argument names.
const mcpEnvelope = 64 << 10

// MCPMaxRequest is the largest MCP message a tool call may be: a job of
// the largest size and its envelope. The HTTP transport refuses a larger
// body; a stdio transport should refuse a larger line.
const MCPMaxRequest = value.MaxJobBytes + mcpEnvelope

// MCPHandler serves MCP over streamable HTTP; each request is
// authenticated with the tenant's API key, as the JSON API is, and an MCP
// session is bound to the tenant that opened it (the SDK refuses a session
// ID presented with another tenant's key).
// A body must arrive within the server's body read timeout, as on the
// JSON API.
func (s *Server) MCPHandler() http.Handler { return withBodyDeadline(s.mcpHandler()) }

// mcpHandler is MCPHandler without the body deadline, which the server's
// own handler sets for every request.
func (s *Server) mcpHandler() http.Handler {
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
	}, &mcp.StreamableHTTPOptions{
		MaxRequestBodyBytes: MCPMaxRequest,
		// A client that goes away without DELETE would otherwise leave
		// its MCP session in memory for good. The sandbox sessions a
		// client opened are the tenant's and close on their own TTL.
		SessionTimeout: s.cfg.SessionTTL.or(10 * time.Minute),
	})
	verify := func(_ context.Context, key string, _ *http.Request) (*auth.TokenInfo, error) {
		i, ok := s.keys.find(key)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: s.tenants[i].Name}, nil
	}
	check := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A body is read under the large-body slots, as the JSON API's
		// are; a request the check will refuse is not waited for.
		var t *tenant
		if key, ok := bearer(r); ok {
			if i, found := s.keys.find(key); found {
				t = s.tenants[i]
			}
		}
		if t == nil {
			w.Header().Set("Connection", "close")
		}
		if t != nil && r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			// A POST without a session starts one: the tenant's are
			// bounded, as its API sessions are.
			done, err := s.mcpRoom(t)
			if err != nil {
				s.answer(w, airlock.Result{}, err)
				return
			}
			defer done()
		}
		w, release := s.gateMCP(w, r, t)
		defer release()
		check.ServeHTTP(w, r)
	})
}

// maxMCPSessions bounds a tenant's open MCP sessions on /mcp.
const maxMCPSessions = httpguard.MaxMCPSessions

// mcpRoom refuses a new MCP session for t while it has maxMCPSessions
// open (each is closed when idle for the session TTL, or by DELETE). The
// requests opening one count until done is called, once the request is
// served.
func (s *Server) mcpRoom(t *tenant) (done func(), err error) {
	srv, err := s.mcpFor(t)
	if err != nil {
		return nil, err
	}
	done, n, ok := t.mcpOpening.Enter(srv)
	if !ok {
		return nil, &overloaded{fmt.Sprintf("tenant %s has %d MCP sessions open or opening (the maximum is %d); end one with DELETE, or wait until one is idle for the session TTL", t.Name, n, maxMCPSessions), 5}
	}
	return done, nil
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
	srv := mcp.NewServer(&mcp.Implementation{Name: "airlock", Version: version.String()}, &mcp.ServerOptions{
		Instructions: "airlock runs untrusted code in the cheapest isolation boundary that still holds. Each tool result says which tier ran the job and why.",
	})
	srv.AddReceivingMiddleware(plainArgumentErrors, uniqueArgumentKeys)
	iso := isolationEnums{tiers: s.tierNames(t), situations: t.allowed}
	run := func(ctx context.Context, req *mcp.CallToolRequest, job airlock.Job, c common, ss *session) (*mcp.CallToolResult, any, error) {
		if err := isolationChosen(t, c); err != nil {
			return toolError(err)
		}
		job, err := normalize(job, c)
		if err != nil {
			return toolError(err)
		}
		var res airlock.Result
		if p := s.newProgress(ctx, req); p != nil {
			ctx = airlock.WithOutput(ctx, p.sink)
			defer p.finish() // before the result: the notifications precede it
		}
		rq := &runRequest{t: t, job: job, token: c.Approval, session: ss}
		if ss != nil {
			res, err = s.sessionRun(ctx, rq)
		} else {
			res, err = s.execute(ctx, rq)
		}
		return s.toolResult(job.Kind, res, err)
	}
	addTool[exprInput](srv, t, iso, "evaluate_expression", descExpr,
		func(ctx context.Context, req *mcp.CallToolRequest, in exprInput) (*mcp.CallToolResult, any, error) {
			input, err := exactInput(req, in.Input)
			if err != nil {
				return toolError(err)
			}
			return run(ctx, req, airlock.Job{Kind: airlock.KindExpr, Code: in.Expression, Input: input}, in.common, nil)
		})
	addTool[starlarkInput](srv, t, iso, "run_starlark", descStarlark,
		func(ctx context.Context, req *mcp.CallToolRequest, in starlarkInput) (*mcp.CallToolResult, any, error) {
			input, err := exactInput(req, in.Input)
			if err != nil {
				return toolError(err)
			}
			return run(ctx, req, airlock.Job{Kind: airlock.KindStarlark, Code: in.Code, Input: input, Entry: in.Entry, Files: in.Files}, in.common, nil)
		})
	addTool[wasmInput](srv, t, iso, "run_wasm", descWasm,
		func(ctx context.Context, req *mcp.CallToolRequest, in wasmInput) (*mcp.CallToolResult, any, error) {
			job := airlock.Job{Kind: airlock.KindWasm, Entry: in.Entry, Argv: in.Args, Stdin: in.Stdin, Files: in.Files, Collect: in.Collect}
			raw, _ := json.Marshal(in.Module)
			if err := json.Unmarshal(raw, &job.Module); err != nil {
				return toolError(jobs.Invalid("module_base64", "want base64: %v", err))
			}
			return run(ctx, req, job, in.common, nil)
		})
	// Command jobs carry the tenant's spawn setting: the model cannot ask
	// for the grant, the operator gives it or not.
	spawn := airlock.Grants{Spawn: t.MCPSpawn}
	addTool[commandInput](srv, t, iso, "run_command", commandDesc(t.MCPSpawn),
		func(ctx context.Context, req *mcp.CallToolRequest, in commandInput) (*mcp.CallToolResult, any, error) {
			return run(ctx, req, airlock.Job{Kind: airlock.KindCommand, Argv: in.Argv, Stdin: in.Stdin, Files: in.Files, Collect: in.Collect, Image: in.Image, Grants: spawn}, in.common, nil)
		})
	addTool[explainInput](srv, t, iso, "explain", descExplain,
		func(ctx context.Context, _ *mcp.CallToolRequest, in explainInput) (*mcp.CallToolResult, any, error) {
			err := isolationChosen(t, in.common)
			job := airlock.Job{Kind: airlock.Kind(in.Kind), Code: in.Code, Argv: in.Argv}
			if err == nil {
				job, err = normalize(job, in.common)
			}
			if err == nil {
				err = t.admit(&job) // the tenant's situation, as a run would have
			}
			if err != nil {
				return toolError(err)
			}
			x := s.router.Explain(&job)
			if x.Chosen != "" {
				// The tenant's rules for the chosen tier, as a run applies them.
				if err := t.onTier(s.chosen(x.Chosen), &job); err != nil {
					return toolError(err)
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(x.Lines(), "\n")}}}, x, nil
		})
	addTool[openInput](srv, t, iso, "open_session", descOpen,
		func(ctx context.Context, _ *mcp.CallToolRequest, in openInput) (*mcp.CallToolResult, any, error) {
			if err := isolationChosen(t, in.common); err != nil {
				return toolError(err)
			}
			// The router picks the tier for a command job of the tenant's
			// situation, as it would for run_command.
			job, err := normalize(airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Grants: spawn}, in.common)
			ttl, terr := sessionTTL(in.TTLSeconds)
			if err == nil {
				err = terr
			}
			var o openResponse
			if err == nil {
				o, err = s.openSession(ctx, t, "", &job, ttl)
			}
			if err != nil {
				return toolError(err)
			}
			out := sessionOutput{Session: o.ID, Tier: o.Tier, TTLSeconds: int64(time.Duration(o.TTL) / time.Second)}
			text := fmt.Sprintf("session %s on tier %s; it closes after %s idle", o.ID, o.Tier, time.Duration(o.TTL))
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
		})
	addTool[sessionRunInput](srv, t, iso, "run_in_session", descSessionRun,
		func(ctx context.Context, req *mcp.CallToolRequest, in sessionRunInput) (*mcp.CallToolResult, any, error) {
			ss := s.sessionOf(t, in.Session)
			if ss == nil {
				return toolError(jobs.Invalid("session", "unknown session %q", in.Session))
			}
			c := common{WallMS: in.WallMS, Approval: in.Approval}
			return run(ctx, req, airlock.Job{Kind: airlock.KindCommand, Argv: in.Argv, Stdin: in.Stdin, Files: in.Files, Collect: in.Collect, Grants: spawn}, c, ss)
		})
	addTool[closeInput](srv, t, iso, "close_session", descClose,
		func(ctx context.Context, _ *mcp.CallToolRequest, in closeInput) (*mcp.CallToolResult, any, error) {
			ss := s.sessionOf(t, in.Session)
			if ss == nil {
				return toolError(jobs.Invalid("session", "unknown session %q", in.Session))
			}
			if err := s.closeSession(ss); err != nil {
				return toolError(fmt.Errorf("closing session: %w", err))
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "closed " + ss.id}}}, sessionOutput{Session: ss.id, Tier: ss.tier}, nil
		})
	s.mcp.per[t] = srv
	return srv, nil
}

// Tool descriptions say what the program sees, what network it has and
// what comes back: a model chooses tools by them.
const (
	descExpr        = "Evaluate one expr-lang expression (arithmetic, comparisons, string, list and map functions) against the given input variables, in-process. No files or network; now() is the time the run started. Returns the value as JSON."
	descStarlark    = "Run a Starlark script (a small Python dialect: no imports, classes or exceptions) under a step and memory budget, in-process. No filesystem or network; load() reads only the modules given in files. Returns the global named result (or the entry function's return value) as JSON, and what the script printed."
	descWasm        = "Run a WebAssembly module (WASI preview 1) under a memory cap. It sees an in-memory scratch directory holding the files given, no host files and no network. Returns stdout, stderr, the exit code and the files collect names."
	descCommandHead = "Run a program (argv) in a Linux sandbox the router picks for this server's policy (namespaces with seccomp, gVisor or a microVM). The program sees a read-only system with the programs the operator installed, and a writable scratch directory, its working directory, holding the files given. "
	descNoSpawn     = "It may not start other programs: argv[0] runs, but what it executes (a shell running ls, say) fails with status 126. "
	descSpawn       = "It may start other programs (a shell script running ls, say). "
	descCommandTail = "It has no network: these tools grant no host. Returns stdout, stderr, the exit code and the files collect names."
	descExplain     = "Explain which tier would run a job and why each cheaper tier was passed over, without running anything."
	descOpen        = "Open a sandbox that keeps its scratch directory across run_in_session calls (installed packages, written files), for a conversation. It closes when idle for its TTL or on close_session. Returns the session id."
	descSessionRun  = "Run a program (argv) in a session opened by open_session: same sandbox and scratch directory as the session's earlier runs, no network. Returns stdout, stderr, the exit code and the files collect names."
	descClose       = "Close a session opened by open_session and destroy its sandbox."
)

type (
	openInput struct {
		TTLSeconds int64 `json:"ttl_seconds,omitempty" jsonschema:"close the session after this many idle seconds (default and maximum: the server's)"`
		common
	}
	sessionRunInput struct {
		Session  string        `json:"session" jsonschema:"the id open_session returned"`
		Argv     []string      `json:"argv" jsonschema:"the program and its arguments"`
		Stdin    string        `json:"stdin,omitempty"`
		Files    wirebytes.Map `json:"files,omitempty" jsonschema:"files placed in the scratch directory, by relative path: text, or {\"base64\": ...} for other bytes"`
		Collect  []string      `json:"collect,omitempty" jsonschema:"paths or glob patterns (path.Match), relative to the scratch directory, of files to return once the program ends"`
		WallMS   int64         `json:"wall_ms,omitempty" jsonschema:"wall-clock limit in milliseconds"`
		Approval string        `json:"approval,omitempty" jsonschema:"an approval token for a job the approval policy covers"`
	}
	closeInput struct {
		Session string `json:"session" jsonschema:"the id open_session returned"`
	}
	sessionOutput struct {
		Session    string             `json:"session,omitempty"`
		Tier       string             `json:"tier,omitempty"`
		TTLSeconds int64              `json:"ttl_seconds,omitempty"`
		Error      *airlock.ErrorInfo `json:"error,omitempty"`
	}
)

// isolationEnums are the values a tenant whose MCP clients may choose
// their isolation can name.
type isolationEnums struct {
	tiers      []string
	situations []airlock.Situation
}

// addTool registers a tool whose structured output is Out's schema made
// portable (see portable). Handlers return a ToolOutput, an error-only
// output, or another value of the tool's own.
func addTool[In any](srv *mcp.Server, t *tenant, iso isolationEnums, name, desc string, h mcp.ToolHandlerFor[In, any]) {
	var out *jsonschema.Schema
	switch name {
	case "explain":
		out = nil // the router's explanation; free-form
	case "open_session", "close_session":
		out = outputSchema[sessionOutput]()
	case "evaluate_expression", "run_starlark", "run_wasm": // a wasm entry function returns a value
		out = outputSchema[ToolOutput]()
	default:
		out = outputSchema[ToolOutput]()
		delete(out.Properties, "value") // programs return output, not a value
	}
	tool := &mcp.Tool{Name: name, Description: desc, InputSchema: inputSchema[In](t.MCPIsolation, iso)}
	if out != nil {
		tool.OutputSchema = out
	}
	mcp.AddTool(srv, tool, h)
}

// inputSchema is the tool's input schema inferred from In, without
// "situation" and "tier" unless the tenant's MCP clients may choose them:
// whoever the agent obeys must not lower its own boundary. The schema
// refuses unknown properties, so a call that passes them anyway fails.
func inputSchema[In any](isolation bool, iso isolationEnums) *jsonschema.Schema {
	sc := schemaFor[In]()
	if sit := sc.Properties["situation"]; sit != nil {
		if !isolation {
			delete(sc.Properties, "situation")
		} else {
			sit.Enum = nil
			for _, v := range iso.situations {
				sit.Enum = append(sit.Enum, string(v))
			}
		}
	}
	if f := sc.Properties["files"]; f != nil && f.AdditionalProperties != nil && f.AdditionalProperties.Type == "string" {
		f.AdditionalProperties = bytesSchema()
	}
	if tier := sc.Properties["tier"]; tier != nil {
		if !isolation {
			delete(sc.Properties, "tier")
		} else {
			tier.Enum = []any{escalate.TierAuto}
			for _, v := range iso.tiers {
				tier.Enum = append(tier.Enum, v)
			}
		}
	}
	return sc
}

// outputSchema is Out's schema with nothing required: a failed call's
// structured content holds only its error.
func outputSchema[Out any]() *jsonschema.Schema {
	sc := schemaFor[Out]()
	sc.Required = nil
	if v := sc.Properties["value"]; v != nil {
		// An inferred any is the bare schema true, which the MCP schema
		// does not allow where an object is expected.
		*v = jsonschema.Schema{Description: "the value the code produced", AnyOf: []*jsonschema.Schema{
			{Type: "string"}, {Type: "number"}, {Type: "boolean"},
			{Type: "array"}, {Type: "object", AdditionalProperties: &jsonschema.Schema{}}}}
	}
	for _, name := range []string{"stdout", "stderr"} {
		if p := sc.Properties[name]; p != nil {
			*p = *bytesSchema()
		}
	}
	if f := sc.Properties["files"]; f != nil {
		*f = jsonschema.Schema{Type: "object", Description: "the files collect named, by path", AdditionalProperties: bytesSchema()}
	}
	return sc
}

// bytesSchema is the wire form of bytes (see package wirebytes): a
// string for UTF-8 text, else an object holding base64.
func bytesSchema() *jsonschema.Schema {
	return &jsonschema.Schema{AnyOf: []*jsonschema.Schema{
		{Type: "string"},
		{Type: "object", Properties: map[string]*jsonschema.Schema{"base64": {Type: "string"}}, Required: []string{"base64"}},
	}}
}

// schemaFor infers T's schema and makes it portable: a field that may be
// null in Go (a slice, a map, a pointer) is inferred as the type pair
// [null, T], which clients that map schemas onto a single-type dialect
// reject; airlock never sends null for them, so each becomes T alone.
func schemaFor[T any]() *jsonschema.Schema {
	sc, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("MCP schema: %v", err)) // the types are fixed at compile time
	}
	var walk func(*jsonschema.Schema)
	walk = func(s *jsonschema.Schema) {
		if s == nil {
			return
		}
		if len(s.Types) == 2 && s.Types[0] == "null" {
			s.Type, s.Types = s.Types[1], nil
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		if s.AdditionalProperties != nil {
			walk(s.AdditionalProperties)
		}
	}
	walk(sc)
	return sc
}

// tierNames are the tiers t may use, for its MCP tools' "tier" enum.
func (s *Server) tierNames(t *tenant) []string {
	var names []string
	for _, tr := range s.router.Tiers() {
		if t.allowTier(tr.Name()) == nil {
			names = append(names, tr.Name())
		}
	}
	return names
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
		return job, jobs.Invalid("input", "%v", err)
	}
	return airlock.DecodeJob(data)
}

// exactInput is the call's "input" argument decoded again from the bytes
// the client sent, numbers as written: the SDK hands the handler values
// that went through float64, which turns 9007199254740993 into
// 9007199254740992. The SDK has validated the arguments; in is its
// decoding, used when the raw bytes hold no input.
func exactInput(req *mcp.CallToolRequest, in map[string]any) (map[string]any, error) {
	if req == nil || req.Params == nil || len(req.Params.Arguments) == 0 {
		return in, nil
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
		return in, nil
	}
	raw, ok := args["input"]
	if !ok {
		return in, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var exact map[string]any
	if err := dec.Decode(&exact); err != nil {
		return nil, jobs.Invalid("input", "want a JSON object: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return exact, nil
}

// sessionTTL is open_session's ttl_seconds as a duration: 0 is the
// server's maximum, a negative count is refused, and one too large for a
// duration stays too large (rather than wrapping around to a small or
// negative one).
func sessionTTL(seconds int64) (time.Duration, error) {
	switch {
	case seconds < 0:
		return 0, jobs.Invalid("ttl_seconds", "must not be negative")
	case seconds > int64(math.MaxInt64/time.Second):
		return math.MaxInt64, nil
	}
	return time.Duration(seconds) * time.Second, nil
}

// uniqueArgumentKeys refuses a tool call whose arguments name a member
// twice, at any depth: the SDK, like encoding/json, keeps the last, where
// a log or a proxy between the model and the server may read the first.
func uniqueArgumentKeys(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if call, ok := req.(*mcp.CallToolRequest); ok && call.Params != nil {
			if dup := value.FirstDuplicateKey(call.Params.Arguments); dup != nil {
				res, out, _ := toolError(jobs.Invalid(dup.Path, "given twice"))
				res.StructuredContent = out
				return res, nil
			}
		}
		return next(ctx, method, req)
	}
}

// plainArgumentErrors rewrites the SDK's refusal of arguments it could not
// decode, which names Go types ("cannot unmarshal \"1e400\" into Go struct
// field map[string]interface {}...input.x of type float64"), in the
// words of the wire: what could not be read, and where.
func plainArgumentErrors(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		r, ok := res.(*mcp.CallToolResult)
		if err != nil || !ok || !r.IsError || len(r.Content) != 1 {
			return res, err
		}
		if tc, ok := r.Content[0].(*mcp.TextContent); ok {
			tc.Text = plainGoDecodeError(tc.Text)
		}
		return res, err
	}
}

func plainGoDecodeError(msg string) string {
	_, rest, ok := strings.Cut(msg, "cannot unmarshal ")
	into := strings.Index(rest, " into Go ")
	of := strings.LastIndex(rest, " of type ")
	if !ok || into < 0 || of < into {
		return msg
	}
	where := rest[into:of]
	if where == " into Go value" { // the arguments as a whole
		return fmt.Sprintf("invalid arguments: want a JSON object, not %s", rest[:into])
	}
	if i := strings.LastIndexAny(where, "}]"); i >= 0 {
		where = where[i+1:]
	} else {
		where = where[strings.LastIndex(where, " ")+1:]
	}
	where = strings.TrimPrefix(where, ".")
	if where == "" {
		where = "the arguments"
	}
	return fmt.Sprintf("invalid arguments: %s at %s cannot be read (a number beyond what JSON numbers hold here, or a value of the wrong type)", rest[:into], where)
}

// errorOutput is a failed call's structured content: the error alone.
type errorOutput struct {
	Error *airlock.ErrorInfo `json:"error"`
}

func toolError(err error) (*mcp.CallToolResult, any, error) {
	msg := clipMessage(err.Error())
	info := &airlock.ErrorInfo{Kind: airlock.KindOf(err), Message: msg}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, errorOutput{info}, nil
}

// toolResult is a run's answer: the text a model reads (the tier and what
// the program produced; the router's reasons stay in the structured
// content) and the structured ToolOutput.
func (s *Server) toolResult(kind airlock.Kind, res airlock.Result, err error) (*mcp.CallToolResult, any, error) {
	if res.Tier == "" && err != nil {
		return toolError(err)
	}
	out := ToolOutput{Tier: res.Tier, Level: res.Level, Decision: res.Decision, Stopped: res.Stopped, Error: res.Error}
	if (kind == airlock.KindCommand || kind == airlock.KindWasm) && res.Stopped == nil && res.Error == nil {
		// Only a program that ran to its end has a status: a stopped or
		// refused one reports no exit code rather than a 0 it never returned.
		out.ExitCode = &res.ExitCode
	}
	var f1, f2, f3 []sanitize.Finding
	var stdout, stderr string
	stdout, f1 = s.clean(res.Stdout)
	stderr, f2 = s.clean(res.Stderr)
	out.Stdout, out.Stderr = wirebytes.Text(stdout), wirebytes.Text(stderr)
	out.Value, f3 = s.cleanValue(res.Value, 0)
	out.Sanitized = append(append(f1, f2...), f3...)
	// An error's message and a stop's detail may quote the program (a
	// Starlark fail(), a runtime error): cleaned as its output is, in
	// the structured content too.
	if res.Error != nil {
		e := *res.Error
		var f []sanitize.Finding
		e.Message, f = s.clean(e.Message)
		out.Error, out.Sanitized = &e, append(out.Sanitized, f...)
	}
	if res.Stopped != nil {
		st := *res.Stopped
		var f []sanitize.Finding
		st.Detail, f = s.clean(st.Detail)
		out.Stopped, out.Sanitized = &st, append(out.Sanitized, f...)
	}
	// A file's name is the program's to choose, like its output: a file
	// whose name the sanitiser would change is withheld, named (as
	// sanitised) among the skipped ones.
	files := map[string]string{}
	for name, data := range res.Files {
		clean, f := s.clean(name)
		out.Sanitized = append(out.Sanitized, f...)
		if clean != name {
			out.FilesSkipped = append(out.FilesSkipped, clean+": withheld: its name holds a link to a host that is not allowed")
			continue
		}
		files[name] = data
		if out.Files == nil {
			out.Files = make(wirebytes.Map, len(res.Files))
		}
		out.Files[name], f = s.clean(data)
		out.Sanitized = append(out.Sanitized, f...)
	}
	for _, skipped := range res.FilesSkipped {
		clean, f := s.clean(skipped)
		out.Sanitized = append(out.Sanitized, f...)
		out.FilesSkipped = append(out.FilesSkipped, clean)
	}
	slices.Sort(out.FilesSkipped)
	var text strings.Builder
	fmt.Fprintf(&text, "tier: %s (level %d)\n", out.Tier, out.Level)
	if out.Value != nil {
		v, _ := json.Marshal(out.Value)
		fmt.Fprintf(&text, "value: %s\n", v)
	}
	for _, o := range []struct{ name, s string }{{"stdout", stdout}, {"stderr", stderr}} {
		switch {
		case o.s == "":
		case !utf8.ValidString(o.s):
			fmt.Fprintf(&text, "%s: %d bytes that are not UTF-8 text (base64 in the structured content)\n", o.name, len(o.s))
		default:
			fmt.Fprintf(&text, "%s:\n%s\n", o.name, o.s)
		}
	}
	for _, name := range value.SortedKeys(files) {
		fmt.Fprintf(&text, "file %s: %d bytes\n", name, len(files[name]))
	}
	for _, skipped := range out.FilesSkipped {
		fmt.Fprintf(&text, "not collected: %s\n", skipped)
	}
	if out.ExitCode != nil && *out.ExitCode != 0 {
		fmt.Fprintf(&text, "exit code: %d\n", *out.ExitCode)
	}
	switch {
	case out.Stopped != nil:
		fmt.Fprintf(&text, "stopped: %s %s\n", out.Stopped.Reason, out.Stopped.Detail)
	case out.Error != nil:
		fmt.Fprintf(&text, "error: %s: %s\n", out.Error.Kind, out.Error.Message)
	}
	// The parts were sanitised each alone; a client shows them as one
	// document, where a reference in one part (the value's "![p][r]")
	// takes its link from another (a "[r]: URL" line of stdout). The
	// whole text is sanitised again, as it is shown.
	shown, f := s.clean(text.String())
	out.Sanitized = append(out.Sanitized, f...)
	text.Reset()
	text.WriteString(shown)
	if len(out.Sanitized) > 0 {
		fmt.Fprintf(&text, "note: %d link(s) to hosts that are not allowed were neutralised\n", len(out.Sanitized))
	}
	// The structured content is marshalled here, not by the SDK, which
	// would pass it through float64 to check it against the output schema
	// and round an integer beyond 2^53 that the text shows exactly.
	structured, err := json.Marshal(out)
	if err != nil {
		return toolError(fmt.Errorf("encoding the result: %w", err))
	}
	return &mcp.CallToolResult{
		IsError:           out.Stopped != nil || out.Error != nil || res.ExitCode != 0,
		Content:           []mcp.Content{&mcp.TextContent{Text: text.String()}},
		StructuredContent: json.RawMessage(structured),
	}, nil, nil
}

// clean sanitises text; bytes that are not UTF-8 text are returned as they
// are (as base64 they hold no link a client would show).
func (s *Server) clean(text string) (string, []sanitize.Finding) {
	if text == "" || !utf8.ValidString(text) {
		return text, nil
	}
	out, f := s.mcp.san.Markdown([]byte(text))
	return string(out), f
}

// cleanValue sanitises every string inside a value.
func (s *Server) cleanValue(v any, depth int) (any, []sanitize.Finding) {
	if depth > value.MaxDepth {
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

// commandDesc is run_command's description for a tenant with or without
// the spawn grant.
func commandDesc(spawn bool) string {
	if spawn {
		return descCommandHead + descSpawn + descCommandTail
	}
	return descCommandHead + descNoSpawn + descCommandTail
}
