package starlark

import (
	"fmt"
	"maps"
	"time"

	libjson "go.starlark.net/lib/json"
	libmath "go.starlark.net/lib/math"
	libtime "go.starlark.net/lib/time"
	sl "go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// modules returns the predeclared modules: json and math from upstream with
// json's allocation bounded, time pinned to the job's clock and restricted
// to UTC (no host clock, no zoneinfo files), and random seeded from the
// job's seed.
func modules() sl.StringDict {
	jsonMembers := maps.Clone(libjson.Module.Members)
	jsonMembers["encode"] = sl.NewBuiltin("json.encode", jsonEncode)
	jsonMembers["encode_indent"] = sl.NewBuiltin("json.encode_indent", jsonEncode)
	jsonMembers["decode"] = sl.NewBuiltin("json.decode", jsonDecode)
	jsonMembers["indent"] = sl.NewBuiltin("json.indent", jsonIndent)

	timeMembers := maps.Clone(libtime.Module.Members)
	timeMembers["now"] = sl.NewBuiltin("now", timeNow)
	for _, name := range []string{"time", "parse_time", "from_timestamp", "is_valid_timezone"} {
		timeMembers[name] = sl.NewBuiltin(name, timeWrapped)
	}

	return sl.StringDict{
		"json": &starlarkstruct.Module{Name: "json", Members: jsonMembers},
		"math": libmath.Module,
		"time": &starlarkstruct.Module{Name: "time", Members: timeMembers},
		"random": &starlarkstruct.Module{Name: "random", Members: sl.StringDict{
			"random":  sl.NewBuiltin("random", randomFloat),
			"uniform": sl.NewBuiltin("uniform", randomFloat),
			"randint": sl.NewBuiltin("randint", randomInt),
			"choice":  sl.NewBuiltin("choice", randomChoice),
			"shuffle": sl.NewBuiltin("shuffle", randomShuffle),
		}},
	}
}

func upstreamMember(m *starlarkstruct.Module, name string) sl.Value { return m.Members[name] }

func jsonEncode(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	st := stateOf(th)
	m := measurer{limit: st.budget - st.used, st: st}
	for _, v := range args {
		if err := m.walk(v, 0); err != nil {
			if err == errTooLarge {
				return nil, st.charge(-1, b.Name())
			}
			if s := st.stopped(); s != nil {
				return nil, s
			}
			return nil, fmt.Errorf("%s: %w", b.Name(), err)
		}
	}
	// Indentation adds at most (prefix + depth*indent + newline) per node.
	if err := st.chargeMul(m.nodes+1, 1+stringArgBytes(kwargs)*int64(m.maxDepth+1), b.Name()); err != nil {
		return nil, err
	}
	if err := st.charge(m.n, b.Name()); err != nil {
		return nil, err
	}
	short := b.Name()[len("json."):]
	return sl.Call(th, upstreamMember(libjson.Module, short), args, kwargs)
}

func jsonDecode(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	if s, sh, ok := jsonText(args); ok {
		if sh.depth > maxFormatDepth {
			return nil, fmt.Errorf("json.decode: input nested more than %d deep", maxFormatDepth)
		}
		// Decoding an integer is quadratic in its digits, as int() is.
		if n := sh.intDigits; n > MaxIntDigits {
			return nil, fmt.Errorf("json.decode: integer of %d digits exceeds the limit of %d digits", n, MaxIntDigits)
		}
		st := stateOf(th)
		if err := st.chargeMul(int64(len(s)), slotBytes/2, "json.decode"); err != nil {
			return nil, err
		}
		if err := st.work(int64(len(s))); err != nil {
			return nil, err
		}
	}
	return sl.Call(th, upstreamMember(libjson.Module, "decode"), args, kwargs)
}

func jsonIndent(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	if s, sh, ok := jsonText(args); ok {
		if sh.depth > maxFormatDepth {
			return nil, fmt.Errorf("json.indent: input nested more than %d deep", maxFormatDepth)
		}
		st := stateOf(th)
		if err := st.chargeMul(int64(sh.lines)+1, 1+stringArgBytes(kwargs)*int64(sh.depth+1), "json.indent"); err != nil {
			return nil, err
		}
		if err := st.charge(int64(len(s)), "json.indent"); err != nil {
			return nil, err
		}
	}
	return sl.Call(th, upstreamMember(libjson.Module, "indent"), args, kwargs)
}

// jsonText returns the JSON text passed as the first argument, with its
// shape.
func jsonText(args sl.Tuple) (s sl.String, sh jsonShape, ok bool) {
	if len(args) == 0 {
		return "", sh, false
	}
	if s, ok = args[0].(sl.String); ok {
		sh = scanJSON(string(s))
	}
	return s, sh, ok
}

// stringArgBytes sums the lengths of string keyword arguments (prefix,
// indent).
func stringArgBytes(kwargs []sl.Tuple) int64 {
	n := int64(0)
	for _, kv := range kwargs {
		if s, ok := kv[1].(sl.String); ok {
			n += int64(len(s))
		}
	}
	return n
}

// jsonShape is what one scan of JSON text (outside its strings) finds:
// its deepest nesting, the number of places an indenter would break a
// line, and the digits of its longest integer (a number with no fraction
// or exponent).
type jsonShape struct{ depth, lines, intDigits int }

func scanJSON(s string) (sh jsonShape) {
	depth, digits, inString, escaped, inNumber, isInt := 0, 0, false, false, false, true
	for i := 0; i <= len(s); i++ {
		c := byte(0)
		if i < len(s) {
			c = s[i]
		}
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch {
		case c >= '0' && c <= '9':
			inNumber = true
			digits++
			continue
		case inNumber && (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'):
			isInt = false
			continue
		case c == '-':
			inNumber = true
			continue
		}
		if inNumber && isInt {
			sh.intDigits = max(sh.intDigits, digits)
		}
		inNumber, isInt, digits = false, true, 0
		switch c {
		case '"':
			inString = true
		case '[', '{':
			depth++
			sh.lines++
			sh.depth = max(sh.depth, depth)
		case ']', '}':
			depth--
			sh.lines++
		case ',':
			sh.lines++
		}
	}
	return sh
}

// UTC is the only time zone the tier offers: loading any other reads the
// host's zoneinfo files.
func checkLocation(loc string) error {
	if loc == "" || loc == "UTC" {
		return nil
	}
	return fmt.Errorf("time zone %q is not available: the starlark tier reads no host files, so only UTC is offered", loc)
}

func timeNow(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	if err := sl.UnpackPositionalArgs("now", args, kwargs, 0); err != nil {
		return nil, err
	}
	return libtime.Time(stateOf(th).clock), nil
}

// timeWrapped refuses any location but UTC, then calls upstream; results
// are in UTC (upstream's from_timestamp would use the host's zone).
func timeWrapped(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	name := b.Name()
	loc := ""
	switch name {
	case "is_valid_timezone":
		var s string
		if err := sl.UnpackPositionalArgs(name, args, kwargs, 1, &s); err != nil {
			return nil, err
		}
		return sl.Bool(checkLocation(s) == nil), nil
	case "parse_time":
		if len(args) > 2 {
			if s, ok := args[2].(sl.String); ok {
				loc = string(s)
			}
		}
	}
	for _, kv := range kwargs {
		if kv[0] == sl.String("location") {
			if s, ok := kv[1].(sl.String); ok {
				loc = string(s)
			}
		}
	}
	if err := checkLocation(loc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	v, err := sl.Call(th, upstreamMember(libtime.Module, name), args, kwargs)
	if t, ok := v.(libtime.Time); ok {
		v = libtime.Time(time.Time(t).UTC())
	}
	return v, err
}

func randomFloat(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	rng := stateOf(th).random()
	if b.Name() == "random" {
		if err := sl.UnpackPositionalArgs("random", args, kwargs, 0); err != nil {
			return nil, err
		}
		return sl.Float(rng.Float64()), nil
	}
	var lo, hi float64
	if err := sl.UnpackPositionalArgs("uniform", args, kwargs, 2, &lo, &hi); err != nil {
		return nil, err
	}
	return sl.Float(lo + (hi-lo)*rng.Float64()), nil
}

func randomInt(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	var lo, hi int64
	if err := sl.UnpackPositionalArgs("randint", args, kwargs, 2, &lo, &hi); err != nil {
		return nil, err
	}
	if lo > hi {
		return nil, fmt.Errorf("randint: empty range (%d > %d)", lo, hi)
	}
	rng := stateOf(th).random()
	span := uint64(hi - lo)
	if span == ^uint64(0) {
		return sl.MakeInt64(int64(rng.Uint64())), nil
	}
	return sl.MakeInt64(lo + int64(rng.Uint64N(span+1))), nil
}

func randomChoice(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	var seq sl.Indexable
	if err := sl.UnpackPositionalArgs("choice", args, kwargs, 1, &seq); err != nil {
		return nil, err
	}
	n := seq.Len()
	if n == 0 {
		return nil, fmt.Errorf("choice: cannot choose from an empty sequence")
	}
	return seq.Index(stateOf(th).random().IntN(n)), nil
}

func randomShuffle(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	var l *sl.List
	if err := sl.UnpackPositionalArgs("shuffle", args, kwargs, 1, &l); err != nil {
		return nil, err
	}
	st := stateOf(th)
	rng := st.random()
	for i := l.Len() - 1; i > 0; i-- {
		if i%pollIters == 0 {
			if err := st.poll(); err != nil {
				return nil, err
			}
		}
		j := rng.IntN(i + 1)
		a, c := l.Index(i), l.Index(j)
		if err := l.SetIndex(i, c); err != nil {
			return nil, fmt.Errorf("shuffle: %w", err)
		}
		_ = l.SetIndex(j, a)
	}
	return sl.None, nil
}
