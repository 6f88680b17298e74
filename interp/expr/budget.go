package expr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"regexp/syntax"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/monotime"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// stateVar is the hidden variable through which helpers reach the run's
// budgets. User code cannot name it (names starting with "__" are refused).
const stateVar = "__s"

// elementBytes is what one element of a collection is charged.
const elementBytes = 16

// state is one run's budgets: steps, memory (bytes), the deadline and the
// pinned clock. It has no exported fields or methods.
type state struct {
	done     <-chan struct{}
	deadline time.Time
	clock    time.Time
	steps    int64
	maxSteps int64
	bytes    int64
	maxBytes int64
	limits   airlock.Limits
	re       *regexp.Regexp // the last pattern matches compiled
}

var states = sync.Pool{New: func() any { return new(state) }}

func newState(ctx context.Context, job *airlock.Job, now time.Time) *state {
	s := states.Get().(*state)
	*s = state{
		done:     ctx.Done(),
		deadline: now.Add(job.Limits.Wall()),
		clock:    job.Clock,
		maxSteps: job.Limits.Steps,
		maxBytes: job.Limits.MemoryMB << 20,
		limits:   job.Limits,
	}
	if d, ok := ctx.Deadline(); ok && d.Before(s.deadline) {
		s.deadline = d
	}
	return s
}

func (s *state) release() { *s = state{}; states.Put(s) }

// tick is called on every predicate iteration.
func (s *state) tick() error {
	s.steps++
	if s.steps > s.maxSteps {
		return &airlock.Stop{Reason: airlock.StopSteps, Detail: fmt.Sprintf("more than %d steps", s.maxSteps)}
	}
	if s.steps&255 == 0 {
		return s.checkTime()
	}
	return nil
}

func (s *state) checkTime() error {
	select {
	case <-s.done:
		return &airlock.Stop{Reason: airlock.StopKilled, Detail: "cancelled"}
	default:
	}
	if monotime.Now().After(s.deadline) {
		return &airlock.Stop{Reason: airlock.StopTimeout, Detail: fmt.Sprintf("wall clock of %v ran out", s.limits.Wall())}
	}
	return nil
}

// reserve charges n bytes, failing before anything is allocated when the
// budget would be exceeded.
func (s *state) reserve(n int64) error {
	if n < 0 || n > s.maxBytes-s.bytes {
		return &airlock.Stop{Reason: airlock.StopMemory, Detail: fmt.Sprintf("memory budget of %d MiB exceeded", s.limits.MemoryMB)}
	}
	s.bytes += n
	return nil
}

func st(args []any) *state { return args[0].(*state) }

func argString(name string, args []any, i int) (string, error) {
	if i >= len(args) {
		return "", fmt.Errorf("%s: missing argument %d", name, i)
	}
	s, ok := args[i].(string)
	if !ok {
		return "", fmt.Errorf("%s: argument %d is %s, not a string", name, i, typeName(args[i]))
	}
	return s, nil
}

func typeName(v any) string {
	if v == nil {
		return "nil"
	}
	return reflect.TypeOf(v).String()
}

func wantArgs(name string, args []any, lo, hi int) error {
	if n := len(args) - 1; n < lo || n > hi {
		if lo == hi {
			return fmt.Errorf("%s: takes %d arguments, got %d", name, lo, n)
		}
		return fmt.Errorf("%s: takes %d to %d arguments, got %d", name, lo, hi, n)
	}
	return nil
}

