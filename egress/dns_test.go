package egress_test

import (
	"encoding/binary"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress"
)

// TestMalformedDNSLogged: a DNS message the resolver will not answer
// because it is not a query it can read (cut short, a bad length frame, a
// response, two questions, an update) is refused with a record, on the
// gateway's socket (the sandbox's resolver) and on its UDP listener, as
// the proxy logs a request it cannot parse: a job probing the resolver
// leaves a trace.
func TestMalformedDNSLogged(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "g.sock")
	env := newTestEnv(t, func(c *egress.Config) { c.Socket = sock })
	good, err := new(dns.Msg).SetQuestion("origin.test.", dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	cut := good[:len(good)-3]
	response := append([]byte(nil), good...)
	response[2] |= 0x80 // QR: a response
	two := new(dns.Msg)
	two.Question = []dns.Question{{Name: "origin.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET}, {Name: "evil.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET}}
	twoQ, err := two.Pack()
	if err != nil {
		t.Fatal(err)
	}
	update := new(dns.Msg).SetUpdate("origin.test.")
	updateB, err := update.Pack()
	if err != nil {
		t.Fatal(err)
	}
	frame := func(n int, msg []byte) []byte {
		b := []byte{egress.StreamDNS, 0, 0}
		binary.BigEndian.PutUint16(b[1:], uint16(n))
		return append(b, msg...)
	}
	for _, c := range []struct {
		name string
		send []byte
	}{
		{"cut short", frame(len(cut), cut)},
		{"frame under a header", frame(5, good[:5])},
		{"frame over the bound", frame(5000, good)},
	} {
		env.TakeLogs()
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(c.send); err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		_, _ = conn.Read(b[:]) // the gateway ends the stream
		conn.Close()
		if !loggedDNSRefusal(env.TakeLogs()) {
			t.Errorf("socket, %s: no refusal logged", c.name)
		}
	}
	for _, c := range []struct {
		name string
		send []byte
	}{
		{"cut short", cut},
		{"a response", response},
		{"two questions", twoQ},
		{"an update", updateB},
	} {
		env.TakeLogs()
		conn, err := net.Dial("udp", env.GW.DNSAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Write(c.send); err != nil {
			t.Fatal(err)
		}
		var b [512]byte
		_, _ = conn.Read(b[:]) // an answer, or none for a response
		conn.Close()
		var logs []egress.Record
		for i := 0; i < 100 && !loggedDNSRefusal(logs); i++ {
			time.Sleep(10 * time.Millisecond)
			logs = append(logs, env.TakeLogs()...)
		}
		if !loggedDNSRefusal(logs) {
			t.Errorf("udp, %s: no refusal logged", c.name)
		}
	}
}

func loggedDNSRefusal(logs []egress.Record) bool {
	for _, l := range logs {
		if l.Via == "dns" && l.Verdict == egress.Deny && strings.Contains(l.Reason, "DNS message") && !l.Time.IsZero() {
			return true
		}
	}
	return false
}
