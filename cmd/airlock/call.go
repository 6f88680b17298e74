package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/internal/value"
	"github.com/airlock-sandbox/airlock/internal/wirebytes"
	"github.com/airlock-sandbox/airlock/wasm"
)

func init() {
	register(&command{
		name:    "call",
		summary: "call a function of a WASM tool with bytes in and bytes out (the plugin host)",
		usage:   "call [flags] TOOL.wasm FUNC [--input @FILE | --input TEXT | --input -]",
		run:     runCall,
	})
}

func runCall(ctx context.Context, e *env) int {
	c := commands["call"]
	fs := e.flags(c)
	input := fs.String("input", "", "the call's `INPUT`: @FILE reads a file, - reads stdin, anything else is the input itself")
	grant := fs.String("grant", "", "host functions to grant, a comma-separated `LIST` of: log, http_request, kv")
	// The limit flags are run's, by name, unit and meaning.
	wall := fs.Duration("wall", 0, "wall-clock limit `DURATION`, e.g. 2s (default: the plugin host's)")
	memoryMB := fs.Int64("memory", 0, "linear-memory limit in `MB` (MiB)")
	outputBytes := fs.Int64("output", 0, "output limit in `BYTES`")
	asJSON := fs.Bool("json", false, "print a JSON object with the output, log and error instead of the raw output")
	pos, rest, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	pos = append(pos, rest...)
	if len(pos) != 2 {
		return e.missingArgs("takes a TOOL.wasm and the FUNC to call")
	}
	if *wall < 0 {
		return e.fail(jobs.Invalid("limits.wall_ms", "must not be negative"))
	}
	wallMS := int64(0)
	if *wall > 0 {
		wallMS = max(wall.Milliseconds(), 1)
	}
	module, err := readLocal(pos[0])
	if err != nil {
		return e.fail(jobs.Invalid("", "reading the tool: %v", err))
	}
	in, err := readInput(*input, e.stdin)
	if err != nil {
		return e.fail(err)
	}
	var funcs []string
	for _, g := range strings.Split(*grant, ",") {
		if g = strings.TrimSpace(g); g != "" {
			funcs = append(funcs, g)
		}
	}
	host, err := wasm.NewHost(tierset.WasmConfig(tierset.Options{}))
	if err != nil {
		return e.fail(err)
	}
	defer host.Close()
	tool, err := host.Load(ctx, module, wasm.ToolConfig{
		Functions: funcs,
		Limits:    airlock.Limits{WallMS: wallMS, MemoryMB: *memoryMB, OutputBytes: *outputBytes},
		Log:       func(msg string) { fmt.Fprintln(e.stderr, msg) },
	})
	if err != nil {
		return e.fail(err)
	}
	defer tool.Close()
	rep, err := tool.Session("").Call(ctx, pos[1], in)
	if *asJSON {
		out := struct {
			Output   wirebytes.Text     `json:"output"` // bytes that are not UTF-8 as {"base64": ...}
			Stdout   wirebytes.Text     `json:"stdout,omitempty"`
			Stderr   wirebytes.Text     `json:"stderr,omitempty"`
			ExitCode int                `json:"exit_code,omitempty"`
			Stopped  *airlock.Stop      `json:"stopped,omitempty"`
			Error    *airlock.ErrorInfo `json:"error,omitempty"`
		}{Output: wirebytes.Text(rep.Output), Stdout: wirebytes.Text(rep.Stdout), Stderr: wirebytes.Text(rep.Stderr), ExitCode: rep.ExitCode}
		var res airlock.Result
		res.SetError(err)
		out.Stopped, out.Error = res.Stopped, res.Error
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
		return exitCode(err)
	}
	_, _ = e.stdout.Write(rep.Output)
	_, _ = io.WriteString(e.stderr, rep.Stdout+rep.Stderr)
	if err != nil {
		return e.fail(err)
	}
	return exitOK
}

// readInput reads a call's input: @FILE, - for stdin, or the text itself.
func readInput(spec string, stdin io.Reader) ([]byte, error) {
	switch {
	case spec == "-":
		b, err := io.ReadAll(io.LimitReader(stdin, value.MaxJobBytes+1))
		if err != nil {
			return nil, fmt.Errorf("reading stdin: %w", err)
		}
		return b, nil
	case strings.HasPrefix(spec, "@"):
		b, err := readLocal(spec[1:])
		if err != nil {
			return nil, jobs.Invalid("input", "%v", err)
		}
		return b, nil
	}
	return []byte(spec), nil
}