// helpers are the functions the walker patches in. Each takes the run's
// state first.
var helpers = map[string]func(args ...any) (any, error){
	"__tick": func(args ...any) (any, error) {
		return args[1], st(args).tick()
	},
	"__charge": func(args ...any) (any, error) {
		v := args[1]
		var n int64
		switch x := v.(type) {
		case string:
			n = int64(len(x))
		case []any:
			n = int64(len(x)) * elementBytes
		case map[string]any:
			n = int64(len(x)) * 2 * elementBytes
		default:
			rv := reflect.ValueOf(v)
			switch rv.Kind() {
			case reflect.Slice, reflect.Map, reflect.Array:
				n = int64(rv.Len()) * elementBytes
			}
		}
		return v, st(args).reserve(n)
	},
	"__now": func(args ...any) (any, error) {
		if err := wantArgs("now", args, 0, 0); err != nil {
			return nil, err
		}
		return st(args).clock, nil
	},
	"__add": func(args ...any) (any, error) {
		a, b := args[1], args[2]
		if sa, ok := a.(string); ok {
			if sb, ok := b.(string); ok {
				if err := st(args).reserve(int64(len(sa)) + int64(len(sb))); err != nil {
					return nil, err
				}
				return sa + sb, nil
			}
		}
		return checkedAdd(a, b)
	},
	"__repeat": func(args ...any) (any, error) {
		if err := wantArgs("repeat", args, 2, 2); err != nil {
			return nil, err
		}
		s, err := argString("repeat", args, 1)
		if err != nil {
			return nil, err
		}
		n, ok := toInt(args[2])
		if !ok || n < 0 {
			return nil, fmt.Errorf("repeat: count must be a non-negative integer, got %v", args[2])
		}
		if len(s) > 0 && n > math.MaxInt64/int64(len(s)) {
			return nil, st(args).reserve(-1)
		}
		if err := st(args).reserve(int64(len(s)) * n); err != nil {
			return nil, err
		}
		return strings.Repeat(s, int(n)), nil
	},
	"__join": func(args ...any) (any, error) {
		if err := wantArgs("join", args, 1, 2); err != nil {
			return nil, err
		}
		sep := ""
		if len(args) == 3 {
			var err error
			if sep, err = argString("join", args, 2); err != nil {
				return nil, err
			}
		}
		parts, err := stringSlice(args[1])
		if err != nil {
			return nil, fmt.Errorf("join: %w", err)
		}
		total := int64(len(sep)) * int64(max(len(parts)-1, 0))
		for _, p := range parts {
			total += int64(len(p))
		}
		if err := st(args).reserve(total); err != nil {
			return nil, err
		}
		return strings.Join(parts, sep), nil
	},
	"__replace": func(args ...any) (any, error) {
		if err := wantArgs("replace", args, 3, 3); err != nil {
			return nil, err
		}
		var s [3]string
		for i := range s {
			var err error
			if s[i], err = argString("replace", args, i+1); err != nil {
				return nil, err
			}
		}
		var n int64
		if s[1] == "" {
			n = int64(len(s[0])) + int64(utf8.RuneCountInString(s[0])+1)*int64(len(s[2]))
		} else {
			n = int64(len(s[0])) + int64(strings.Count(s[0], s[1]))*(int64(len(s[2]))-int64(len(s[1])))
		}
		if err := st(args).reserve(n); err != nil {
			return nil, err
		}
		return strings.ReplaceAll(s[0], s[1], s[2]), nil
	},
	"__matches": func(args ...any) (any, error) {
		a, b := args[1], args[2]
		if a == nil || b == nil {
			return false, nil // as expr's matches
		}
		pattern, ok := b.(string)
		if !ok {
			return nil, fmt.Errorf("matches: the pattern is %s, not a string", typeName(b))
		}
		s := st(args)
		re := s.re
		if re == nil || re.String() != pattern {
			if err := s.reserve(int64(len(pattern)) * regexpBytes); err != nil {
				return nil, err
			}
			var err error
			if re, err = regexp.Compile(pattern); err != nil {
				return nil, regexpError(err)
			}
			s.re = re
		}
		switch x := a.(type) {
		case string:
			return re.MatchString(x), nil
		case []byte:
			return re.Match(x), nil
		}
		return nil, fmt.Errorf("matches: %s is not a string", typeName(a))
	},
	"__split":      splitHelper("split", strings.SplitN),
	"__splitAfter": splitHelper("splitAfter", strings.SplitAfterN),
	"__toJSON": func(args ...any) (any, error) {
		if err := wantArgs("toJSON", args, 1, 1); err != nil {
			return nil, err
		}
		s := st(args)
		n, ok := sizeWithin(args[1], s.maxBytes-s.bytes, s)
		if !ok {
			return nil, s.timeOrMemory()
		}
		if err := s.reserve(n); err != nil {
			return nil, err
		}
		b, err := json.MarshalIndent(args[1], "", "  ")
		if err != nil {
			return nil, fmt.Errorf("toJSON: %w", err)
		}
		return string(b), nil
	},
	"__fromJSON": func(args ...any) (any, error) {
		if err := wantArgs("fromJSON", args, 1, 1); err != nil {
			return nil, err
		}
		in, err := argString("fromJSON", args, 1)
		if err != nil {
			return nil, err
		}
		// Decoded values take several times their text: charge generously.
		if err := st(args).reserve(int64(len(in)) * 8); err != nil {
			return nil, err
		}
		var v any
		if err := json.Unmarshal([]byte(in), &v); err != nil {
			return nil, fmt.Errorf("fromJSON: %w", err)
		}
		return v, nil
	},
	"__string": func(args ...any) (any, error) {
		if err := wantArgs("string", args, 1, 1); err != nil {
			return nil, err
		}
		s := st(args)
		if str, ok := args[1].(string); ok {
			return str, nil
		}
		n, ok := sizeWithin(args[1], (s.maxBytes-s.bytes)/2, s)
		if !ok {
			return nil, s.timeOrMemory()
		}
		if err := s.reserve(2 * n); err != nil {
			return nil, err
		}
		return fmt.Sprintf("%v", args[1]), nil
	},
	"__concat": func(args ...any) (any, error) {
		if len(args) < 2 {
			return nil, fmt.Errorf("concat: needs at least one array")
		}
		total := 0
		for i, a := range args[1:] {
			rv := reflect.ValueOf(a)
			if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
				return nil, fmt.Errorf("concat: argument %d is %s, not an array", i+1, typeName(a))
			}
			total += rv.Len()
		}
		if err := st(args).reserve(int64(total) * elementBytes); err != nil {
			return nil, err
		}
		out := make([]any, 0, total)
		for _, a := range args[1:] {
			rv := reflect.ValueOf(a)
			for i := range rv.Len() {
				out = append(out, rv.Index(i).Interface())
			}
		}
		return out, nil
	},
	"__flatten": func(args ...any) (any, error) {
		if err := wantArgs("flatten", args, 1, 1); err != nil {
			return nil, err
		}
		s := st(args)
		rv := reflect.ValueOf(args[1])
		if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
			return nil, fmt.Errorf("flatten: argument is %s, not an array", typeName(args[1]))
		}
		var count int64
		budget := (s.maxBytes - s.bytes) / elementBytes
		if err := countLeaves(rv, 0, &count, budget, s); err != nil {
			return nil, err
		}
		if err := s.reserve(count * elementBytes); err != nil {
			return nil, err
		}
		out := make([]any, 0, count)
		return flattenInto(out, rv), nil
	},
}

