package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/pgtest"
	"github.com/airlock-sandbox/airlock/server"
)

// TestServeReplicas runs three `airlock serve` processes over one
// PostgreSQL database, configured as in deploy/kubernetes: the state and
// the advertised address from the environment. Sessions are reached from
// any replica; a replica killed with SIGKILL leaves its sessions lost, a
// drained one leaves them closed.
func TestServeReplicas(t *testing.T) {
	dsn := pgtest.Start(t)
	start := func(id string) *child {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // the child listens here; nothing else takes a port this fresh
		_, config := writeConfig(t, "replica_id: "+id+"\nstate: env:AIRLOCK_STATE\nadvertise: env:AIRLOCK_ADVERTISE\nsession_lease: 2s\n")
		return startServeOn(t, config, addr, "AIRLOCK_STATE="+dsn, "AIRLOCK_ADVERTISE=http://"+addr)
	}
	a, b, c := start("a"), start("b"), start("c")
	do := func(c *child, method, path, body string) (int, string, string) {
		req, _ := http.NewRequest(method, "http://"+c.addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get(server.ReplicaHeader), string(data)
	}
	for _, c := range []*child{a, b} {
		if status, replica, body := do(c, "POST", "/v1/run", `{"kind":"expr","code":"6*7"}`); status != 200 || replica == "" || !strings.Contains(body, "42") {
			t.Fatalf("a run: %d from %q: %s", status, replica, body)
		}
	}
	status, _, body := do(a, "POST", "/v1/sessions", `{"tier":"starlark"}`)
	var open struct{ ID string }
	if err := json.Unmarshal([]byte(body), &open); err != nil || status != 201 {
		t.Fatalf("opening a session on a: %d %s", status, body)
	}
	path := fmt.Sprintf("/v1/sessions/%s/run", open.ID)
	if status, replica, body := do(b, "POST", path, `{"kind":"starlark","code":"result = 7"}`); status != 200 || replica != "a" {
		t.Fatalf("the session through b: %d from %q: %s", status, replica, body)
	}
	// kill -9 of c, a separate process: its session is reported lost
	// through b once c's lease lapses (never recreated elsewhere), and the
	// other replicas go on serving.
	status, _, body = do(c, "POST", "/v1/sessions", `{"tier":"starlark"}`)
	var onC struct{ ID string }
	if err := json.Unmarshal([]byte(body), &onC); err != nil || status != 201 {
		t.Fatalf("opening a session on c: %d %s", status, body)
	}
	cPath := fmt.Sprintf("/v1/sessions/%s/run", onC.ID)
	if status, replica, body := do(b, "POST", cPath, `{"kind":"starlark","code":"n = 1"}`); status != 200 || replica != "c" {
		t.Fatalf("c's session through b: %d from %q: %s", status, replica, body)
	}
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.done
	c.done <- nil // for the cleanup
	lost := false
	for deadline := time.Now().Add(30 * time.Second); !lost && time.Now().Before(deadline); {
		status, _, body := do(b, "POST", cPath, `{"kind":"starlark","code":"result = n"}`)
		switch {
		case status == http.StatusGone && strings.Contains(body, "session_lost"):
			lost = true
		case status == http.StatusServiceUnavailable: // c's lease holds yet
			time.Sleep(100 * time.Millisecond)
		default:
			t.Fatalf("c's session after kill -9: %d %s", status, body)
		}
	}
	if !lost {
		t.Fatal("c's session was never reported lost")
	}
	if status, _, body := do(a, "POST", cPath, `{"kind":"starlark","code":"result = 1"}`); status != http.StatusGone {
		t.Errorf("c's session through a: %d %s", status, body)
	}
	for _, r := range []*child{a, b} {
		if status, _, body := do(r, "POST", "/v1/run", `{"kind":"expr","code":"1+1"}`); status != 200 {
			t.Errorf("a run after c died: %d %s", status, body)
		}
	}

	// A drained replica closes its sessions and says so: they are unknown,
	// not lost.
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-a.done; err != nil {
		t.Fatalf("a exited with %v after SIGTERM", err)
	}
	a.done <- nil // for the cleanup
	if status, _, body := do(b, "POST", path, `{"kind":"starlark","code":"result = 7"}`); status != 404 {
		t.Fatalf("the drained replica's session through b: %d %s", status, body)
	}
}
