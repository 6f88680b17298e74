//go:build !linux

package approve

import (
	"errors"

	"github.com/airlock-sandbox/airlock"
)

// Placed refuses here: reading placed files back without following a
// link relies on openat2, and only the Linux tiers place files in a
// sandbox directory.
func Placed(*airlock.Job, string, string, string) (Digest, error) {
	return "", errors.New("placed files can be read back only on Linux")
}
