package microvm

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/collect"
	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
)

// converseWith runs the host's side of a job against a guest that sends
// frames: what the host returns, with the result, and no QEMU.
func converseWith(t *testing.T, job airlock.Job, frames func(c net.Conn)) (airlock.Result, error) {
	t.Helper()
	host, guest := net.Pipe()
	v := &vm{ctl: host, done: make(chan struct{}), stderr: &tail{n: 100}, console: &tail{n: 100}}
	go func() {
		defer guest.Close()
		if _, _, err := frame.Read(guest); err != nil { // the job
			return
		}
		frames(guest)
	}()
	if job.Limits.WallMS == 0 {
		job.Limits.WallMS = 60_000
	}
	job.Limits.OutputBytes = 1 << 20
	var res airlock.Result
	err := (&Tier{}).converse(context.Background(), v, &job, []byte(`{}`), &res)
	return res, err
}

// TestConverseOneFilesFrame: the host takes one Files frame from a guest,
// for a job that collects; another is a protocol error that ends the run,
// not one more payload of up to 48 MiB to decode.
func TestConverseOneFilesFrame(t *testing.T) {
	job := command("true")
	job.Collect = []string{"*"}
	files := []byte(`{"files":{"a":"eA=="}}`)
	res, err := converseWith(t, job, func(c net.Conn) {
		frame.Write(c, frame.Files, files)
		frame.Write(c, frame.Files, files)
		frame.WriteJSON(c, frame.Exit, map[string]int{"code": 0})
	})
	if err == nil || !strings.Contains(err.Error(), "unexpected") {
		t.Fatalf("a second Files frame was taken: %v %+v", err, res)
	}
	// The benign control: one Files frame, then the exit.
	res, err = converseWith(t, job, func(c net.Conn) {
		frame.Write(c, frame.Files, files)
		frame.WriteJSON(c, frame.Exit, map[string]int{"code": 0})
	})
	if err != nil || res.Files["a"] != "x" {
		t.Fatalf("one Files frame: %v %+v", err, res)
	}
}

// TestConverseExitWithinReason: a guest's exit report is believed only
// within what a real exit could say: a code outside 0-255, negative usage
// or an unknown stop reason is a protocol error, not a Result.
func TestConverseExitWithinReason(t *testing.T) {
	for _, ex := range []map[string]any{
		{"code": -1},
		{"code": 256},
		{"code": 0, "memory_bytes": -5},
		{"code": 0, "cpu_us": -1},
		{"code": 0, "reason": "wall"},
	} {
		res, err := converseWith(t, command("true"), func(c net.Conn) {
			frame.WriteJSON(c, frame.Exit, ex)
		})
		if err == nil || !strings.Contains(err.Error(), "bad exit frame") {
			t.Errorf("%v: taken as %v %+v", ex, err, res)
		}
	}
	// The controls: a signal's code, and a limit the guest enforces.
	res, err := converseWith(t, command("true"), func(c net.Conn) {
		frame.WriteJSON(c, frame.Exit, map[string]any{"code": 137, "signal": "SIGKILL", "cpu_us": 10})
	})
	if err != nil || res.ExitCode != 137 || res.Usage.CPUUS != 10 {
		t.Errorf("a signalled exit: %v %+v", err, res)
	}
	_, err = converseWith(t, command("true"), func(c net.Conn) {
		frame.WriteJSON(c, frame.Exit, map[string]any{"code": 137, "reason": "pids"})
	})
	if s, ok := airlock.AsStop(err); !ok || s.Reason != airlock.StopPids {
		t.Errorf("a pids stop: %v", err)
	}
}

// TestConverseGuestTextOneLine: what a guest says in a Fail frame, and
// what its console printed, reach the host's error as one line: a guest
// that took over its agent cannot break an operator's log into forged
// lines or drive a terminal with escape sequences through them, nor hand
// the host an error of kilobytes.
func TestConverseGuestTextOneLine(t *testing.T) {
	hostile := "agent failed\nairlock: approved by admin\x1b[2J\x1b]0;title\x07" + strings.Repeat("x", 3000)
	_, err := converseWith(t, command("true"), func(c net.Conn) {
		frame.Write(c, frame.Fail, []byte(hostile))
	})
	if err == nil {
		t.Fatal("a Fail frame was taken as success")
	}
	assertOneLine(t, "Fail frame", err.Error())

	v := &vm{stderr: &tail{n: 4096}, console: &tail{n: 4096}}
	v.console.Write([]byte("[ 1.0] booted\n" + hostile + "\n[ 2.0] \x1b[0mend\n\xe2\x82"))
	v.stderr.Write([]byte("qemu: \x1b[31mred\x1b[0m\n"))
	assertOneLine(t, "diag", v.diag())
}

