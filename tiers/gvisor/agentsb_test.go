package gvisor

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/collect"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/tiers/internal/attachio"
	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
)

// TestSplitRunDistrustsAgent: the agent's spawn and exit times split the
// host's run time only when they fit inside it; an agent that reports
// times past the host's, or near the int64 limit, leaves the host's
// timings as they are (start and run never above the total, never
// negative).
func TestSplitRunDistrustsAgent(t *testing.T) {
	host := airlock.Timings{StartUS: 1000, RunUS: 5000, TotalUS: 6000}
	for _, c := range []struct {
		name string
		exit agentExit
		want airlock.Timings
	}{
		{"honest", agentExit{SpawnUS: 300, ExitUS: 4000}, airlock.Timings{StartUS: 1300, RunUS: 3700, TotalUS: 6000}},
		{"no times", agentExit{}, host},
		{"exit before spawn", agentExit{SpawnUS: 300, ExitUS: 200}, host},
		{"past the host's run", agentExit{SpawnUS: 300, ExitUS: 3_600_000_000}, host},
		{"spawn past the host's run", agentExit{SpawnUS: 1 << 40, ExitUS: 1<<40 + 1}, host},
		{"overflow", agentExit{SpawnUS: math.MaxInt64 - 10, ExitUS: math.MaxInt64}, host},
	} {
		got := host
		splitRun(&got, &c.exit)
		if got != c.want {
			t.Errorf("%s: timings %+v, want %+v", c.name, got, c.want)
		}
		if got.StartUS < 0 || got.RunUS < 0 || got.StartUS+got.RunUS > got.TotalUS {
			t.Errorf("%s: timings %+v do not fit the total", c.name, got)
		}
	}
}

