package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/server"
)

// TestAuditListingsAreBounded: GET /v1/audit writes up to 256 records of
// a MiB each; a tenant's listings in progress are bounded (two at once,
// the next is a 429 with Retry-After), so that clients that do not read
// cannot hold one answer each in the server's memory, and another tenant
// still gets its own. Once the slow clients go, listings are answered
// again, whole and in order.
func TestAuditListingsAreBounded(t *testing.T) {
	f := newFixture(t)
	pad := strings.Repeat("x", 900<<10)
	for i := range 40 {
		job := fmt.Sprintf(`{"kind":"starlark","code":"result = %d\n#%s"}`, i, pad)
		if r := f.do("POST", "/v1/run", keyA, job); r.status != 200 {
			t.Fatalf("run %d: %d %.300s", i, r.status, r.body)
		}
	}
	addr := strings.TrimPrefix(f.http.URL, "http://")
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	type slowClient struct {
		c    net.Conn
		resp *http.Response
	}
	var slow []slowClient
	defer func() {
		for _, sc := range slow {
			sc.c.Close()
		}
	}()
	for range 2 {
		// A small receive buffer, set before connecting (the window is
		// agreed then), so that the answer does not fit in the kernel.
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10) })
		}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		slow = append(slow, slowClient{c: c})
		fmt.Fprintf(c, "GET /v1/audit HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", addr, keyA)
		// Its status line comes with the first records: the listing is
		// being written, and the rest waits for the client to read.
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4<<10), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("slow listing: %v %v", resp, err)
		}
		slow[len(slow)-1].resp = resp
	}
	// Each listing holds about a record, not a copy of the answer (two
	// of about 37 MB here).
	if grown := int64(heap()) - int64(before); grown > 16<<20 {
		t.Errorf("two listings in progress hold %d MiB", grown>>20)
	}
	r := f.do("GET", "/v1/audit", keyA, nil)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), `"kind":"overloaded"`) {
		t.Fatalf("a third listing while two are stuck: %d %v %.200s", r.status, r.header, r.body)
	}
	if r := f.do("GET", "/v1/audit", keyB, nil); r.status != 200 {
		t.Errorf("tenant b's listing: %d %.200s", r.status, r.body)
	}
	// The slow clients get what they ask for when they read.
	for _, sc := range slow {
		var recs []server.Record
		if err := json.NewDecoder(sc.resp.Body).Decode(&recs); err != nil || len(recs) != 40 {
			t.Fatalf("slow listing: %d records, %v", len(recs), err)
		}
		sc.c.Close()
	}
	slow = nil
	var recs []server.Record
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if r = f.do("GET", "/v1/audit", keyA, nil); r.status == 200 {
			break
		}
	}
	r.decode(t, &recs)
	if r.status != 200 || len(recs) != 40 {
		t.Fatalf("listing after the slow clients left: %d, %d records", r.status, len(recs))
	}
	for i, rec := range recs {
		if rec.Job == nil || !strings.HasPrefix(rec.Job.Code, fmt.Sprintf("result = %d\n", i)) {
			t.Errorf("record %d is not run %d", i, i)
			break
		}
	}
}
