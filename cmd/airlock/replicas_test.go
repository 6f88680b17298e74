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

	"github.com/airlock-sandbox/airlock/internal/testing/pgtest"
	"github.com/airlock-sandbox/airlock/server"
)

// TestServeReplicas runs two `airlock serve` processes over one
// PostgreSQL database, configured as in deploy/kubernetes: the state and
// the advertised address from the environment.
func TestServeReplicas(t *testing.T) {
	dsn := pgtest.Start(t)
	start := func(id string) *child {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // the child listens here; nothing else takes a port this fresh
		_, config := writeConfig(t, "replica_id: "+id+"\nstate: env:AIRLOCK_STATE\nadvertise: env:AIRLOCK_ADVERTISE\n")
		return startServeOn(t, config, addr, "AIRLOCK_STATE="+dsn, "AIRLOCK_ADVERTISE=http://"+addr)
	}
	a, b := start("a"), start("b")
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
