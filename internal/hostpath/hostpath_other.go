//go:build !linux

package hostpath

import (
	"fmt"
	"os"
	"path/filepath"
)

// Real returns the real path that p names: every symbolic link followed.
func Real(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	return filepath.EvalSymlinks(p)
}

// OpenRoot opens the directory p as an [os.Root], refusing a symbolic
// link anywhere on the path (see walk).
func OpenRoot(p string) (*os.Root, error) { return openRootWalk(p) }

// Check reports whether p can be opened without following a symbolic
// link.
func Check(p string) error { return checkWalk(p) }

// Identity describes the object at the real path p in the words the
// Linux build uses, refusing a path that passes through a symbolic link,
// and any file where no device and inode identify it.
func Identity(p string) (string, error) { return identityWalk(p) }
