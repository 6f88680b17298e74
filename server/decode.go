package server

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock"
)

// quickJob decodes the common shape of a job — kind, code and the other
// plain string fields, argv, seed, and an input of strings, numbers,
// booleans, arrays and objects — without reflection. It gives up (ok
// false) on anything else: another field, a field or an input key twice, a
// key in another case, a \u escape, invalid UTF-8, a null, a number NormalizeInput would
// make a big integer, trailing data. The caller then decodes with
// airlock.DecodeJob, which stays the definition of a valid job and
// of its errors; on what quickJob accepts the two agree exactly, which
// FuzzQuickJob checks.
func quickJob(data []byte) (job airlock.Job, ok bool) {
	p := parser{data: data}
	if !p.byte('{') {
		return job, false
	}
	var seen uint16
	for empty := p.byte('}'); !empty; {
		key, ok := p.key()
		if !ok || !p.byte(':') {
			return job, false
		}
		bit := uint16(0)
		var dst *string
		switch key {
		case "kind":
			bit, dst = 1<<0, (*string)(&job.Kind)
		case "code":
			bit, dst = 1<<1, &job.Code
		case "entry":
			bit, dst = 1<<2, &job.Entry
		case "stdin":
			bit, dst = 1<<3, &job.Stdin
		case "situation":
			bit, dst = 1<<4, (*string)(&job.Situation)
		case "lifecycle":
			bit, dst = 1<<5, (*string)(&job.Lifecycle)
		case "session":
			bit, dst = 1<<6, &job.Session
		case "tier":
			bit, dst = 1<<7, &job.Tier
		case "argv":
			bit = 1 << 8
		case "seed":
			bit = 1 << 9
		case "input":
			bit = 1 << 10
		default:
			return job, false
		}
		if seen&bit != 0 {
			return job, false
		}
		seen |= bit
		p.space()
		switch key {
		case "argv":
			if job.Argv, ok = p.strings(); !ok {
				return job, false
			}
		case "seed":
			lit, ok := p.number()
			if !ok {
				return job, false
			}
			if job.Seed, ok = parseUint(lit); !ok {
				return job, false
			}
		case "input":
			v, ok := p.value(0)
			m, isMap := v.(map[string]any)
			if !ok || !isMap {
				return job, false
			}
			job.Input = m
		default:
			if *dst, ok = p.string(); !ok {
				return job, false
			}
		}
		p.space()
		if p.byte('}') {
			break
		}
		if !p.byte(',') {
			return job, false
		}
	}
	p.space()
	return job, p.i == len(p.data)
}

func parseUint(lit string) (uint64, bool) {
	if strings.ContainsAny(lit, ".eE-") {
		return 0, false
	}
	n, err := strconv.ParseUint(lit, 10, 64)
	return n, err == nil
}

type parser struct {
	data []byte
	i    int
}

func (p *parser) peek() byte {
	if p.i < len(p.data) {
		return p.data[p.i]
	}
	return 0
}

func (p *parser) space() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte skips white space and then c, reporting whether it was there.
func (p *parser) byte(c byte) bool {
	p.space()
	if p.peek() != c {
		return false
	}
	p.i++
	return true
}

// key reads an object key: lower-case letters and underscores only.
func (p *parser) key() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.data) && (p.data[p.i] >= 'a' && p.data[p.i] <= 'z' || p.data[p.i] == '_') {
		p.i++
	}
	if p.peek() != '"' {
		return "", false
	}
	p.i++
	return string(p.data[start : p.i-1]), true
}

// string reads a string with the short escapes; \u, control characters
// and invalid UTF-8 give up.
func (p *parser) string() (string, bool) {
	if p.peek() != '"' {
		return "", false
	}
	p.i++
	start := p.i
	var sb []byte // only when there are escapes
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			seg := p.data[start:p.i]
			p.i++
			if sb != nil {
				seg = append(sb, seg...)
			}
			if !utf8.Valid(seg) {
				return "", false
			}
			return string(seg), true
		case c < 0x20:
			return "", false
		case c == '\\':
			if p.i+1 >= len(p.data) {
				return "", false
			}
			var r byte
			switch p.data[p.i+1] {
			case '"', '\\', '/':
				r = p.data[p.i+1]
			case 'n':
				r = '\n'
			case 't':
				r = '\t'
			case 'r':
				r = '\r'
			case 'b':
				r = '\b'
			case 'f':
				r = '\f'
			default:
				return "", false
			}
			sb = append(append(sb, p.data[start:p.i]...), r)
			p.i += 2
			start = p.i
		default:
			p.i++
		}
	}
	return "", false
}

func (p *parser) strings() ([]string, bool) {
	if !p.byte('[') {
		return nil, false
	}
	list := []string{}
	p.space()
	if p.byte(']') {
		return list, true
	}
	for {
		p.space()
		s, ok := p.string()
		if !ok {
			return nil, false
		}
		list = append(list, s)
		if p.byte(']') {
			return list, true
		}
		if !p.byte(',') {
			return nil, false
		}
	}
}

// number reads a JSON number's literal, by the JSON grammar.
func (p *parser) number() (string, bool) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	switch c := p.peek(); {
	case c == '0':
		p.i++
	case c >= '1' && c <= '9':
		p.digits()
	default:
		return "", false
	}
	if p.peek() == '.' {
		p.i++
		if !p.digits() {
			return "", false
		}
	}
	if c := p.peek(); c == 'e' || c == 'E' {
		p.i++
		if c := p.peek(); c == '+' || c == '-' {
			p.i++
		}
		if !p.digits() {
			return "", false
		}
	}
	return string(p.data[start:p.i]), true
}

func (p *parser) digits() bool {
	start := p.i
	for p.i < len(p.data) && p.data[p.i] >= '0' && p.data[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

// maxDepth bounds the nesting quickJob follows; deeper input is left to
// the full decoder.
const maxDepth = 32

// value reads an input value as DecodeJob leaves it after NormalizeInput.
func (p *parser) value(depth int) (any, bool) {
	if depth > maxDepth {
		return nil, false
	}
	p.space()
	switch c := p.peek(); {
	case c == '"':
		return p.string()
	case c == 't' || c == 'f':
		for _, w := range []string{"true", "false"} {
			if strings.HasPrefix(string(p.data[p.i:min(len(p.data), p.i+len(w))]), w) {
				p.i += len(w)
				return w == "true", true
			}
		}
		return nil, false
	case c == '-' || c >= '0' && c <= '9':
		lit, ok := p.number()
		if !ok {
			return nil, false
		}
		// As NormalizeInput: integers to int64, the rest to float64.
		if !strings.ContainsAny(lit, ".eE") {
			n, err := strconv.ParseInt(lit, 10, 64)
			return n, err == nil // beyond int64: a big integer; give up
		}
		f, err := strconv.ParseFloat(lit, 64)
		return f, err == nil
	case c == '[':
		p.i++
		list := []any{}
		p.space()
		if p.byte(']') {
			return list, true
		}
		for {
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			list = append(list, v)
			if p.byte(']') {
				return list, true
			}
			if !p.byte(',') {
				return nil, false
			}
		}
	case c == '{':
		p.i++
		m := map[string]any{}
		p.space()
		if p.byte('}') {
			return m, true
		}
		for {
			p.space()
			k, ok := p.string()
			if !ok || !p.byte(':') {
				return nil, false
			}
			if _, twice := m[k]; twice {
				return nil, false // DecodeJob refuses it, naming the key
			}
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			m[k] = v
			if p.byte('}') {
				return m, true
			}
			if !p.byte(',') {
				return nil, false
			}
		}
	}
	return nil, false
}
