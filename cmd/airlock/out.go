package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// outFlags are run's files-out flags: --collect adds patterns to the job,
// --out writes what came back into a directory.
type outFlags struct {
	collect stringList
	out     string
}

func (o *outFlags) register(fs *flag.FlagSet) {
	fs.Var(&o.collect, "collect", "return the files matching `PATTERN` (a path or path.Match glob, relative to the scratch directory) once the program ends (repeatable; command and wasm jobs; regular files only, never through a link, 16 MiB in all)")
	fs.StringVar(&o.out, "out", "", "write the collected files into `DIR` (made if missing), at their paths under it; a name that would leave DIR, or a link (symbolic or hard) in DIR where a file goes, is refused")
}

// apply adds the --collect patterns to the job and checks that what is
// collected has somewhere to go.
func (o *outFlags) apply(job *airlock.Job, asJSON bool) error {
	for _, p := range o.collect {
		if !slices.Contains(job.Collect, p) {
			job.Collect = append(job.Collect, p)
		}
	}
	switch {
	case o.out != "" && len(job.Collect) == 0:
		return jobs.Invalid("--out", "nothing to write: name the files with --collect PATTERN")
	case o.out == "" && len(job.Collect) > 0 && !asJSON:
		return jobs.Invalid("--collect", "collected files need --out DIR (or --json, which returns them in the Result)")
	}
	return nil
}

// write writes the result's files under o.out and says on w what was not
// collected.
func (o *outFlags) write(res *airlock.Result, w io.Writer) error {
	for _, s := range res.FilesSkipped {
		fmt.Fprintf(w, "airlock: not collected: %s\n", s)
	}
	if o.out == "" || len(res.Files) == 0 {
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	root, err := unix.Open(o.out, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("--out %s: %w", o.out, err)
	}
	defer unix.Close(root)
	var errs []string
	for _, name := range value.SortedKeys(res.Files) {
		if err := writeUnder(root, name, res.Files[name]); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", name, err))
		}
	}
	if len(errs) > 0 {
		// One line, however many files were refused.
		return fmt.Errorf("--out: %s", strings.Join(errs, "; "))
	}
	return nil
}

// writeUnder writes data at the relative name below the directory root,
// making directories as needed, opening every component without
// following a link: the names come from the sandbox.
func writeUnder(root int, name, data string) error {
	if name == "" || strings.HasPrefix(name, "/") || path.Clean(name) != name || name == "." ||
		slices.Contains(strings.Split(name, "/"), "..") || strings.ContainsRune(name, 0) {
		return errors.New("not a clean relative path; refused")
	}
	parts := strings.Split(name, "/")
	dir := root
	for _, p := range parts[:len(parts)-1] {
		if err := unix.Mkdirat(dir, p, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		fd, err := unix.Openat(dir, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if dir != root {
			unix.Close(dir)
		}
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return fmt.Errorf("%s is a link or not a directory; refused", p)
			}
			return err
		}
		dir = fd
	}
	if dir != root {
		defer unix.Close(dir)
	}
	fd, err := unix.Openat(dir, parts[len(parts)-1], unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, unix.ELOOP) {
		return errors.New("a link is in its place; refused")
	}
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("not a regular file in its place; refused")
	}
	if st.Nlink > 1 {
		// A hard link: truncating it would change the file it shares
		// its bytes with, which may lie outside DIR.
		return errors.New("a file with other hard links is in its place; refused")
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := io.WriteString(f, data); err != nil {
		return err
	}
	return f.Close()
}
