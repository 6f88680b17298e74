//go:build linux

package egress_test

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/egressfwd"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// TestSystemLookupIgnoresSearchDomains: the host's resolver may have
// search domains (resolv.conf "search corp.test"); a granted name that
// does not resolve must not be resolved as NAME.corp.test instead, which
// is another host than the one granted (an internal one, say), and would
// carry the job's labels to the search domain's name servers. Run in a
// child with its own mount and network namespaces, whose resolv.conf
// names a resolver on its loopback.
func TestSystemLookupIgnoresSearchDomains(t *testing.T) {
	if testenv.Inside(t) {
		lookupChild(t)
		return
	}
	testenv.InNamespaces(t, syscall.CLONE_NEWNET|syscall.CLONE_NEWNS, time.Minute, "GODEBUG=netdns=go")
}

func lookupChild(t *testing.T) {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(conf, []byte("nameserver 127.0.0.1\nsearch corp.test\noptions ndots:1 attempts:1 timeout:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(conf, "/etc/resolv.conf", "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := egressfwd.LoopbackUp(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked []string
	answers := map[string]string{
		"api.example.test.corp.test.": "93.184.215.14", // what a search domain would make of the granted name
		"ok.example.test.":            "93.184.215.15",
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:53")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		mu.Lock()
		asked = append(asked, q.Name)
		mu.Unlock()
		if a, ok := answers[strings.ToLower(q.Name)]; ok && q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.ParseIP(a)})
		} else if !ok {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	defer srv.Shutdown()

	ctx := context.Background()
	if addrs, err := egress.SystemLookup(ctx, "ip4", "ok.example.test"); err != nil || len(addrs) != 1 || addrs[0] != netip.MustParseAddr("93.184.215.15") {
		t.Fatalf("ok.example.test: %v %v", addrs, err)
	}
	addrs, err := egress.SystemLookup(ctx, "ip4", "api.example.test")
	if err == nil {
		t.Errorf("api.example.test resolved to %v: through the search domain", addrs)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, q := range asked {
		if strings.HasSuffix(q, ".corp.test.") {
			t.Errorf("the upstream was asked %s", q)
		}
	}
}
