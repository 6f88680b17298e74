package tools

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd if this process dies first.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
