package starlark

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"unsafe"

	sl "go.starlark.net/starlark"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// maxFormatDepth bounds the nesting of a value that is formatted, encoded
// or exported; upstream formats recursively.
const maxFormatDepth = 1000

// errTooLarge is returned by measure when a value's text would exceed the limit.
var errTooLarge = errors.New("too large")

// measure returns an upper estimate of the length of v's text form, walking
// at most until the estimate exceeds limit (so values that share parts, whose
// text is exponentially longer than their memory, cost at most limit work).
// Nesting deeper than maxFormatDepth is an error: upstream formatting
// recurses without a bound.
func measure(v sl.Value, limit int64) (int64, error) {
	m := measurer{limit: limit}
	err := m.walk(v, 0)
	return m.n, err
}

type measurer struct {
	n, limit int64
	nodes    int64
	maxDepth int
	path     []unsafe.Pointer
	polls    int
	st       *runState
}

func (m *measurer) add(n int64) error {
	m.n += n
	if m.n > m.limit {
		return errTooLarge
	}
	return nil
}

// enter detects cycles (upstream prints them as [...]) by identity. The
// path is only searched below a shallow depth: a cycle is still found one
// lap later, and wide shared structures are not slowed by the search.
func (m *measurer) enter(p unsafe.Pointer) bool {
	if len(m.path) >= 32 {
		for _, q := range m.path {
			if q == p {
				return false
			}
		}
	}
	m.path = append(m.path, p)
	return true
}

