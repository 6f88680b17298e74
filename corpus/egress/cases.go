// Package egresscases holds the egress and output-sanitiser cases as data:
// egress.jsonl (requests and DNS queries against a real proxy and
// resolver) and output.jsonl (documents for the sanitiser). They live in a
// subfolder because they are not Jobs: the root corpus loader reads only
// corpus/*.jsonl. See README.md here for the schema.
package egresscases

import (
	"bufio"
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/corpus"
	"github.com/airlock-sandbox/airlock/egress/sanitize"
)

//go:embed *.jsonl
var files embed.FS

// Class says whether a case is an attack (must be refused or neutralised)
// or benign (must keep working): the root corpus's classes.
type Class = corpus.Class

// The classes.
const (
	Attack = corpus.Attack
	Benign = corpus.Benign
)

// Request is one egress case: an HTTP request through a door of the
// gateway, or a DNS query.
type Request struct {
	ID        string            `json:"id"`
	Class     Class             `json:"class"`
	Via       string            `json:"via"` // proxy, connect, client, dns
	Method    string            `json:"method,omitempty"`
	URL       string            `json:"url,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	Host      string            `json:"host,omitempty"`   // a Host header other than the URL's
	SNI       string            `json:"sni,omitempty"`    // connect: a TLS server name other than the URL's host
	Follow    bool              `json:"follow,omitempty"` // follow redirects; the verdict is the last hop's
	Body      string            `json:"body,omitempty"`
	Raw       string            `json:"raw,omitempty"`   // proxy, connect: the bytes written (inside the tunnel to url's host for connect)
	QName     string            `json:"qname,omitempty"` // dns
	QType     string            `json:"qtype,omitempty"` // dns (default A)
	Expect    string            `json:"expect"`          // allow or deny
	Rationale string            `json:"rationale"`
	Source    string            `json:"source"`
}

// Document is one sanitiser case.
type Document struct {
	ID        string         `json:"id"`
	Class     Class          `json:"class"`
	Allow     []string       `json:"allow"`
	Input     string         `json:"input"`
	Expect    DocumentExpect `json:"expect"`
	Rationale string         `json:"rationale"`
	Source    string         `json:"source"`
}

// DocumentExpect is what the sanitiser must produce.
type DocumentExpect struct {
	Unchanged   bool     `json:"unchanged,omitempty"` // the output is byte-identical to the input
	Output      *string  `json:"output,omitempty"`    // the exact output
	Contains    []string `json:"contains,omitempty"`
	NotContains []string `json:"not_contains,omitempty"`
}

// Requests returns the cases of egress.jsonl.
func Requests() ([]Request, error) {
	return load("egress.jsonl", func(r *Request) (meta, error) {
		switch {
		case r.Via != "proxy" && r.Via != "connect" && r.Via != "client" && r.Via != "dns":
			return meta{}, fmt.Errorf("via %q (want proxy, connect, client or dns)", r.Via)
		case r.Expect != "allow" && r.Expect != "deny":
			return meta{}, fmt.Errorf("expect %q (want allow or deny)", r.Expect)
		case r.Via == "dns" && r.QName == "":
			return meta{}, fmt.Errorf("a dns case needs qname")
		case r.Raw != "" && r.Via != "proxy" && r.Via != "connect":
			return meta{}, fmt.Errorf("raw is for the proxy and connect doors, not %s", r.Via)
		case r.Via != "dns" && r.URL == "" && (r.Raw == "" || r.Via == "connect"):
			return meta{}, fmt.Errorf("a %s case needs url", r.Via)
		}
		return meta{r.ID, r.Class, r.Rationale, r.Source}, nil
	})
}

// Documents returns the cases of output.jsonl.
func Documents() ([]Document, error) {
	return load("output.jsonl", func(d *Document) (meta, error) {
		e := d.Expect
		if !e.Unchanged && e.Output == nil && len(e.Contains) == 0 && len(e.NotContains) == 0 {
			return meta{}, fmt.Errorf("expect says nothing")
		}
		return meta{d.ID, d.Class, d.Rationale, d.Source}, nil
	})
}

// meta are the fields every case has.
type meta struct {
	id                string
	class             Class
	rationale, source string
}

func (m meta) check() error {
	switch {
	case m.id == "":
		return fmt.Errorf("no id")
	case m.class != Attack && m.class != Benign:
		return fmt.Errorf("%s: class %q (want attack or benign)", m.id, m.class)
	case strings.TrimSpace(m.rationale) == "" || strings.TrimSpace(m.source) == "":
		return fmt.Errorf("%s: rationale and source are required", m.id)
	}
	return nil
}

// load decodes each line of an embedded file strictly into a T, lets
// validate check it, and refuses duplicate ids.
func load[T any](name string, validate func(*T) (meta, error)) ([]T, error) {
	data, err := files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var out []T
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' || bytes.HasPrefix(line, []byte("//")) {
			continue
		}
		var v T
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("%s:%d: trailing data", name, n)
		}
		m, err := validate(&v)
		if err == nil {
			err = m.check()
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		if prev, dup := seen[m.id]; dup {
			return nil, fmt.Errorf("%s:%d: id %q already used on line %d", name, n, m.id, prev)
		}
		seen[m.id] = n
		out = append(out, v)
	}
	return out, sc.Err()
}

// Sanitise is an output sanitiser as the document cases see it: it
// rewrites input under the allowlist and says how many URLs it
// neutralised.
type Sanitise func(allow []string, input string) (output string, findings int, err error)

// Sanitiser is the real output sanitiser (egress/sanitize) as a Sanitise.
func Sanitiser(allow []string, input string) (string, int, error) {
	s, err := sanitize.New(allow...)
	if err != nil {
		return "", 0, err
	}
	out, findings := s.Markdown([]byte(input))
	return string(out), len(findings), nil
}

// Check runs the document through sanitise and returns the ways it failed
// (none: it passed) and the output. Attacks must lose their offending
// URLs and produce at least one finding; benign documents must come back
// as expected (byte-identical where nothing needed changing); every output
// must be a fixed point (sanitising it again changes nothing).
func (d Document) Check(sanitise Sanitise) (problems []string, output string) {
	got, findings, err := sanitise(d.Allow, d.Input)
	if err != nil {
		return []string{"sanitiser: " + err.Error()}, ""
	}
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	e := d.Expect
	if e.Unchanged && got != d.Input {
		bad("changed a benign document: %q", got)
	}
	if e.Output != nil && got != *e.Output {
		bad("output %q, want %q", got, *e.Output)
	}
	for _, c := range e.Contains {
		if !strings.Contains(got, c) {
			bad("output lacks %q: %q", c, got)
		}
	}
	for _, c := range e.NotContains {
		if strings.Contains(strings.ToLower(got), strings.ToLower(c)) {
			bad("output still holds %q: %q", c, got)
		}
	}
	if d.Class == Attack && findings == 0 {
		bad("attack neutralised without a finding")
	}
	if again, _, err := sanitise(d.Allow, got); err != nil || again != got {
		bad("not a fixed point: %q, then %q (%v)", got, again, err)
	}
	return problems, got
}
