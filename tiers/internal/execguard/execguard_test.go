//go:build linux

package execguard

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

const helperEnv = "EXECGUARD_TEST_HELPER"

var atFDCWD = unix.AT_FDCWD

// TestMain runs the guarded helper when the test re-executes itself: it
// installs the filter, checks that executing without the key (and through
// execveat) is refused, then executes a shell with the key.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "" {
		os.Exit(m.Run())
	}
	k, err := NewKey()
	if err == nil {
		err = Install(k)
	}
	if err != nil {
		fmt.Println("install:", err)
		os.Exit(2)
	}
	sh := "/bin/sh"
	fmt.Println("plain:", syscall.Exec(sh, []string{"sh", "-c", "true"}, nil))
	wrong := k
	wrong[2]++
	fmt.Println("wrong key:", Exec(sh, []string{"sh", "-c", "true"}, nil, wrong))
	p, _ := syscall.BytePtrFromString(sh)
	argv, _ := syscall.SlicePtrFromStrings([]string{"sh"})
	_, _, e := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(int64(atFDCWD)), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&argv[0])), 0, uintptr(k[2]))
	fmt.Println("execveat:", e)
	_, _, e = unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0, 0, 0, 0)
	fmt.Println("ptrace:", e)
	err = Exec(sh, []string{"sh", "-c", `echo "$(echo builtin) $$"; ls / >/dev/null; echo "child exec: $?"; (echo subshell)`}, nil, k)
	fmt.Println("exec with key:", err)
	os.Exit(3)
}

func TestGuard(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		testenv.Skipf(t, "no /bin/sh: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{helperEnv + "=1"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{
		"plain: permission denied\n",
		"wrong key: permission denied\n",
		"execveat: permission denied\n",
		"ptrace: operation not permitted\n",
		"builtin ",
		"child exec: 126\n",
		"subshell\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "exec with key:") {
		t.Errorf("the keyed exec failed:\n%s", got)
	}
}
