package process

import (
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/airlock-sandbox/airlock/tiers/process/internal/stage"
)

// TestFdTable: a child started with a table's files finds each at the
// number the table gave it, fixed or added, and the parent's copies of
// what was given are closed by closeGiven.
func TestFdTable(t *testing.T) {
	fds := newFdTable(stage.FdBinds)
	type end struct {
		fd int
		r  *os.File
	}
	var ends []end
	for _, fixed := range []int{stage.FdSpec, stage.FdStatus, 0, 0} { // 0: added
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		fd := fixed
		if fixed != 0 {
			fds.set(fixed, fds.give(w))
		} else {
			fd = fds.add(fds.give(w))
		}
		ends = append(ends, end{fd, r})
	}
	if got := ends[2].fd; got != stage.FdBinds {
		t.Fatalf("first added descriptor %d, want stage.FdBinds (%d)", got, stage.FdBinds)
	}
	script := ""
	for _, e := range ends {
		script += "echo " + strconv.Itoa(e.fd) + " >&" + strconv.Itoa(e.fd) + "; "
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.ExtraFiles = fds.files
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	given := fds.given
	fds.closeGiven()
	for _, f := range given {
		if _, err := f.Write([]byte("x")); err == nil {
			t.Fatalf("%s still open after closeGiven", f.Name())
		}
	}
	for _, e := range ends {
		b, err := io.ReadAll(e.r) // every write end is closed now
		if err != nil {
			t.Fatal(err)
		}
		if want := strconv.Itoa(e.fd) + "\n"; string(b) != want {
			t.Errorf("descriptor %d carried %q, want %q", e.fd, b, want)
		}
	}
}
