package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// TestCompletion: the candidates for commands, subcommands and flags come
// from the binary's own commands, and bash completes with the script.
func TestCompletion(t *testing.T) {
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"ru"}, "run\n"},
		{[]string{"help", "se"}, "serve\n"},
		{[]string{"image", "p"}, "pull\n"},
		{[]string{"account", "s"}, "serve\nset\nstart\nstop\n"},
		{[]string{"run", "--allow-s"}, "--allow-spawn\n"},
		{[]string{"eval", "--inp"}, "--input\n"},
		{[]string{"nonesuch", "--x"}, ""},
		{[]string{"run", "script.py", ""}, ""}, // a file: the shell's
	} {
		var b strings.Builder
		complete(t.Context(), c.words, &b)
		if b.String() != c.want {
			t.Errorf("complete %q = %q, want %q", c.words, b.String(), c.want)
		}
	}
	for cmd, subs := range subcommands {
		for _, s := range subs {
			if !strings.Contains(commands[cmd].usage, " "+s+" ") {
				t.Errorf("%s's usage does not name its subcommand %s", cmd, s)
			}
		}
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if out, errOut, code := run(t, "", "completion", shell); code != exitOK || !strings.Contains(out, completeCmd) {
			t.Errorf("completion %s: %d %q %s", shell, code, out, errOut)
		}
	}
	if _, errOut, code := run(t, "", "completion", "tcsh"); code != exitUsage || !strings.Contains(errOut, "bash, zsh or fish") {
		t.Errorf("completion tcsh: %d %s", code, errOut)
	}

	bash, err := exec.LookPath("bash")
	if err != nil {
		testenv.Skipf(t, "no bash: %v", err)
	}
	// An airlock on PATH that is this test binary acting as the CLI.
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := "#!/bin/sh\nAIRLOCK_CLI_CHILD=1 exec " + self + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "airlock"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	script := `source <(airlock completion bash)
COMP_WORDS=(airlock run --allow-s); COMP_CWORD=2; _airlock; printf '%s\n' "${COMPREPLY[@]}"
COMP_WORDS=(airlock ima); COMP_CWORD=1; _airlock; printf '%s\n' "${COMPREPLY[@]}"`
	cmd := exec.Command(bash, "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "--allow-spawn\nimage\nimages\n" {
		t.Errorf("bash completion: %v %q", err, out)
	}
}
