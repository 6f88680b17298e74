// Package replacefile replaces a file whole: the new content goes to a
// fresh file next to it, renamed over the name. A reader sees the old file
// or the new one, never half of one, and whatever was at the name (a link,
// a file someone else holds open) is replaced, never written through.
package replacefile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces the file at path with one holding data, with mode perm
// whatever the umask.
func Write(path string, perm fs.FileMode, data []byte) error {
	return Fill(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Fill replaces the file at path with what fill writes, with mode perm
// whatever the umask. If fill fails, path is left as it was.
func Fill(path string, perm fs.FileMode, fill func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = f.Chmod(perm)
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}
