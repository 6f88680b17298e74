package server_test

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/server"
)

// TestUnreadAnswersAreDropped: an answer is held in memory until the
// client takes it, after the run's slot is free again. A client that never
// reads, of a JSON or a streamed answer, is cut off once a write has
// waited the answer write timeout, so
// a tenant cannot pile up answers of 12 MB each (or their handlers)
// without bound by sending runs and never reading.
func TestUnreadAnswersAreDropped(t *testing.T) {
	defer server.SetAnswerWriteTimeout(time.Second)()
	f := newFixture(t)
	job := `{"kind":"starlark","code":"print('x' * (6 << 20))\nresult = 'y' * (6 << 20)","limits":{"output_bytes":16777216,"memory_mb":1024}}`
	if r := f.do("POST", "/v1/run", keyA, job); r.status != 200 || len(r.body) < 12<<20 {
		t.Fatalf("a run read at once: %d, %d bytes", r.status, len(r.body))
	}
	f.http.Client().CloseIdleConnections()
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	goroutines, before := runtime.NumGoroutine(), heap()
	addr := strings.TrimPrefix(f.http.URL, "http://")
	const n = 6
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10) })
		}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		// Half of them streamed: the output, then the Result.
		accept := []string{"application/json", "application/x-ndjson"}[i%2]
		fmt.Fprintf(c, "POST /v1/run HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: %s\r\nContent-Length: %d\r\n\r\n%s", addr, keyA, accept, len(job), job)
	}
	// Every run is over (its record is written before its answer).
	for deadline := time.Now().Add(time.Minute); strings.Count(strings.Join(f.audit.Lines(), "\n"), `"outcome":"ok"`) < n+1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the runs did not end")
		}
	}
	// The answers stuck in their first write are given up after a
	// second, and their memory and goroutines with them.
	var grown int64
	var extra int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		grown, extra = int64(heap())-int64(before), runtime.NumGoroutine()-goroutines
		if grown < 16<<20 && extra <= 2 {
			return
		}
	}
	t.Errorf("%d answers nobody reads still hold %d MiB and %d goroutines", n, grown>>20, extra)
}
