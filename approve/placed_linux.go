package approve

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
)

// Placed returns the digest of job with its files read back from dir, the
// sandbox directory a tier placed them in. A file that is missing, is not
// a regular file, or is reached through a symbolic link anywhere on its
// path is an error: a placed file must be the bytes that were approved,
// not a pointer to something else.
func Placed(job *airlock.Job, tier, tenant, dir string) (Digest, error) {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("opening placed directory: %w", err)
	}
	defer unix.Close(root)
	files := make(map[string]string, len(job.Files))
	var total int64
	for name := range job.Files {
		data, err := readBeneath(root, name, MaxPlacedBytes-total)
		if err != nil {
			return "", fmt.Errorf("placed file %s: %w", filepath.ToSlash(name), err)
		}
		total += int64(len(data))
		files[name] = string(data)
	}
	return digest(job, tier, tenant, files), nil
}

// readBeneath opens name under root refusing every symbolic link and any
// escape (openat2 RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH), and reads it if it
// is a regular file.
func readBeneath(root int, name string, limit int64) ([]byte, error) {
	fd, err := unix.Openat2(root, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, errors.New("is or passes through a symbolic link")
		}
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("is not a regular file (%s)", st.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, errors.New("placed files are larger than the job allows")
	}
	return data, nil
}
