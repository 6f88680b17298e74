package server_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/server"
)

// The job the throughput benchmark posts: a cached expression.
const benchJob = `{"kind":"expr","code":"a + b * 2","input":{"a":1,"b":2}}`

// benchConns is how many keep-alive connections the load generator keeps
// open: enough to keep two cores busy, bounded.
const benchConns = 32

// BenchmarkRunHTTP measures POST /v1/run for a cached expression with
// keep-alive connections over loopback, in one run next to its peers:
//
//   - tier: the expr tier called in process (no HTTP, no server);
//   - raw: a bare net/http handler answering a canned Result;
//   - server: the server's Serve, auditing to a file, as `airlock serve`
//     runs it;
//   - handler: the server's handler called without the network.
//
// server/tier is the cost of the API around a run; server/raw is what the
// API adds to bare HTTP. The load generator runs in the same process and
// shares the cores with the server.
func BenchmarkRunHTTP(b *testing.B) {
	b.Run("tier", func(b *testing.B) {
		srv := benchServer(b)
		job, err := airlock.DecodeJob([]byte(benchJob))
		if err != nil {
			b.Fatal(err)
		}
		var tier airlock.Tier
		for _, t := range srv.Router().Tiers() {
			if t.Name() == "expr" {
				tier = t
			}
		}
		ctx := context.Background()
		measure(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if res, err := tier.Run(ctx, job); err != nil || res.Value == nil {
						b.Errorf("expr tier: %v %+v", err, res)
						return
					}
				}
			})
		})
	})
	canned := `{"tier":"expr","level":1,"value":5,"stdout":"","stderr":"","exit_code":0,"timings":{"start_us":0,"run_us":0,"total_us":1}}` + "\n"
	b.Run("raw", func(b *testing.B) {
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, canned)
		}))
		defer hs.Close()
		hammer(b, hs.Listener.Addr().String(), benchConns)
	})
	b.Run("server", func(b *testing.B) {
		srv := benchServer(b)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ctx, ln) }()
		hammer(b, ln.Addr().String(), benchConns)
		stop()
		if err := <-served; err != nil {
			b.Error(err)
		}
	})
	b.Run("handler", func(b *testing.B) {
		h := benchServer(b).Handler()
		b.SetParallelism(benchConns / 2) // as many runs at once as over HTTP
		measure(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := httptest.NewRequest("POST", "/v1/run", strings.NewReader(benchJob))
					req.Header.Set("Authorization", "Bearer "+keyA)
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != 200 {
						b.Errorf("status %d: %s", w.Code, w.Body)
						return
					}
				}
			})
		})
	})
}

// cpuTime is the CPU time (user and system) the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs f and reports runs/s and the process's CPU time per run
// (server and load generator together): the machine is shared, so wall
// time swings with the neighbours' load while CPU time per run mostly
// does not; 2 cores divided by it is what the machine could serve alone.
func measure(b *testing.B, f func()) {
	b.ReportAllocs()
	cpu := cpuTime()
	b.ResetTimer()
	f()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/run")
}

// benchServer is the test configuration with room for the load generator's
// connections (tenant a runs benchConns jobs at once), auditing to a file.
func benchServer(b *testing.B) *server.Server {
	cfg := testConfig()
	cfg.Tenants[0].MaxConcurrent = benchConns
	cfg.Audit = filepath.Join(b.TempDir(), "audit.jsonl")
	srv, err := newServer(cfg, server.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := srv.Close(); err != nil {
			b.Error(err)
		}
	})
	return srv
}

// hammer is the load generator: conns keep-alive connections to addr, each
// posting benchJob and reading the answer in turn until b.N requests have
// been answered. It speaks just enough HTTP/1.1 (a fixed request, a status
// line, headers and a Content-Length body) to cost the cores it shares
// with the server less than net/http's client would. Every answer must be
// 200 with a body; each connection has a deadline, so it cannot hang.
func hammer(b *testing.B, addr string, conns int) {
	req := []byte("POST /v1/run HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + keyA +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(benchJob)) + "\r\n\r\n" + benchJob)
	var left atomic.Int64
	left.Store(int64(b.N))
	errs := make(chan error, conns)
	measure(b, func() {
		var wg sync.WaitGroup
		for range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- client(addr, req, &left)
			}()
		}
		wg.Wait()
	})
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

func client(addr string, req []byte, left *atomic.Int64) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Minute)); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	body := make([]byte, 0, 1024)
	for left.Add(-1) >= 0 {
		if _, err := c.Write(req); err != nil {
			return err
		}
		status, err := r.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("reading the status line: %w", err)
		}
		if !bytes.HasPrefix(status, []byte("HTTP/1.1 200 ")) {
			return fmt.Errorf("answer: %q", status)
		}
		n := -1
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return fmt.Errorf("reading headers: %w", err)
			}
			if len(line) <= 2 {
				break
			}
			if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
				n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
			}
		}
		if n <= 0 {
			return errors.New("an answer without a Content-Length body")
		}
		body = body[:0]
		if cap(body) < n {
			body = make([]byte, n)
		}
		if _, err := io.ReadFull(r, body[:n]); err != nil {
			return fmt.Errorf("reading the body: %w", err)
		}
	}
	return nil
}