func assertOneLine(t *testing.T, what, s string) {
	t.Helper()
	if strings.ContainsAny(s, "\n\r\x1b\x07\x00") || !utf8.ValidString(s) || len(s) > 2048 {
		t.Errorf("%s: the guest's text reached the error as it was (%d bytes): %.200q", what, len(s), s)
	}
}

// TestConverseBoundsBufferedFrames: the host reads the guest's frames
// ahead of handling them (up to a channel's worth while, say, a slow
// client's stream holds the output sink), so a frame a job never calls for
// — a Job frame from the guest, a Files frame beyond the one a collecting
// job gets — must be refused from its header, not read: each may announce
// up to 48 MiB, and a guest sending a channel's worth of them had the host
// hold hundreds of MiB per VM before it saw the first.
func TestConverseBoundsBufferedFrames(t *testing.T) {
	const size = 4 << 20 // 48 MiB in earnest; smaller keeps the test light
	for _, c := range []struct {
		name    string
		collect bool
		first   []frame.Type // sent before the flood, which repeats the last
	}{
		{"job frames", false, []frame.Type{frame.Job}},
		{"files without collect", false, []frame.Type{frame.Files}},
		{"files after files", true, []frame.Type{frame.Files, frame.Files}},
	} {
		t.Run(c.name, func(t *testing.T) {
			host, guest := net.Pipe()
			v := &vm{ctl: host, done: make(chan struct{}), stderr: &tail{n: 100}, console: &tail{n: 100}}
			flooded := make(chan struct{})
			var taken atomic.Int64 // payload bytes of the flood the host read
			go func() {
				defer close(flooded)
				defer guest.Close()
				if _, _, err := frame.Read(guest); err != nil {
					return
				}
				frame.Write(guest, frame.Stdout, []byte("hold the sink\n"))
				files, _ := json.Marshal(collect.Wire{Files: map[string][]byte{"a": bytes.Repeat([]byte("x"), size)}})
				for _, typ := range c.first[:len(c.first)-1] {
					frame.Write(guest, typ, files)
				}
				last := c.first[len(c.first)-1]
				for range 20 {
					var h [5]byte
					h[0] = byte(last)
					binary.BigEndian.PutUint32(h[1:], uint32(len(files)))
					if _, err := guest.Write(h[:]); err != nil {
						return
					}
					for p := files; len(p) > 0; {
						n, err := guest.Write(p[:min(len(p), 64<<10)])
						taken.Add(int64(n))
						if err != nil {
							return
						}
						p = p[n:]
					}
				}
			}()
			job := command("true")
			job.Limits.WallMS = 60_000
			job.Limits.OutputBytes = 1 << 20
			if c.collect {
				job.Collect = []string{"*"}
			}
			// A slow client: the sink holds the conversation until the
			// guest has sent all it could, or a second.
			ctx := airlock.WithOutput(context.Background(), func(airlock.Stream, []byte) {
				select {
				case <-flooded:
				case <-time.After(time.Second):
				}
			})
			var res airlock.Result
			err := (&Tier{}).converse(ctx, v, &job, []byte(`{}`), &res)
			<-flooded
			if err == nil {
				t.Fatalf("the flood was taken: %+v", res)
			}
			if n := taken.Load(); n > size+(1<<20) {
				t.Errorf("the host read %d MiB of frames it never called for before refusing them (%v)", n>>20, err)
			}
		})
	}
}

// TestConverseStoppedRunKeepsFiles: a limit the guest enforces (memory,
// CPU, processes) stops the job, and the agent still reads the scratch
// before its exit report: the files it sent are returned with the stop,
// not dropped. A run the host stops (the wall clock) before any arrived
// returns none.
func TestConverseStoppedRunKeepsFiles(t *testing.T) {
	job := command("true")
	job.Collect = []string{"*"}
	res, err := converseWith(t, job, func(c net.Conn) {
		frame.Write(c, frame.Files, []byte(`{"files":{"a":"eA=="}}`))
		frame.WriteJSON(c, frame.Exit, map[string]any{"code": 137, "reason": "memory"})
	})
	if s, ok := airlock.AsStop(err); !ok || s.Reason != airlock.StopMemory || res.Files["a"] != "x" {
		t.Errorf("a memory stop reported by the guest: %v, files %q", err, res.Files)
	}
	job.Limits.WallMS = 200
	res, err = converseWith(t, job, func(c net.Conn) {
		time.Sleep(time.Second)
	})
	if s, ok := airlock.AsStop(err); !ok || s.Reason != airlock.StopTimeout || res.Files != nil {
		t.Errorf("a wall-clock stop: %v, files %q", err, res.Files)
	}
}
