package egress_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/egressfwd"
	"github.com/miekg/dns"
)

func benchGet(b *testing.B, c *http.Client, url string) {
	b.Helper()
	for b.Loop() {
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkProxy compares a GET to the loopback origin made directly (raw)
// with the same GET through each door of the gateway, in the same run.
func BenchmarkProxy(b *testing.B) {
	sock := b.TempDir() + "/egress.sock"
	env := newTestEnv(b, func(c *egress.Config) { c.Log = nil; c.Socket = sock })
	httpURL := "http://origin.test:" + env.HTTPPort + "/ok"
	httpsURL := "https://origin.test:" + env.HTTPSPort + "/ok"
	viaProxy := func(proxy string) *http.Client {
		return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL(proxy)), TLSClientConfig: &tls.Config{RootCAs: env.Roots}}}
	}
	b.Run("raw", func(b *testing.B) {
		benchGet(b, &http.Client{Transport: &http.Transport{}}, env.HTTP.URL+"/ok")
	})
	b.Run("proxy", func(b *testing.B) { benchGet(b, viaProxy("http://"+env.GW.ProxyAddr().String()), httpURL) })
	b.Run("client", func(b *testing.B) { benchGet(b, env.GW.Client(), httpURL) })
	b.Run("forwarder", func(b *testing.B) {
		f, err := egressfwd.StartForwarder(context.Background(), sock, egressfwd.ForwarderConfig{HTTP: "127.0.0.1:0", DNS: "-"})
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		benchGet(b, viaProxy("http://"+f.HTTPAddr().String()), httpURL)
	})
	b.Run("raw-https", func(b *testing.B) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: env.OriginRoots, ServerName: "origin.test"}}
		benchGet(b, &http.Client{Transport: tr}, env.HTTPS.URL+"/ok")
	})
	b.Run("connect-https", func(b *testing.B) { benchGet(b, viaProxy("http://"+env.GW.ProxyAddr().String()), httpsURL) })
}

// BenchmarkDNS compares a query answered by the upstream server directly
// (raw) with the same name answered by the gateway's resolver (allowed,
// through the upstream) and a refused one.
func BenchmarkDNS(b *testing.B) {
	env := newTestEnv(b, func(c *egress.Config) { c.Log = nil; c.DNSRate = 1e9; c.DNSBurst = 1 << 30 })
	cl := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	run := func(b *testing.B, name, server string, wantRcode int) {
		m := new(dns.Msg).SetQuestion(name, dns.TypeA)
		for b.Loop() {
			r, _, err := cl.Exchange(m, server)
			if err != nil || r.Rcode != wantRcode {
				b.Fatalf("%v %v", r, err)
			}
		}
	}
	b.Run("raw", func(b *testing.B) { run(b, "public.test.", env.Upstream, dns.RcodeSuccess) })
	b.Run("gateway", func(b *testing.B) { run(b, "public.test.", env.GW.DNSAddr().String(), dns.RcodeSuccess) })
	b.Run("gateway-pinned", func(b *testing.B) { run(b, "origin.test.", env.GW.DNSAddr().String(), dns.RcodeSuccess) })
	b.Run("gateway-refused", func(b *testing.B) { run(b, "evil.test.", env.GW.DNSAddr().String(), dns.RcodeRefused) })
}
