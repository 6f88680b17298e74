package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/connset"
	"github.com/miekg/dns"
)

// dnsTTL is the TTL of every answer: short, so a sandbox re-asks (and the
// gateway re-checks) often.
const dnsTTL = 30

// maxDNSMessage bounds a DNS-over-TCP message read from a stream.
const maxDNSMessage = 4096

// answerDNS answers one query under the policy. Names no rule grants are
// refused here, without any upstream lookup, so data encoded in labels
// never leaves; granted names get A/AAAA answers from the pins or the
// upstream, with forbidden addresses removed.
func (e *engine) answerDNS(ctx context.Context, req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	m.Authoritative = false
	rec := Record{Via: "dns"}
	done := func(rcode int, v Verdict, reason string) *dns.Msg {
		m.Rcode = rcode
		rec.Verdict, rec.Reason = v, reason
		e.record(rec)
		return m
	}
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		return done(dns.RcodeNotImplemented, Deny, "only single-question queries are answered")
	}
	q := req.Question[0]
	rec.Host, rec.Method = strings.TrimSuffix(q.Name, "."), dns.TypeToString[q.Qtype]
	if rec.Method == "" {
		rec.Method = dns.Type(q.Qtype).String()
	}
	if !e.dnsLimit.Allow() {
		return done(dns.RcodeRefused, Deny, "query rate limit exceeded")
	}
	if q.Qclass != dns.ClassINET {
		return done(dns.RcodeRefused, Deny, "only class IN is answered")
	}
	name, err := NormalizeHost(rec.Host)
	if err != nil {
		return done(dns.RcodeRefused, Deny, err.Error())
	}
	rec.Host = name
	if !e.policy.AllowsName(name) {
		return done(dns.RcodeRefused, Deny, "name "+name+" is not granted")
	}
	switch q.Qtype {
	case dns.TypeA, dns.TypeAAAA:
	case dns.TypeCNAME:
		// Answers are flattened: a granted name's addresses are given
		// under the name itself, so there is no alias to follow.
		return done(dns.RcodeSuccess, Allow, "granted name; answers are flattened, no CNAME")
	default:
		return done(dns.RcodeRefused, Deny, "query type "+rec.Method+" is not answered (only A, AAAA and CNAME)")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	network := "ip4"
	if q.Qtype == dns.TypeAAAA {
		network = "ip6"
	}
	addrs, err := e.res.resolve(ctx, network, name)
	if err != nil {
		var pe policyError
		if errors.As(err, &pe) {
			return done(dns.RcodeRefused, Deny, err.Error())
		}
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return done(dns.RcodeSuccess, Allow, "granted name; no "+rec.Method+" records")
		}
		return done(dns.RcodeServerFailure, Deny, err.Error())
	}
	hdr := dns.RR_Header{Name: dns.Fqdn(name), Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: dnsTTL}
	for _, a := range addrs {
		switch {
		case q.Qtype == dns.TypeA && a.Is4():
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IP(a.AsSlice())})
		case q.Qtype == dns.TypeAAAA && a.Is6():
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.IP(a.AsSlice())})
		}
	}
	// The answer names the queried spelling, as resolvers expect.
	for _, rr := range m.Answer {
		rr.Header().Name = q.Name
	}
	return done(dns.RcodeSuccess, Allow, "granted name")
}

// dnsHandler serves the resolver's UDP and TCP listeners.
func (e *engine) dnsHandler(ctx context.Context) dns.Handler {
	return dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		_ = w.WriteMsg(e.answerDNS(ctx, req))
	})
}

// refuseDNS logs a DNS message refused before it could be read as a
// query: like a request the proxy cannot parse, it leaves a record.
func (e *engine) refuseDNS(reason string) {
	e.record(Record{Via: "dns", Verdict: Deny, Reason: "malformed DNS message: " + reason})
}

// dnsServer is a resolver's server on pc or ln, logging every message it
// drops or refuses without calling the handler (see refuseDNS).
func (e *engine) dnsServer(pc net.PacketConn, ln net.Listener, h dns.Handler) *dns.Server {
	return &dns.Server{
		PacketConn: pc,
		Listener:   ln,
		Handler:    h,
		MsgAcceptFunc: func(dh dns.Header) dns.MsgAcceptAction {
			action := dns.DefaultMsgAcceptFunc(dh)
			switch action {
			case dns.MsgAccept:
			case dns.MsgIgnore:
				e.refuseDNS("a response, not a query")
			case dns.MsgRejectNotImplemented:
				e.refuseDNS("opcode " + dns.OpcodeToString[int(dh.Bits>>11)&0xF] + " is not answered")
			case dns.MsgReject:
				if dh.Qdcount != 1 {
					e.refuseDNS(fmt.Sprintf("%d questions (a query has one)", dh.Qdcount))
				} else {
					e.refuseDNS("more records than a query has")
				}
			default:
				e.refuseDNS("refused")
			}
			return action
		},
		MsgInvalidFunc: func(_ []byte, err error) { e.refuseDNS(err.Error()) },
	}
}

// serveDNSStream answers DNS-over-TCP framed queries (two-byte length,
// then the message) on one stream until it ends: the form DNS takes over
// the gateway's Unix socket.
func (e *engine) serveDNSStream(ctx context.Context, c net.Conn) {
	defer c.Close()
	var lenBuf [2]byte
	buf := make([]byte, maxDNSMessage)
	for {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(lenBuf[:]))
		if n > maxDNSMessage || n < 12 {
			e.refuseDNS(fmt.Sprintf("a frame of %d bytes (want 12 to %d)", n, maxDNSMessage))
			return
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			e.refuseDNS("cut short: " + err.Error())
			return
		}
		req := new(dns.Msg)
		if err := req.Unpack(buf[:n]); err != nil {
			e.refuseDNS(err.Error())
			return
		}
		out, err := e.answerDNS(ctx, req).Pack()
		if err != nil {
			return
		}
		if err := connset.WriteFramed(c, out); err != nil {
			return
		}
	}
}