// regexpBytes is what compiling a regular expression is charged per byte
// of its pattern (compiling a pattern of 2 million bytes allocated 456 MB).
const regexpBytes = 256

// regexpError is a pattern's error with at most 64 bytes of the pattern
// quoted (Go's quotes all of it, however long).
func regexpError(err error) error {
	var se *syntax.Error
	if errors.As(err, &se) && len(se.Expr) > 64 {
		n := 64
		for n > 0 && !utf8.RuneStart(se.Expr[n]) {
			n--
		}
		return fmt.Errorf("error parsing regexp: %s: `%s…`", se.Code, se.Expr[:n])
	}
	return err
}

// splitHelper is split or splitAfter, charged before splitting: every
// part is a string of its own (elementBytes), however short, so splitting
// a string into its characters costs sixteen times its length.
func splitHelper(name string, split func(s, sep string, n int) []string) func(args ...any) (any, error) {
	return func(args ...any) (any, error) {
		if err := wantArgs(name, args, 2, 3); err != nil {
			return nil, err
		}
		str, err := argString(name, args, 1)
		if err != nil {
			return nil, err
		}
		sep, err := argString(name, args, 2)
		if err != nil {
			return nil, err
		}
		n := int64(-1)
		if len(args) == 4 {
			var ok bool
			if n, ok = toInt(args[3]); !ok {
				return nil, fmt.Errorf("%s: the count must be an integer, got %v", name, args[3])
			}
		}
		var parts int64
		if sep == "" {
			parts = int64(utf8.RuneCountInString(str))
		} else {
			parts = int64(strings.Count(str, sep)) + 1
		}
		if n >= 0 {
			parts = min(parts, n)
		}
		if err := st(args).reserve(parts * elementBytes); err != nil {
			return nil, err
		}
		return split(str, sep, int(max(min(n, math.MaxInt32), -1))), nil
	}
}