func (m *measurer) walk(v sl.Value, depth int) error {
	if depth > maxFormatDepth {
		return fmt.Errorf("value nested more than %d deep", maxFormatDepth)
	}
	m.nodes++
	m.maxDepth = max(m.maxDepth, depth)
	switch x := v.(type) {
	case sl.String:
		return m.add(int64(len(x)) + 2)
	case sl.Bytes:
		return m.add(4*int64(len(x)) + 3)
	case sl.Int:
		if i, ok := x.Int64(); ok {
			_ = i
			return m.add(20)
		}
		bits := int64(x.BigInt().BitLen())
		if m.st != nil {
			// Decimal conversion is superlinear: a 260,000-bit integer
			// takes about a millisecond, a few thousand steps' time.
			b := bits / 8
			if err := m.st.work(b * max(1, b/64)); err != nil {
				return err
			}
		}
		return m.add(bits/3 + 2)
	case sl.Float, sl.Bool, sl.NoneType:
		return m.add(24)
	case *sl.List:
		return m.seq(unsafe.Pointer(x), x, x.Len(), depth)
	case sl.Tuple:
		if len(x) == 0 {
			return m.add(2)
		}
		return m.seq(unsafe.Pointer(&x[0]), x, len(x), depth)
	case *sl.Set:
		return m.seq(unsafe.Pointer(x), x, x.Len(), depth)
	case *sl.Dict:
		if !m.enter(unsafe.Pointer(x)) {
			return m.add(5)
		}
		defer func() { m.path = m.path[:len(m.path)-1] }()
		if err := m.add(2); err != nil {
			return err
		}
		for _, kv := range x.Items() {
			if err := m.tick(); err != nil {
				return err
			}
			if err := m.add(4); err != nil {
				return err
			}
			if err := m.walk(kv[0], depth+1); err != nil {
				return err
			}
			if err := m.walk(kv[1], depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	// Other values (functions, modules, ranges, times) print in a bounded,
	// non-recursive form.
	return m.add(64)
}

func (m *measurer) seq(p unsafe.Pointer, x sl.Iterable, n int, depth int) error {
	if !m.enter(p) {
		return m.add(5)
	}
	defer func() { m.path = m.path[:len(m.path)-1] }()
	if err := m.add(int64(n)*2 + 7); err != nil {
		return err
	}
	it := x.Iterate()
	defer it.Done()
	var e sl.Value
	for it.Next(&e) {
		if err := m.tick(); err != nil {
			return err
		}
		if err := m.walk(e, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (m *measurer) tick() error {
	if m.st == nil {
		return nil
	}
	if m.polls++; m.polls%pollIters == 0 {
		return m.st.poll()
	}
	return nil
}

// boundedString formats v as str() does (repr when quote is set), refusing
// values whose text would exceed the run's remaining budget and charging
// what it produces.
func (s *runState) boundedString(v sl.Value, quote bool, what string) (string, error) {
	if str, ok := v.(sl.String); ok && !quote {
		return string(str), nil
	}
	if what == "print" {
		// Printed text can never exceed the output still allowed.
		room := s.outCap - int64(s.out.Len())
		if n, err := measure(v, room); err != nil {
			if errors.Is(err, errTooLarge) {
				return "", s.stop(airlock.StopOutput, "printing a value of more than %d bytes (limits.output_bytes)", room)
			}
			return "", fmt.Errorf("%s: %w", what, err)
		} else if n > room {
			return "", s.stop(airlock.StopOutput, "printing a value of more than %d bytes (limits.output_bytes)", room)
		}
	}
	if err := s.measureFits(v, what); err != nil {
		return "", err
	}
	var out string
	if str, ok := v.(sl.String); ok && !quote {
		out = string(str)
	} else {
		out = v.String()
	}
	return out, s.charge(int64(len(out)), what)
}

// measureFits refuses v if formatting it could exceed the remaining budget.
func (s *runState) measureFits(v sl.Value, what string) error {
	_, err := s.measureArgs(what, v)
	return err
}

// measureArgs measures several values together against the remaining
// budget and returns their combined estimate.
func (s *runState) measureArgs(what string, vs ...sl.Value) (int64, error) {
	m := measurer{limit: s.budget - s.used, st: s}
	for _, v := range vs {
		if err := m.walk(v, 0); err != nil {
			if errors.Is(err, errTooLarge) {
				return 0, s.charge(-1, what)
			}
			if st := s.stopped(); st != nil {
				return 0, st
			}
			return 0, fmt.Errorf("%s: %w", what, err)
		}
	}
	return m.n, nil
}

// toStarlark converts a JSON-compatible Go value (as decoded from a job's
// input) into a Starlark value. Maps become dicts with sorted keys.
func toStarlark(v any) (sl.Value, error) {
	switch x := v.(type) {
	case nil:
		return sl.None, nil
	case bool:
		return sl.Bool(x), nil
	case string:
		return sl.String(x), nil
	case int:
		return sl.MakeInt(x), nil
	case int64:
		return sl.MakeInt64(x), nil
	case *big.Int:
		return sl.MakeBigInt(x), nil
	case float64:
		return sl.Float(x), nil
	case []any:
		elems := make([]sl.Value, len(x))
		for i, e := range x {
			sv, err := toStarlark(e)
			if err != nil {
				return nil, err
			}
			elems[i] = sv
		}
		return sl.NewList(elems), nil
	case map[string]any:
		d := sl.NewDict(len(x))
		for _, k := range value.SortedKeys(x) {
			sv, err := toStarlark(x[k])
			if err != nil {
				return nil, err
			}
			_ = d.SetKey(sl.String(k), sv)
		}
		return d, nil
	case json.Number:
		n, err := value.Normalize(x)
		if err != nil {
			return nil, err
		}
		return toStarlark(n)
	}
	return nil, fmt.Errorf("%T is not a JSON-compatible value", v)
}

// exporter converts a Starlark value into JSON-compatible Go data (int64 or
// *big.Int, float64, string, bool, nil, []any, map[string]any). Tuples and
// sets become arrays, dicts with string keys become objects; anything else
// is an error naming the value. The walk is charged to the budget, so a
// value whose parts are shared many times cannot blow up the export.
type exporter struct {
	st    *runState
	nodes int64
}

// exportNodeBytes is what one exported node is charged.
const exportNodeBytes = 64

func (e *exporter) export(v sl.Value, depth int) (any, error) {
	if depth > value.MaxDepth {
		return nil, fmt.Errorf("value nested more than %d deep", value.MaxDepth)
	}
	if e.nodes++; e.nodes%pollIters == 0 && e.st != nil {
		if err := e.st.chargeMul(pollIters, exportNodeBytes, "exporting the result"); err != nil {
			return nil, err
		}
		if err := e.st.poll(); err != nil {
			return nil, err
		}
	}
	switch x := v.(type) {
	case sl.NoneType:
		return nil, nil
	case sl.Bool:
		return bool(x), nil
	case sl.String:
		return string(x), nil
	case sl.Int:
		if i, ok := x.Int64(); ok {
			return i, nil
		}
		return x.BigInt(), nil
	case sl.Float:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, value.NonFinite(f)
		}
		return f, nil
	case *sl.List:
		return e.seq(x, x.Len(), depth)
	case sl.Tuple:
		return e.seq(x, len(x), depth)
	case *sl.Set:
		return e.seq(x, x.Len(), depth)
	case *sl.Dict:
		out := make(map[string]any, x.Len())
		for _, kv := range x.Items() {
			k, ok := kv[0].(sl.String)
			if !ok {
				return nil, fmt.Errorf("dict with %s key %s cannot be represented in JSON (keys must be strings)", kv[0].Type(), value.Clip(kv[0].String(), 80))
			}
			ev, err := e.export(kv[1], depth+1)
			if err != nil {
				return nil, err
			}
			out[string(k)] = ev
		}
		return out, nil
	}
	return nil, fmt.Errorf("value of type %s cannot be represented in JSON", v.Type())
}

func (e *exporter) seq(x sl.Iterable, n int, depth int) (any, error) {
	out := make([]any, 0, n)
	it := x.Iterate()
	defer it.Done()
	var v sl.Value
	for it.Next(&v) {
		ev, err := e.export(v, depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, nil
}
