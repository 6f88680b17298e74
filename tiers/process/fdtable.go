package process

import (
	"os"

	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
)

// fdTable is what a process inherits beyond stdin, stdout and stderr
// (its exec.Cmd's ExtraFiles): the fixed descriptors the stage package
// numbers, placed with set, then each file added at the next number,
// which add returns for the spec that names it. No descriptor number is
// computed anywhere else.
//
// It also keeps the parent's copies of what it passes on that are the
// child's alone (pipe ends, detached mount trees), to be closed once the
// child has started (closeGiven).
type fdTable struct {
	files []*os.File // files[i] is descriptor stage.FdFirst+i
	given []*os.File
}

// newFdTable returns a table whose descriptors below next are fixed (set
// places them; unset ones are closed in the child) and whose first added
// descriptor is next.
func newFdTable(next int) *fdTable {
	return &fdTable{files: make([]*os.File, next-stage.FdFirst)}
}

// set places f at the fixed descriptor fd.
func (t *fdTable) set(fd int, f *os.File) { t.files[fd-stage.FdFirst] = f }

// add places f at the next descriptor and returns its number.
func (t *fdTable) add(f *os.File) int {
	t.files = append(t.files, f)
	return stage.FdFirst + len(t.files) - 1
}

// give marks f as the child's: the parent's copy is closed by closeGiven.
// It returns f.
func (t *fdTable) give(f *os.File) *os.File {
	t.given = append(t.given, f)
	return f
}

// closeGiven closes the parent's copies of the child's files: after the
// child has started, so that its exit is seen as end-of-file on every
// pipe, or when it is not started after all.
func (t *fdTable) closeGiven() {
	for _, f := range t.given {
		f.Close()
	}
	t.given = nil
}

// pipes makes n pipes ([read, write] each), or none.
func pipes(n int) ([][2]*os.File, error) {
	out := make([][2]*os.File, 0, n)
	for range n {
		r, w, err := os.Pipe()
		if err != nil {
			for _, p := range out {
				p[0].Close()
				p[1].Close()
			}
			return nil, err
		}
		out = append(out, [2]*os.File{r, w})
	}
	return out, nil
}
