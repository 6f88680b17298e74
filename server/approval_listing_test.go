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

	"github.com/airlock-sandbox/airlock"
)

// TestApprovalListingsAreBounded: GET /v1/approvals answers with every
// pending job twice (raw and displayed), up to 96 MiB of a tenant's jobs;
// it is written a job at a time, and a tenant's listings and shows in
// progress are bounded (two at once; the next is a 429 with Retry-After),
// so that clients that do not read cannot hold one whole answer each in
// the server's memory. Another tenant still gets its own.
func TestApprovalListingsAreBounded(t *testing.T) {
	f := newFixture(t)
	var digests []string
	for i := range 12 {
		job := starlarkJob(fmt.Sprintf("result = %d", i))
		job.Files = map[string]string{"data.txt": strings.Repeat(fmt.Sprint(i%10), 2<<20)}
		r := f.do("POST", "/v1/approvals", keyA, job)
		var ar struct{ Digest string }
		r.decode(t, &ar)
		if r.status != 200 {
			t.Fatalf("approval request %d: %d %.200s", i, r.status, r.body)
		}
		digests = append(digests, ar.Digest)
	}
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	addr := strings.TrimPrefix(f.http.URL, "http://")
	var slow []net.Conn
	var bodies []*http.Response
	defer func() {
		for _, c := range slow {
			c.Close()
		}
	}()
	for range 2 {
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10) })
		}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		slow = append(slow, c)
		fmt.Fprintf(c, "GET /v1/approvals HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", addr, keyA)
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4<<10), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("slow listing: %v %v", resp, err)
		}
		bodies = append(bodies, resp)
	}
	if grown := int64(heap()) - int64(before); grown > 32<<20 {
		t.Errorf("two listings in progress hold %d MiB", grown>>20)
	}
	for _, path := range []string{"/v1/approvals", "/v1/approvals/" + digests[0]} {
		r := f.do("GET", path, keyA, nil)
		if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
			t.Errorf("GET %s while two listings are stuck: %d %.200s", path, r.status, r.body)
		}
	}
	if r := f.do("GET", "/v1/approvals", keyB, nil); r.status != 200 || string(r.body) != "[]\n" {
		t.Errorf("tenant b's listing: %d %.200s", r.status, r.body)
	}
	for _, resp := range bodies {
		var list []struct {
			Digest string
			Job    *airlock.Job
		}
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list) != 12 {
			t.Fatalf("slow listing read at last: %d approvals, %v", len(list), err)
		}
		seen := map[string]bool{}
		for _, a := range list {
			seen[a.Digest] = a.Job != nil && len(a.Job.Files["data.txt"]) == 2<<20
		}
		for i, d := range digests {
			if !seen[d] {
				t.Errorf("approval %d is not in the listing, or not whole", i)
			}
		}
	}
	for _, c := range slow {
		c.Close()
	}
	slow = nil
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := f.do("GET", "/v1/approvals/"+digests[0], keyA, nil)
		if r.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("showing an approval once the listings ended: %d %.200s", r.status, r.body)
		}
	}
}
