package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/jobs"
)

// completeCmd is the hidden command the completion scripts call with the
// words typed so far; it prints the candidates for the last one.
const completeCmd = "__complete"

func init() {
	register(&command{
		name:    "completion",
		summary: "print a shell completion script (bash, zsh or fish)",
		usage: `completion bash|zsh|fish
       bash: source <(airlock completion bash)    zsh: source <(airlock completion zsh)
       fish: airlock completion fish | source`,
		run: completionCmd,
	})
}

func completionCmd(_ context.Context, e *env) int {
	fs := e.flags(commands["completion"])
	pos, _, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return e.fail(jobs.Invalid("", "completion takes one shell: bash, zsh or fish"))
	}
	script, ok := completionScripts[pos[0]]
	if !ok {
		return e.fail(jobs.Invalid("", "no completion for shell %q: bash, zsh or fish", pos[0]))
	}
	fmt.Fprint(e.stdout, script)
	return exitOK
}

// The scripts ask the binary for candidates, so they never fall out of
// step with its commands and flags; where it has none (a file argument),
// the shell completes file names.
var completionScripts = map[string]string{
	"bash": `_airlock() {
	local IFS=$'\n' out
	out=$(airlock ` + completeCmd + ` "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)
	if [ -n "$out" ]; then
		COMPREPLY=($(compgen -W "$out" -- "${COMP_WORDS[COMP_CWORD]}"))
	else
		COMPREPLY=($(compgen -f -- "${COMP_WORDS[COMP_CWORD]}"))
	fi
}
complete -o default -F _airlock airlock
`,
	"zsh": `#compdef airlock
_airlock() {
	local -a cands
	cands=("${(@f)$(airlock ` + completeCmd + ` "${(@)words[2,CURRENT]}" 2>/dev/null)}")
	if [[ -n "${cands[1]}" ]]; then
		compadd -- "${cands[@]}"
	else
		_files
	fi
}
compdef _airlock airlock
`,
	"fish": `function __airlock_complete
	set -l words (commandline -opc) (commandline -ct)
	airlock ` + completeCmd + ` $words[2..-1] 2>/dev/null
end
complete -c airlock -a '(__airlock_complete)'
`,
}

// subcommands are the words that follow a command with subcommands
// (TestCompletion checks each against the command's usage).
var subcommands = map[string][]string{
	"image":   {"build", "import", "pull", "rm"},
	"account": {"add", "list", "set", "start", "stop", "rm", "serve"},
	"audit":   {"verify"},
}

// complete prints the candidates for the last of words (the word being
// typed, possibly empty): command names first, then a command's flags.
func complete(ctx context.Context, words []string, w io.Writer) {
	if len(words) == 0 {
		words = []string{""}
	}
	cur := words[len(words)-1]
	var cands []string
	switch {
	case len(words) == 1:
		for n := range commands {
			cands = append(cands, n)
		}
		cands = append(cands, "help", "version")
	case words[0] == "help" && len(words) == 2:
		for n := range commands {
			cands = append(cands, n)
		}
	case len(words) == 2 && !strings.HasPrefix(cur, "-") && subcommands[words[0]] != nil:
		cands = append([]string(nil), subcommands[words[0]]...)
	case strings.HasPrefix(cur, "-"):
		c, ok := commands[words[0]]
		if !ok {
			return
		}
		if c.run == nil { // airlock-full lists a heavy command's flags
			_ = execFull(words[0], append([]string{completeCmd}, words...))
			return
		}
		// The command's own flag set, listed by parse before the command
		// does anything (a command with subcommands lists the named one's).
		var flags bytes.Buffer
		c.run(ctx, &env{args: words[1 : len(words)-1], stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, listFlags: &flags})
		cands = strings.Fields(flags.String())
	}
	sort.Strings(cands)
	for _, c := range cands {
		if strings.HasPrefix(c, cur) {
			fmt.Fprintln(w, c)
		}
	}
}