// TestSessionSlowReaderKeepsOutput: a session's job whose output the host
// reads slowly (a sink that blocks, as a slow client's stream does) keeps
// all of it, and the session's next job gets none of it. The job enlarges
// its stdout pipe and fills it before it exits, so that, when the agent
// reports the exit, output is still on its way: an agent that gave up
// waiting for it sent the rest after its exit report, cut from the first
// job's result and read as the second's.
func TestSessionSlowReaderKeepsOutput(t *testing.T) {
	if _, err := exec.LookPath("perl"); err != nil {
		testenv.Skipf(t, "no perl on PATH to enlarge the pipe with (Debian's perl-base has one)")
	}
	tier := newTier(t, NewConfig())
	ctx := context.Background()
	s, err := tier.OpenSession(ctx, airlock.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := true
	slow := airlock.WithOutput(ctx, func(airlock.Stream, []byte) {
		if first { // longer than the agent ever waited for output
			first = false
			time.Sleep(3 * time.Second)
		}
	})
	const n = 800_000
	job := cmdJob("perl", "-e", fmt.Sprintf(`fcntl(STDOUT, 1031, 1<<20) or die "F_SETPIPE_SZ: $!"; $| = 1; print "a" x %d`, n))
	job.Limits.OutputBytes = 4 << 20
	res, err := s.Run(slow, job)
	if err != nil || len(res.Stdout) != n || res.Stderr != "" {
		t.Errorf("first job: %v, %d bytes of stdout, want %d (stderr %q)", err, len(res.Stdout), n, res.Stderr)
	}
	res, err = s.Run(ctx, cmdJob("sh", "-c", "echo two"))
	if err != nil || res.Stdout != "two\n" {
		t.Errorf("second job: %v, stdout of %d bytes %.40q..., want %q", err, len(res.Stdout), res.Stdout, "two\n")
	}
}

// TestReadAgentOneFilesFrame: the host takes one Files frame from an
// agent, for a job that collects; a second is a protocol error that ends
// the run, not one more payload of up to 48 MiB to decode.
func TestReadAgentOneFilesFrame(t *testing.T) {
	files := []byte(`{"files":{"a":"eA=="}}`)
	for _, c := range []struct {
		name   string
		frames int
		lost   bool
	}{{"one", 1, false}, {"two", 2, true}} {
		host, agent := net.Pipe()
		go func() {
			defer agent.Close()
			for range c.frames {
				frame.Write(agent, frame.Files, files)
			}
			frame.WriteJSON(agent, frame.Exit, agentExit{Code: 0})
		}()
		job := cmdJob("true")
		job.Collect = []string{"*"}
		var res airlock.Result
		exit, lost := readAgent(host, &job, newOutput(context.Background(), 1<<20), nil, &res)
		host.Close()
		if c.lost && (lost == nil || !strings.Contains(lost.Error(), "unexpected frame C")) {
			t.Errorf("%s: exit %+v, lost %v: a second Files frame was taken", c.name, exit, lost)
		}
		if !c.lost && (lost != nil || exit == nil || res.Files["a"] != "x") {
			t.Errorf("%s: exit %+v, lost %v, files %q", c.name, exit, lost, res.Files)
		}
	}
}

// TestReadAgentExitWithinReason: an exit code no real exit has is a
// protocol error.
func TestReadAgentExitWithinReason(t *testing.T) {
	for _, c := range []struct {
		exit agentExit
		lost bool
	}{
		{agentExit{Code: -1}, true},
		{agentExit{Code: 256}, true},
		{agentExit{Code: 137}, false},
		{agentExit{Code: -1, Error: "decoding job: x"}, false}, // the agent's own failure
		{agentExit{Code: -1, CopyFull: "/data"}, false},
	} {
		host, agent := net.Pipe()
		go func() {
			defer agent.Close()
			frame.WriteJSON(agent, frame.Exit, c.exit)
		}()
		job := cmdJob("true")
		var res airlock.Result
		exit, lost := readAgent(host, &job, newOutput(context.Background(), 1<<20), nil, &res)
		host.Close()
		switch {
		case c.lost && (lost == nil || exit != nil):
			t.Errorf("code %d: taken (%+v)", c.exit.Code, exit)
		case !c.lost && (lost != nil || exit == nil):
			t.Errorf("code %d: lost %v", c.exit.Code, lost)
		case !c.lost && exit.Code != c.exit.Code:
			t.Errorf("code %d: got code %d", c.exit.Code, exit.Code)
		}
	}
}

// TestReadAgentExitTextOneLine: the messages in an agent's exit report
// (the reason it could not start the job, the copy grant that did not
// fit) reach the host's error as one bounded line: an agent that the job
// took over cannot forge log lines or drive a terminal through them.
func TestReadAgentExitTextOneLine(t *testing.T) {
	hostile := "x\nairlock: approved by admin\x1b[2J\x07" + strings.Repeat("y", 1500)
	host, agent := net.Pipe()
	go func() {
		defer agent.Close()
		frame.WriteJSON(agent, frame.Exit, agentExit{Code: -1, Error: hostile, CopyFull: hostile})
	}()
	job := cmdJob("true")
	var res airlock.Result
	exit, lost := readAgent(host, &job, newOutput(context.Background(), 1<<20), nil, &res)
	host.Close()
	if lost != nil || exit == nil {
		t.Fatalf("exit %+v, lost %v", exit, lost)
	}
	for what, s := range map[string]string{"error": exit.Error, "copy_full": exit.CopyFull} {
		if strings.ContainsAny(s, "\n\r\x1b\x07") || len(s) > 1024 {
			t.Errorf("%s: the agent's text is kept as it was (%d bytes): %.100q", what, len(s), s)
		}
	}
}

// TestReadAgentRefusesFromHeader: a frame the job never calls for (a Job
// frame from the agent, a Files frame for a job that collects nothing or
// after its one) is refused from its header: the host reads none of its
// payload, which may announce up to 48 MiB.
func TestReadAgentRefusesFromHeader(t *testing.T) {
	const size = 8 << 20
	for _, c := range []struct {
		name    string
		collect bool
		types   []frame.Type // the last is the one refused
	}{
		{"job", false, []frame.Type{frame.Job}},
		{"files without collect", false, []frame.Type{frame.Files}},
		{"second files", true, []frame.Type{frame.Files, frame.Files}},
		{"attached stdout", false, []frame.Type{frame.Stdout}},
	} {
		host, agent := net.Pipe()
		var taken atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer agent.Close()
			w := collect.Wire{Files: map[string][]byte{"a": []byte("x")}}
			for _, typ := range c.types[:len(c.types)-1] {
				frame.WriteJSON(agent, typ, w)
			}
			var h [5]byte
			h[0] = byte(c.types[len(c.types)-1])
			n := size
			if h[0] == byte(frame.Stdout) {
				n = frame.MaxChunk
			}
			binary.BigEndian.PutUint32(h[1:], uint32(n))
			if _, err := agent.Write(h[:]); err != nil {
				return
			}
			chunk := make([]byte, 4<<10)
			for left := n; left > 0; left -= len(chunk) {
				k, err := agent.Write(chunk)
				taken.Add(int64(k))
				if err != nil {
					return
				}
			}
		}()
		job := cmdJob("true")
		if c.collect {
			job.Collect = []string{"*"}
		}
		var att *attachio.Handle
		if c.name == "attached stdout" {
			att = &attachio.Handle{}
		}
		var res airlock.Result
		exit, lost := readAgent(host, &job, newOutput(context.Background(), 1<<20), att, &res)
		host.Close()
		<-done
		if lost == nil || exit != nil {
			t.Errorf("%s: taken: exit %+v", c.name, exit)
		}
		if n := taken.Load(); n > 0 {
			t.Errorf("%s: the host read %d bytes of a frame it refused (%v)", c.name, n, lost)
		}
	}
}
