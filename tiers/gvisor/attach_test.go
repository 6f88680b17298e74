package gvisor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
)

// TestAttach: an attached shell, without the spawn grant, answers each
// line written to its stdin as it arrives; closing stdin ends it, Wait
// reports its exit and stderr, and nothing is left behind.
func TestAttach(t *testing.T) {
	tier := newTier(t, NewConfig())
	job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", `while read l; do echo "got $l"; done; echo bye >&2; exit 3`}}
	a, err := tier.Attach(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(a.Stdout())
	for i := range 3 { // each answer is read before the next line is sent: a live pipe
		if _, err := fmt.Fprintf(a.Stdin(), "line %d\n", i); err != nil {
			t.Fatal(err)
		}
		got, err := out.ReadString('\n')
		if err != nil || got != fmt.Sprintf("got line %d\n", i) {
			t.Fatalf("answer %d: %q, %v", i, got, err)
		}
	}
	if err := a.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(out); err != nil || len(rest) != 0 {
		t.Fatalf("after EOF: %q, %v", rest, err)
	}
	res, err := a.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.Stderr != "bye\n" || res.Stdout != "" {
		t.Errorf("result: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if errOut, _ := io.ReadAll(a.Stderr()); string(errOut) != "bye\n" {
		t.Errorf("stderr stream: %q", errOut)
	}
}

// TestAttachKill: Kill ends a program that never exits on its own, whose
// stdout nobody reads; Wait reports the kill.
func TestAttachKill(t *testing.T) {
	tier := newTier(t, NewConfig())
	job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", `echo up; while :; do echo flood; done`}, Limits: airlock.Limits{OutputBytes: 64 << 20}}
	a, err := tier.Attach(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(a.Stdout()).ReadString('\n')
	if err != nil || line != "up\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	a.Kill()
	_, err = a.Wait()
	var stop *airlock.Stop
	if !errors.As(err, &stop) || stop.Reason != airlock.StopKilled {
		t.Fatalf("Wait after Kill: %v", err)
	}
	if _, err := io.ReadAll(a.Stdout()); err == nil {
		t.Error("stdout ended cleanly after a kill")
	}
	a.Kill() // again: nothing happens
}

// TestAttachRefuses: stdin and collect make no sense attached.
func TestAttachRefuses(t *testing.T) {
	tier := newTier(t, NewConfig())
	for _, job := range []airlock.Job{
		{Kind: airlock.KindCommand, Argv: []string{"true"}, Stdin: "x"},
		{Kind: airlock.KindCommand, Argv: []string{"true"}, Collect: []string{"out"}},
	} {
		_, err := tier.Attach(context.Background(), job)
		var inv *airlock.InvalidJob
		if !errors.As(err, &inv) {
			t.Errorf("%+v: %v, want *InvalidJob", job, err)
		}
	}
	_, err := tier.Attach(context.Background(), airlock.Job{Kind: airlock.KindExpr, Code: "1"})
	var na *airlock.NotAdmitted
	if !errors.As(err, &na) || !strings.Contains(na.Reason, "command") {
		t.Errorf("expr job: %v", err)
	}
}

// TestAttachPooled: an attached job claims a pooled sandbox (see
// tiertest.AttachPooled).
func TestAttachPooled(t *testing.T) {
	tiertest.AttachPooled(t, newTier(t, NewConfig().WithPool(1, 1)))
}

// TestAttachFlood: an attached program that floods its stdout, read as
// fast as it comes, is stopped at the output limit, counted on the host
// side of its stdout stream.
func TestAttachFlood(t *testing.T) {
	tier := newTier(t, NewConfig())
	a, err := tier.Attach(context.Background(), airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", "while :; do echo flood; done"},
		Limits: airlock.Limits{OutputBytes: 256 << 10, WallMS: 60_000}})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, a.Stdout())
	_, err = a.Wait()
	var stop *airlock.Stop
	if !errors.As(err, &stop) || stop.Reason != airlock.StopOutput {
		t.Fatalf("a flood of %d bytes ended with %v, not the output stop", n, err)
	}
}

// TestAcceptStreams: a single-job sandbox's streams are taken by their
// tags, in either order; a bad or repeated tag fails the sandbox's
// creation; what is written to stdin reaches the program's end, and what
// the program writes to stdout is copied out to its end.
func TestAcceptStreams(t *testing.T) {
	listen := func(t *testing.T) (*net.UnixListener, func(tag string) net.Conn) {
		path := filepath.Join(t.TempDir(), "s.sock")
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln, func(tag string) net.Conn {
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if _, err := io.WriteString(c, tag); err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	for _, tags := range [][2]string{{"i", "x"}, {"o", "o"}} {
		ln, dial := listen(t)
		dial(tags[0])
		dial(tags[1])
		if in, out, err := acceptStreams(ln); err == nil || in != nil || out != nil {
			t.Errorf("tags %q: %v, %v, %v", tags, in, out, err)
		}
	}
	ln, dial := listen(t)
	out := dial(string(rune(streamOut)))
	in := dial(string(rune(streamIn)))
	sin, sout, err := acceptStreams(ln)
	if err != nil {
		t.Fatal(err)
	}
	st := newStreams(sin, sout)
	if _, err := io.WriteString(st.stdin(), "to the program"); err != nil {
		t.Fatal(err)
	}
	st.stdin().Close()
	if got, err := io.ReadAll(in); err != nil || string(got) != "to the program" {
		t.Fatalf("stdin stream: %q, %v", got, err)
	}
	var copied strings.Builder
	go st.copyOut(func(p []byte) { copied.Write(p) })
	io.WriteString(out, "from the program")
	out.Close()
	st.drain(true)
	if copied.String() != "from the program" {
		t.Fatalf("stdout stream: %q", copied.String())
	}
	if _, err := io.WriteString(st.stdin(), "late"); !errors.Is(err, errAttachEnded) {
		t.Fatalf("a write after the end: %v", err)
	}
}
