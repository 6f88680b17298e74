package egress

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock"
	egresscases "github.com/airlock-sandbox/airlock/corpus/egress"
)

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// TestCorpusEgress runs every case of corpus/egress/egress.jsonl against a
// real proxy, resolver, origins and upstream on loopback. A case passes
// when the outcome matches its expectation, a matching decision was
// logged, and (for refusals) the origin never saw the refused request.
func TestCorpusEgress(t *testing.T) {
	cases, err := egresscases.Requests()
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 40 {
		t.Fatalf("only %d egress cases loaded", len(cases))
	}
	env := newTestEnv(t, nil)
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.ID, "egress/"), func(t *testing.T) {
			env.takeLogs()
			before := env.hitCount()
			stealBefore := env.hitsOf("/steal")
			got, detail := env.runCase(t, c)
			logs := env.takeLogs()
			if got != c.Expect {
				t.Fatalf("%s: got %s, want %s (%s)\nrationale: %s\nlog: %+v", c.ID, got, c.Expect, detail, c.Rationale, logs)
			}
			want := Allow
			if c.Expect == "deny" {
				want = Deny
			}
			if !hasVerdict(logs, want) {
				t.Errorf("%s: no %s decision logged: %+v", c.ID, want, logs)
			}
			for _, l := range logs {
				if l.Job != "test-job" || l.Via == "" || l.Reason == "" || l.Time.IsZero() {
					t.Errorf("%s: incomplete log record %+v", c.ID, l)
				}
			}
			if c.Expect == "allow" && c.Via != "dns" && !hasAddr(logs) {
				t.Errorf("%s: allowed request logged without the dialled address: %+v", c.ID, logs)
			}
			if c.Expect == "deny" {
				if c.Follow && env.hitsOf("/steal") != stealBefore {
					t.Errorf("%s: the redirect target was reached", c.ID)
				}
				if !c.Follow && c.Via != "dns" && env.hitCount() != before {
					t.Errorf("%s: a refused request reached the origin", c.ID)
				}
			}
		})
	}
}

func hasAddr(logs []Record) bool {
	for _, l := range logs {
		if l.Verdict == Allow && strings.HasPrefix(l.Addr, "127.0.0.1:") {
			return true
		}
	}
	return false
}

func hasVerdict(logs []Record, v Verdict) bool {
	for _, l := range logs {
		if l.Verdict == v {
			return true
		}
	}
	return false
}

// runCase performs one case and reports allow (the origin answered, or the
// name resolved) or deny, with a detail for failures.
func (env *testEnv) runCase(t *testing.T, c egresscases.Request) (verdict, detail string) {
	t.Helper()
	if c.Via == "dns" {
		return env.runDNS(t, c)
	}
	var body io.Reader
	if c.Body != "" {
		body = strings.NewReader(c.Body)
	}
	req, err := http.NewRequest(c.Method, env.expand(c.URL), body)
	if err != nil {
		t.Fatalf("%s: building request: %v", c.ID, err)
	}
	for k, v := range c.Headers {
		req.Header.Set(k, v)
	}
	if c.Host != "" {
		req.Host = c.Host
	}
	var resp *http.Response
	switch c.Via {
	case "proxy", "connect":
		resp, err = env.proxyClient(c.Follow, c.SNI).Do(req)
	case "client":
		if !c.Follow {
			resp, err = env.gw.RoundTrip(req)
		} else {
			resp, err = env.gw.Do(req)
		}
		if err != nil {
			var d *airlock.Denied
			if !errors.As(err, &d) || d.Capability != "net" {
				t.Errorf("%s: in-process refusal is not an *airlock.Denied{net}: %v", c.ID, err)
			}
		}
	}
	if err != nil {
		return "deny", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("X-Origin") == "yes" && resp.StatusCode < 400 {
		return "allow", resp.Status
	}
	return "deny", resp.Status + ": " + string(b)
}

func (env *testEnv) runDNS(t *testing.T, c egresscases.Request) (string, string) {
	qtype := dns.TypeA
	if c.QType != "" {
		var ok bool
		if qtype, ok = dns.StringToType[c.QType]; !ok {
			t.Fatalf("%s: unknown qtype %q", c.ID, c.QType)
		}
	}
	m := new(dns.Msg)
	m.SetQuestion(c.QName, qtype)
	cl := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	r, _, err := cl.Exchange(m, env.gw.DNSAddr().String())
	if err != nil {
		t.Fatalf("%s: exchange: %v", c.ID, err)
	}
	if r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
		return "allow", r.String()
	}
	return "deny", dns.RcodeToString[r.Rcode]
}
