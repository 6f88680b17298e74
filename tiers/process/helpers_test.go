package process

import (
	"errors"
	"syscall"
)

var syscall0 = syscall.Signal(0)

func errorsAs[T error](err error, target *T) bool { return errors.As(err, target) }
