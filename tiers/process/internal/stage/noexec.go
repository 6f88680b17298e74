package stage

import (
	"bufio"
	"debug/elf"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// execOnly is rules with execution withheld from every path but the
// program's own file, the interpreter of its first line if it is a
// script, and the ELF loader each of those names: Landlock then refuses
// (EACCES) every execve the program makes of anything else, while it may
// still fork itself (subshells, pipes of builtins) within the pids limit.
// Shared libraries are mapped, not executed, and need no rule.
func execOnly(rules []llRule, prog string) []llRule {
	out := make([]llRule, 0, len(rules)+3)
	for _, r := range rules {
		r.Access &^= llExec
		if r.Access != 0 {
			out = append(out, r)
		}
	}
	files := []string{prog}
	if interp := scriptInterpreter(prog); interp != "" {
		files = append(files, interp)
	}
	for _, f := range files[:len(files):len(files)] {
		if loader := elfLoader(f); loader != "" {
			files = append(files, loader)
		}
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			continue // nothing to execute there: the exec fails anyway
		}
		out = append(out, llRule{Path: f, Access: unix.LANDLOCK_ACCESS_FS_READ_FILE | llExec})
	}
	return out
}

// scriptInterpreter returns the absolute interpreter a "#!" first line
// names, or "".
func scriptInterpreter(prog string) string {
	f, err := os.Open(prog)
	if err != nil {
		return ""
	}
	defer f.Close()
	line, _ := bufio.NewReaderSize(f, 256).ReadString('\n')
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return ""
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || !strings.HasPrefix(fields[0], "/") {
		return ""
	}
	return fields[0]
}

// elfLoader returns the program interpreter (PT_INTERP) an ELF file
// names, or "".
func elfLoader(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP || p.Filesz == 0 || p.Filesz > 4096 {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return ""
		}
		return strings.TrimRight(string(b), "\x00")
	}
	return ""
}
