package airlock

import "fmt"

// Level is the strength of an isolation boundary, weakest first.
type Level int

// The isolation levels.
const (
	LevelInterpreter    Level = 1 // a language runtime with no I/O but what it is handed
	LevelSyscallFilter  Level = 2 // a host process under seccomp, rlimits and an empty environment
	LevelContainer      Level = 3 // namespaces, seccomp, Landlock and cgroups
	LevelVirtualisation Level = 4 // a separate kernel: intercepted (gVisor) or hardware (microVM)
	LevelAccount        Level = 5 // another account and host with its own credentials
)

var levelNames = [...]string{"", "interpreter", "syscall-filter", "container", "virtualisation", "account"}

// String returns the level's name.
func (l Level) String() string {
	if l >= LevelInterpreter && l <= LevelAccount {
		return levelNames[l]
	}
	return fmt.Sprintf("level(%d)", int(l))
}

// parseLevel accepts a level's number or its name.
func parseLevel(s string) (Level, error) {
	for i := LevelInterpreter; i <= LevelAccount; i++ {
		if s == levelNames[i] || s == fmt.Sprint(int(i)) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("unknown level %q (want 1-5 or one of interpreter, syscall-filter, container, virtualisation, account)", s)
}

// UnmarshalJSON accepts a level's number or its name, and 0 (no level: a
// result that never reached a tier).
func (l *Level) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "0" || s == "null" {
		*l = 0
		return nil
	}
	if len(s) >= 2 && s[0] == '"' {
		s = s[1 : len(s)-1]
	}
	v, err := parseLevel(s)
	if err != nil {
		return err
	}
	*l = v
	return nil
}
