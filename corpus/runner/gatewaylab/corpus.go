package gatewaylab

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock"
	egresscases "github.com/airlock-sandbox/airlock/corpus/egress"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// Judgement is what one egress case did.
type Judgement struct {
	// Got is allow (the origin answered, or the name resolved) or deny.
	Got    string
	Detail string
	// Problems are the ways the case failed; none means it passed.
	Problems []string
	// Reached lists what the origins saw of a refused request: the
	// evidence of an escape.
	Reached []string
}

// Pass reports whether the case passed.
func (j Judgement) Pass() bool { return len(j.Problems) == 0 }

// Run performs one case and judges it: the outcome must match the case's
// expectation, a decision with that verdict must be logged with job, via
// and reason (and, for an allowed request, the address dialled), and a
// refused request must never reach the origin (for a redirect: its
// target). Cases share an Env one at a time, never concurrently.
func (env *Env) Run(c egresscases.Request) Judgement {
	env.TakeLogs()
	env.mu.Lock()
	before := len(env.hits)
	env.mu.Unlock()
	stealBefore := env.HitsOf("/steal")
	var j Judgement
	j.Got, j.Detail = env.perform(c, &j)
	logs := env.TakeLogs()
	bad := func(format string, args ...any) { j.Problems = append(j.Problems, fmt.Sprintf(format, args...)) }
	if j.Got != c.Expect {
		bad("got %s, want %s (%s)", j.Got, c.Expect, value.Clip(j.Detail, 300))
	}
	want := egress.Allow
	if c.Expect == "deny" {
		want = egress.Deny
	}
	if !hasVerdict(logs, want) {
		bad("no %s decision logged: %+v", want, logs)
	}
	for _, l := range logs {
		if l.Job != JobName || l.Via == "" || l.Reason == "" || l.Time.IsZero() {
			bad("incomplete log record %+v", l)
		}
	}
	if c.Expect == "allow" && c.Via != "dns" && !hasAddr(logs) {
		bad("allowed request logged without the dialled address: %+v", logs)
	}
	if c.Expect == "deny" {
		env.mu.Lock()
		seen := append([]string(nil), env.hits[before:]...)
		env.mu.Unlock()
		switch {
		case c.Follow && env.HitsOf("/steal") != stealBefore:
			j.Reached = seen
			bad("the redirect target was reached")
		case !c.Follow && c.Via != "dns" && len(seen) > 0:
			j.Reached = seen
			bad("a refused request reached the origin")
		}
	}
	return j
}

func hasAddr(logs []egress.Record) bool {
	for _, l := range logs {
		if l.Verdict == egress.Allow && strings.HasPrefix(l.Addr, "127.0.0.1:") {
			return true
		}
	}
	return false
}

func hasVerdict(logs []egress.Record, v egress.Verdict) bool {
	for _, l := range logs {
		if l.Verdict == v {
			return true
		}
	}
	return false
}

// perform makes the case's request and reports allow or deny.
func (env *Env) perform(c egresscases.Request, j *Judgement) (verdict, detail string) {
	if c.Via == "dns" {
		return env.query(c)
	}
	if c.Raw != "" {
		return env.raw(c)
	}
	var body io.Reader
	if c.Body != "" {
		body = strings.NewReader(c.Body)
	}
	req, err := http.NewRequest(c.Method, env.Expand(c.URL), body)
	if err != nil {
		j.Problems = append(j.Problems, "building the request: "+err.Error())
		return "error", err.Error()
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
		resp, err = env.ProxyClient(c.Follow, c.SNI).Do(req)
	case "client":
		if !c.Follow {
			resp, err = env.GW.RoundTrip(req)
		} else {
			resp, err = env.GW.Do(req)
		}
		var d *airlock.Denied
		if err != nil && (!errors.As(err, &d) || d.Capability != "net") {
			j.Problems = append(j.Problems, fmt.Sprintf("in-process refusal is not an *airlock.Denied{net}: %v", err))
		}
	}
	if err != nil {
		return "deny", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.Header.Get("X-Origin") == "yes" && resp.StatusCode < 400 {
		return "allow", resp.Status
	}
	return "deny", resp.Status + ": " + string(b)
}

// raw writes the case's bytes to the proxy, or inside a tunnel to the
// URL's host for via connect.
func (env *Env) raw(c egresscases.Request) (string, string) {
	tunnel := ""
	if c.Via == "connect" {
		u, err := url.Parse(env.Expand(c.URL))
		if err != nil || u.Port() == "" {
			return "error", fmt.Sprintf("a raw connect case needs a URL with a port: %q", c.URL)
		}
		tunnel = u.Host
	}
	resp, err := env.Raw(tunnel, env.Expand(c.Raw))
	if err != nil {
		return "deny", err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("X-Origin") == "yes" && resp.StatusCode < 400 {
		return "allow", resp.Status
	}
	return "deny", resp.Status + ": " + string(b)
}

func (env *Env) query(c egresscases.Request) (string, string) {
	qtype := dns.TypeA
	if c.QType != "" {
		var ok bool
		if qtype, ok = dns.StringToType[c.QType]; !ok {
			return "error", "unknown qtype " + c.QType
		}
	}
	m := new(dns.Msg)
	m.SetQuestion(c.QName, qtype)
	cl := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	r, _, err := cl.Exchange(m, env.GW.DNSAddr().String())
	if err != nil {
		return "error", "exchange: " + err.Error()
	}
	if r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
		return "allow", r.String()
	}
	return "deny", dns.RcodeToString[r.Rcode]
}
