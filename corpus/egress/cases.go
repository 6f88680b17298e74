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
)

//go:embed *.jsonl
var files embed.FS

// Class says whether a case is an attack (must be refused or neutralised)
// or benign (must keep working).
type Class string

// The classes.
const (
	Attack Class = "attack"
	Benign Class = "benign"
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
	var out []Request
	err := load("egress.jsonl", func(id string, line []byte) error {
		var r Request
		if err := strict(line, &r); err != nil {
			return err
		}
		switch {
		case r.Via != "proxy" && r.Via != "connect" && r.Via != "client" && r.Via != "dns":
			return fmt.Errorf("via %q (want proxy, connect, client or dns)", r.Via)
		case r.Expect != "allow" && r.Expect != "deny":
			return fmt.Errorf("expect %q (want allow or deny)", r.Expect)
		case r.Via == "dns" && r.QName == "", r.Via != "dns" && r.URL == "":
			return fmt.Errorf("a %s case needs %s", r.Via, map[bool]string{true: "qname", false: "url"}[r.Via == "dns"])
		}
		out = append(out, r)
		return check(id, r.ID, r.Class, r.Rationale, r.Source)
	})
	return out, err
}

// Documents returns the cases of output.jsonl.
func Documents() ([]Document, error) {
	var out []Document
	err := load("output.jsonl", func(id string, line []byte) error {
		var d Document
		if err := strict(line, &d); err != nil {
			return err
		}
		e := d.Expect
		if !e.Unchanged && e.Output == nil && len(e.Contains) == 0 && len(e.NotContains) == 0 {
			return fmt.Errorf("expect says nothing")
		}
		out = append(out, d)
		return check(id, d.ID, d.Class, d.Rationale, d.Source)
	})
	return out, err
}

func strict(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}

func check(_, id string, class Class, rationale, source string) error {
	switch {
	case id == "":
		return fmt.Errorf("no id")
	case class != Attack && class != Benign:
		return fmt.Errorf("%s: class %q (want attack or benign)", id, class)
	case strings.TrimSpace(rationale) == "" || strings.TrimSpace(source) == "":
		return fmt.Errorf("%s: rationale and source are required", id)
	}
	return nil
}

func load(name string, each func(id string, line []byte) error) error {
	data, err := files.ReadFile(name)
	if err != nil {
		return err
	}
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' || bytes.HasPrefix(line, []byte("//")) {
			continue
		}
		var head struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(line, &head)
		if prev, dup := seen[head.ID]; dup && head.ID != "" {
			return fmt.Errorf("%s:%d: id %q already used on line %d", name, n, head.ID, prev)
		}
		seen[head.ID] = n
		if err := each(head.ID, line); err != nil {
			return fmt.Errorf("%s:%d: %w", name, n, err)
		}
	}
	return sc.Err()
}
