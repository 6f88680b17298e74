package main

// The commands that link the HTTP server, the MCP SDK, the Markdown
// sanitiser or the bench's charts and peers. Their packages' initialisers
// cost every start of a binary that links them, a third of the CLI's own
// start, so a lean build (-tags lean, what make build installs as airlock)
// leaves them out: it lists them, and runs them by executing airlock-full,
// the build with every command, found beside it (see full.go). In a full
// build each command's file gives it its run function.
var heavyCommands = registered(
	&command{
		name:    "audit",
		summary: "check the hash chain of an audit trail across its files (audit verify), naming the first removed, edited or malformed record",
		usage:   "audit verify FILE...     FILE: audit files in the order written (rotated files oldest first, then the current one)",
	},
	&command{
		name:    "bench",
		summary: "measure each tier's start-up latency, cold and warm, beside the raw engines underneath",
		usage:   "bench [--tiers a,b] [--iterations N] [--budget DURATION] [--timeout DURATION] [--json] [--out DIR] [--compare OLD.json] [--note TEXT]",
	},
	&command{
		name:    "corpus",
		summary: "run every attack and benign case (tiers, egress, output, approvals) in bounded children; non-zero on an escape",
		usage:   "corpus [--tiers a,b] [--areas a,b] [--cases id,id] [--timeout DURATION] [--memory MB] [--parallel N] [--json] [--verbose]",
	},
	&command{
		name:    "mcp",
		summary: "serve the airlock tools to an MCP client over stdio (default) or streamable HTTP",
		usage: `mcp [--config FILE] [--tenant NAME]     MCP over stdin/stdout, running jobs as the tenant
       airlock mcp --allow-spawn                  the local tenant's command jobs may start other programs
       airlock mcp --config FILE --http ADDR      MCP over streamable HTTP at ADDR/mcp (API keys as for serve)`,
	},
	&command{
		name:    "mcp-wrap",
		summary: "run a third-party MCP server in a sandbox and relay its tools to an MCP client (stdio or loopback HTTP), under a per-tool policy",
		usage: `mcp-wrap [flags] -- CMD [ARGS...]   start CMD attached in a sandbox (default: public, gVisor) and serve its tools over stdio
       airlock mcp-wrap --image node --allow-read DIR -- node DIR/server.js /data
       airlock mcp-wrap --http 127.0.0.1:8931 --http-key FILE [flags] -- CMD [ARGS...]   serve streamable HTTP on loopback instead
       airlock mcp-wrap --approval-key FILE --approve TOOL --args JSON -- CMD [ARGS...]   print an approval token for one call`,
	},
	&command{
		name:    "replay",
		summary: "re-run an audited job (in-process, or a command that ran in an image) with its recorded clock, seed and image, and check the output matches",
		usage:   `replay [--json] [--images DIR] [--allow-read PATH]... [--policy FILE] RECORD     RECORD: a file holding one audit line, FILE:N for line N of an audit trail, or - for stdin`,
	},
	&command{
		name:    "sanitize",
		summary: "neutralise links and images to hosts not on the allowlist (markdown on stdin, markdown on stdout)",
		usage:   "sanitize [--allow HOST]... [--relax HOST]... [--html] [--report] [HOST...]",
	},
	&command{
		name:    "serve",
		summary: "serve the HTTP API (/v1, /metrics, /healthz) and MCP over streamable HTTP (/mcp)",
		usage: `serve --config FILE [--listen ADDR] [--process-pool N] [--gvisor-pool N] [--microvm-warm MODE] [--microvm-pool N]
       airlock serve --new-key    print a fresh API key and the hash to put in the configuration`,
	},
)

// registered adds cs to the commands while the package's variables are
// initialised, before any init function runs.
func registered(cs ...*command) []*command {
	for _, c := range cs {
		register(c)
	}
	return cs
}