func (s *state) timeOrMemory() error {
	if err := s.checkTime(); err != nil {
		return err
	}
	return s.reserve(-1)
}

func countLeaves(rv reflect.Value, depth int, count *int64, budget int64, s *state) error {
	if depth > value.MaxDepth {
		return fmt.Errorf("flatten: arrays nested more than %d deep", value.MaxDepth)
	}
	for i := range rv.Len() {
		e := rv.Index(i)
		for e.Kind() == reflect.Interface && !e.IsNil() {
			e = e.Elem()
		}
		if e.Kind() == reflect.Slice || e.Kind() == reflect.Array {
			if err := countLeaves(e, depth+1, count, budget, s); err != nil {
				return err
			}
			continue
		}
		*count++
		if *count > budget {
			return s.reserve(-1)
		}
		if *count&0xffff == 0 {
			if err := s.checkTime(); err != nil {
				return err
			}
		}
	}
	return nil
}

func flattenInto(out []any, rv reflect.Value) []any {
	for i := range rv.Len() {
		e := rv.Index(i)
		for e.Kind() == reflect.Interface && !e.IsNil() {
			e = e.Elem()
		}
		if e.Kind() == reflect.Slice || e.Kind() == reflect.Array {
			out = flattenInto(out, e)
			continue
		}
		out = append(out, rv.Index(i).Interface())
	}
	return out
}

func stringSlice(v any) ([]string, error) {
	switch x := v.(type) {
	case []string:
		return x, nil
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("element %d is %s, not a string", i, typeName(e))
			}
			out[i] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("argument is %s, not an array of strings", typeName(v))
}

func toInt(v any) (int64, bool) {
	if n, ok := intOf(v); ok {
		return n, true
	}
	if x, ok := v.(float64); ok && x == math.Trunc(x) && math.Abs(x) < 1<<62 {
		return int64(x), true
	}
	return 0, false
}

// sizeWithin estimates the bytes of v's indented JSON (an upper bound on
// its %v form too), giving up as soon as it passes limit. Shared
// references count each time they are reached, as they would be printed.
// With a state, it also stops at the deadline.
func sizeWithin(v any, limit int64, s *state) (int64, bool) {
	switch v.(type) { // the common results, as add counts them
	case nil:
		return 4, 4 <= limit
	case bool, int, int64, float64:
		return 24, 24 <= limit
	}
	e := sizer{limit: limit, s: s}
	e.add(reflect.ValueOf(v), 0)
	return e.n, !e.over
}

type sizer struct {
	n, limit int64
	visits   int
	over     bool
	s        *state
}

func (e *sizer) bump(n int64) {
	e.n += n
	if e.n > e.limit {
		e.over = true
	}
}

func (e *sizer) add(v reflect.Value, depth int) {
	if e.over {
		return
	}
	e.visits++
	if e.s != nil && e.visits&0xffff == 0 && e.s.checkTime() != nil {
		e.over = true
		return
	}
	if depth > 10_000 {
		e.over = true
		return
	}
	indent := int64(2*depth + 2)
	if !v.IsValid() {
		e.bump(4)
		return
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			e.bump(4)
			return
		}
		if _, ok := v.Interface().(fmt.Stringer); ok && v.Kind() == reflect.Pointer {
			e.bump(int64(len(fmt.Sprint(v.Interface()))) + 2)
			return
		}
		e.add(v.Elem(), depth)
	case reflect.String:
		e.bump(jsonStringSize(v.String()))
	case reflect.Slice, reflect.Array:
		e.bump(2 + indent)
		for i := 0; i < v.Len() && !e.over; i++ {
			e.bump(indent + 2)
			e.add(v.Index(i), depth+1)
		}
	case reflect.Map:
		e.bump(2 + indent)
		it := v.MapRange()
		for it.Next() && !e.over {
			e.bump(indent + 4)
			e.add(it.Key(), depth+1)
			e.add(it.Value(), depth+1)
		}
	case reflect.Struct:
		e.bump(40) // time.Time and the like
	default:
		e.bump(24)
	}
}

// jsonStringSize is the length of s encoded as a JSON string by
// encoding/json (which escapes control characters and <, >, &).
func jsonStringSize(s string) int64 {
	n := int64(2)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			n += 2
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 6
		default:
			n++
		}
	}
	return n
}
