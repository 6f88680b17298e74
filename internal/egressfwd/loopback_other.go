//go:build !linux

package egressfwd

import "errors"

// LoopbackUp sets the loopback interface up; only Linux sandboxes (a fresh
// network namespace) need it, so elsewhere it reports that it cannot.
func LoopbackUp() error { return errors.ErrUnsupported }
