package starlark

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
	"time"
	"unicode/utf8"

	libtime "go.starlark.net/lib/time"
	sl "go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"github.com/airlock-sandbox/airlock/internal/value"
)

// MaxIntBits bounds the size of integers built by multiplication and left
// shifts (about 79,000 decimal digits): big-integer arithmetic and
// formatting cost grows faster than linearly in the size.
const MaxIntBits = 1 << 18

// maxRepeat is upstream's bound on the elements of a repetition's result.
const maxRepeat = 1 << 30

// elemBytes is what one element slot of a list or tuple is charged.
const elemBytes = 16

// The hidden builtins the rewriter calls. Their names contain '$', which no
// Starlark identifier can, so scripts cannot shadow or call them directly.
const (
	nameAdd        = "$add"
	nameSub        = "$sub"
	nameDiv        = "$div"
	nameFloorDiv   = "$floordiv"
	nameMul        = "$mul"
	nameMod        = "$mod"
	nameLsh        = "$lsh"
	nameGrow       = "$grow"
	nameAttr       = "$attr"
	nameAugIndex   = "$augindex"
	nameAugAttr    = "$augattr"
	nameOr         = "$or"
	nameAnd        = "$and"
	nameXor        = "$xor"
	nameGrowOr     = "$growor"
	nameSlice      = "$slice"
	nameSpread     = "$spread"
	augBuiltinName = "augmented assignment" // how $augindex and $augattr appear in backtraces
)

func hiddenBuiltins() sl.StringDict {
	return sl.StringDict{
		nameAdd:      sl.NewBuiltin("+", opBuiltin(syntax.PLUS)),
		nameSub:      sl.NewBuiltin("-", opBuiltin(syntax.MINUS)),
		nameDiv:      sl.NewBuiltin("/", opBuiltin(syntax.SLASH)),
		nameFloorDiv: sl.NewBuiltin("//", opBuiltin(syntax.SLASHSLASH)),
		nameMul:      sl.NewBuiltin("*", opBuiltin(syntax.STAR)),
		nameMod:      sl.NewBuiltin("%", opBuiltin(syntax.PERCENT)),
		nameLsh:      sl.NewBuiltin("<<", opBuiltin(syntax.LTLT)),
		nameGrow:     sl.NewBuiltin("+=", opGrow),
		nameAttr:     sl.NewBuiltin("getattr", opAttr),
		nameAugIndex: sl.NewBuiltin(augBuiltinName, opAugIndex),
		nameAugAttr:  sl.NewBuiltin(augBuiltinName, opAugAttr),
		nameCmp:      sl.NewBuiltin("comparison", opCmp),
		nameOr:       sl.NewBuiltin("|", opBuiltin(syntax.PIPE)),
		nameAnd:      sl.NewBuiltin("&", opBuiltin(syntax.AMP)),
		nameXor:      sl.NewBuiltin("^", opBuiltin(syntax.CIRCUMFLEX)),
		nameGrowOr:   sl.NewBuiltin("|=", opGrowOr),
		nameSlice:    sl.NewBuiltin("slice", opSlice),
		nameKey:      sl.NewBuiltin("key", opKey),
		nameSpread:   sl.NewBuiltin("spread", opSpread),
	}
}

func opBuiltin(op syntax.Token) func(*sl.Thread, *sl.Builtin, sl.Tuple, []sl.Tuple) (sl.Value, error) {
	return func(th *sl.Thread, _ *sl.Builtin, args sl.Tuple, _ []sl.Tuple) (sl.Value, error) {
		return binary(stateOf(th), op, args[0], args[1])
	}
}

// binary applies a growth-checked operator: the size of the result is
// charged to the budget before it is allocated.
func binary(st *runState, op syntax.Token, x, y sl.Value) (sl.Value, error) {
	switch op {
	case syntax.PLUS:
		if xi, ok := x.(sl.Int); ok {
			if yi, ok := y.(sl.Int); ok {
				if err := bigWork(st, xi, yi); err != nil {
					return nil, err
				}
				return xi.Add(yi), nil
			}
		}
		if xd, ok := x.(libtime.Duration); ok {
			if yd, ok := y.(libtime.Duration); ok {
				s := xd + yd
				if (yd >= 0) != (s >= xd) {
					return nil, errDurationOverflow(x, "+", y)
				}
				return s, nil
			}
		}
		if n, unit, ok := seqSize(x); ok {
			if m, _, ok := seqSize(y); ok && x.Type() == y.Type() {
				if err := st.chargeMul(int64(n)+int64(m), unit, "concatenation"); err != nil {
					return nil, err
				}
			}
		}
	case syntax.STAR:
		if xi, ok := x.(sl.Int); ok {
			if yi, ok := y.(sl.Int); ok {
				if bitLen(xi)+bitLen(yi) > MaxIntBits {
					return nil, fmt.Errorf("integer multiplication result would exceed %d bits", MaxIntBits)
				}
				return xi.Mul(yi), nil
			}
		}
		if d, n, ok := durationTimesInt(x, y); ok {
			p := d * n
			if d != 0 && (p/d != n || (d == -1 && n == math.MinInt64) || (n == -1 && d == math.MinInt64)) {
				return nil, errDurationOverflow(x, "*", y)
			}
			return p, nil
		}
		seq, count := x, y
		if _, ok := x.(sl.Int); ok {
			seq, count = y, x
		}
		if n, unit, ok := seqSize(seq); ok && n > 0 {
			if c, ok := count.(sl.Int); ok && c.Sign() > 0 {
				// Upstream refuses a count beyond int32 and a result of
				// maxRepeat elements or more before allocating anything;
				// those keep upstream's error.
				times, ok := c.Int64()
				if !ok || times > math.MaxInt32 || uint64(n)*uint64(times) >= maxRepeat {
					return sl.Binary(op, x, y)
				}
				if err := st.chargeMul(int64(n)*unit, times, "repetition"); err != nil {
					return nil, err
				}
			}
		}
	case syntax.PERCENT:
		if format, ok := x.(sl.String); ok {
			args := []sl.Value{y}
			if t, ok := y.(sl.Tuple); ok {
				args = t
			}
			size, err := st.measureArgs("string formatting", args...)
			if err != nil {
				return nil, err
			}
			directives := int64(strings.Count(string(format), "%"))
			if err := st.chargeMul(directives, size, "string formatting"); err != nil {
				return nil, err
			}
			if err := st.charge(int64(len(format)), "string formatting"); err != nil {
				return nil, err
			}
		}
	case syntax.PIPE, syntax.AMP, syntax.CIRCUMFLEX:
		// Unions, intersections and symmetric differences of sets, and
		// unions of dicts, copy their operands.
		if n, ok := entries(x); ok {
			if m, ok := entries(y); ok && x.Type() == y.Type() {
				if op == syntax.AMP {
					n, m = min(n, m), 0
				}
				if err := st.chargeMul(int64(n)+int64(m), entryBytes, op.String()); err != nil {
					return nil, err
				}
			}
		}
	case syntax.MINUS:
		if xi, ok := x.(sl.Int); ok {
			if yi, ok := y.(sl.Int); ok {
				if err := bigWork(st, xi, yi); err != nil {
					return nil, err
				}
				return xi.Sub(yi), nil
			}
		}
		if z, err, ok := durationMinus(x, y); ok {
			return z, err
		}
		if xs, ok := x.(*sl.Set); ok {
			if _, ok := y.(*sl.Set); ok {
				// A difference copies the left operand's elements.
				if err := st.chargeMul(int64(xs.Len()), entryBytes, "-"); err != nil {
					return nil, err
				}
			}
		}
	case syntax.SLASH:
		if xd, ok := x.(libtime.Duration); ok {
			switch y := y.(type) {
			case sl.Int:
				if n, ok := y.Int64(); ok && n == -1 && xd == math.MinInt64 {
					return nil, errDurationOverflow(x, "/", y)
				}
			case sl.Float:
				q := float64(xd) / float64(y)
				if y != 0 && !(q >= -(1<<63) && q < 1<<63) { // also NaN
					return nil, errDurationOverflow(x, "/", y)
				}
			}
		}
	case syntax.SLASHSLASH:
		if xd, ok := x.(libtime.Duration); ok {
			if yd, ok := y.(libtime.Duration); ok && xd == math.MinInt64 && yd == -1 {
				// The quotient, 2^63, is an int beyond int64: exact.
				return sl.MakeInt64(math.MinInt64).Mul(sl.MakeInt(-1)), nil
			}
		}
	case syntax.LTLT:
		if xi, ok := x.(sl.Int); ok {
			if yi, ok := y.(sl.Int); ok {
				if n, ok := yi.Int64(); ok && n > 0 && int64(bitLen(xi))+n > MaxIntBits {
					return nil, fmt.Errorf("integer shift result would exceed %d bits", MaxIntBits)
				}
			}
		}
	}
	return sl.Binary(op, x, y)
}

// durationMinus is x - y for the operands that involve durations: a
// duration difference beyond the 64-bit range of nanoseconds, and the
// difference of two times more than about 292 years apart (upstream
// saturates it), are errors; a time minus the most negative duration is
// exact (upstream negates the duration, which wraps). ok is false for
// other operands.
func durationMinus(x, y sl.Value) (z sl.Value, err error, ok bool) {
	switch x := x.(type) {
	case libtime.Duration:
		yd, isD := y.(libtime.Duration)
		if !isD {
			return nil, nil, false
		}
		d := x - yd
		if (yd > 0 && d > x) || (yd < 0 && d < x) {
			return nil, errDurationOverflow(x, "-", y), true
		}
		return d, nil, true
	case libtime.Time:
		t := time.Time(x)
		switch y := y.(type) {
		case libtime.Duration:
			if y == math.MinInt64 {
				return libtime.Time(t.Add(math.MaxInt64).Add(1)), nil, true
			}
			return libtime.Time(t.Add(-time.Duration(y))), nil, true
		case libtime.Time:
			u := time.Time(y)
			d := t.Sub(u)
			if (d == math.MaxInt64 || d == math.MinInt64) && !u.Add(d).Equal(t) {
				return nil, fmt.Errorf("duration overflow: %s - %s is beyond about 292 years", x, y), true
			}
			return libtime.Duration(d), nil, true
		}
	}
	return nil, nil, false
}

// durationTimesInt reports the operands of a duration times an integer
// (either way round) that fits in 64 bits; upstream refuses larger ones.
func durationTimesInt(x, y sl.Value) (d, n libtime.Duration, ok bool) {
	if xd, isD := x.(libtime.Duration); isD {
		d = xd
		x = y
	} else if yd, isD := y.(libtime.Duration); isD {
		d = yd
	} else {
		return 0, 0, false
	}
	i, isInt := x.(sl.Int)
	if !isInt {
		return 0, 0, false
	}
	v, fits := i.Int64()
	return d, libtime.Duration(v), fits
}

// errDurationOverflow is the error of a duration beyond the 64-bit range
// of nanoseconds (about 292 years), where upstream wraps around.
func errDurationOverflow(x sl.Value, op string, y sl.Value) error {
	return fmt.Errorf("duration overflow: %s %s %s is beyond about 292 years", x, op, y)
}

// seqSize reports the length of a string, bytes, list or tuple and the
// bytes one element costs.
func seqSize(v sl.Value) (n int, unit int64, ok bool) {
	switch x := v.(type) {
	case sl.String:
		return len(x), 1, true
	case sl.Bytes:
		return len(x), 1, true
	case *sl.List:
		return x.Len(), elemBytes, true
	case sl.Tuple:
		return len(x), elemBytes, true
	}
	return 0, 0, false
}

// bigWork counts the work of adding or subtracting integers beyond 64
// bits: linear in their size, which + can grow by a bit per step.
func bigWork(st *runState, x, y sl.Int) error {
	_, xs := x.Int64()
	_, ys := y.Int64()
	if xs && ys {
		return nil
	}
	return st.work(int64(max(bitLen(x), bitLen(y)) / 8))
}

func bitLen(x sl.Int) int {
	if i, ok := x.Int64(); ok {
		if i < 0 {
			i = -i
		}
		return bits.Len64(uint64(i))
	}
	return x.BigInt().BitLen()
}

// opGrow wraps the right operand of every +=: it charges what the
// operand adds to the target and returns it unchanged, so in-place list
// extension and evaluation order stay upstream's.
func opGrow(th *sl.Thread, _ *sl.Builtin, args sl.Tuple, _ []sl.Tuple) (sl.Value, error) {
	y := args[0]
	if _, ok := y.(sl.Int); ok {
		return y, nil
	}
	if d, ok := y.(libtime.Duration); ok {
		return growDuration(d), nil
	}
	st := stateOf(th)
	if n, unit, ok := seqSize(y); ok {
		return y, st.chargeMul(int64(n), unit, "+=")
	}
	if r, ok := y.(rangeValue); ok {
		return y, st.chargeMul(int64(r.len), elemBytes, "+=")
	}
	return y, nil
}

// growDuration is what $grow hands upstream for a duration operand of
// x += y. Upstream adds it through its Binary method, as the right
// operand: a sum of durations is checked for overflow as $add checks it,
// and everything else is upstream's duration's own answer. It never
// outlives the addition.
type growDuration libtime.Duration

var _ sl.HasBinary = growDuration(0)

func (d growDuration) String() string        { return libtime.Duration(d).String() }
func (d growDuration) Type() string          { return libtime.Duration(d).Type() }
func (d growDuration) Freeze()               {}
func (d growDuration) Truth() sl.Bool        { return d != 0 }
func (d growDuration) Hash() (uint32, error) { return libtime.Duration(d).Hash() }

func (d growDuration) Binary(op syntax.Token, x sl.Value, side sl.Side) (sl.Value, error) {
	if side != sl.Right {
		return nil, nil
	}
	if xd, ok := x.(libtime.Duration); ok && op == syntax.PLUS {
		s := xd + libtime.Duration(d)
		if (d >= 0) != (s >= xd) {
			return nil, errDurationOverflow(x, "+", libtime.Duration(d))
		}
		return s, nil
	}
	return libtime.Duration(d).Binary(op, x, side)
}

// entries reports the number of entries of a set or dict.
func entries(v sl.Value) (int, bool) {
	switch x := v.(type) {
	case *sl.Set:
		return x.Len(), true
	case *sl.Dict:
		return x.Len(), true
	}
	return 0, false
}

// opGrowOr wraps the right operand of x |= y: a dict grows by y's entries
// in place, a set is copied with them. It returns y unchanged. Targets
// other than names pass None for x (then only y's entries are charged).
func opGrowOr(th *sl.Thread, _ *sl.Builtin, args sl.Tuple, _ []sl.Tuple) (sl.Value, error) {
	x, y := args[0], args[1]
	m, ok := entries(y)
	if !ok {
		return y, nil
	}
	if s, ok := x.(*sl.Set); ok {
		m += s.Len()
	}
	return y, stateOf(th).chargeMul(int64(m), entryBytes, "|=")
}

// opSpread wraps the operand of f(*x) and f(**x): the interpreter copies
// x into the call's arguments (and a function's *args tuple or **kwargs
// dict) in one step, so its elements are charged first. A range charges
// itself as it is drained.
func opSpread(th *sl.Thread, _ *sl.Builtin, args sl.Tuple, _ []sl.Tuple) (sl.Value, error) {
	x := args[0]
	if _, ok := x.(rangeValue); ok {
		return x, nil
	}
	unit := int64(3 * slotBytes)
	if _, ok := x.(sl.Mapping); ok {
		unit = entryBytes + 2*slotBytes
	}
	if n := sl.Len(x); n > 0 {
		return x, stateOf(th).chargeMul(int64(n), unit, "argument spread")
	}
	return x, nil
}

// opSlice is x[lo:hi:step]: args[0] says which of lo, hi and step were
// written (bits 1, 2, 4), and they follow x. The indices are upstream's;
// a copy (every list slice, and strided slices of strings, bytes and
// tuples) is charged before it is made.
func opSlice(th *sl.Thread, _ *sl.Builtin, args sl.Tuple, _ []sl.Tuple) (sl.Value, error) {
	mask, _ := args[0].(sl.Int).Int64()
	x := args[1]
	parts := [3]sl.Value{sl.None, sl.None, sl.None}
	next := 2
	for i := range parts {
		if mask&(1<<i) != 0 {
			parts[i] = args[next]
			next++
		}
	}
	sliceable, ok := x.(sl.Sliceable)
	if !ok {
		return nil, fmt.Errorf("invalid slice operand %s", x.Type())
	}
	n := sliceable.Len()
	step := 1
	if parts[2] != sl.None {
		var err error
		if step, err = sl.AsInt32(parts[2]); err != nil {
			return nil, fmt.Errorf("invalid slice step: %s", err)
		}
		if step == 0 {
			return nil, fmt.Errorf("zero is not a valid slice step")
		}
	}
	var start, end int
	if step > 0 {
		start, end = 0, n
		if err := sliceIndex(parts[0], n, &start); err != nil {
			return nil, fmt.Errorf("invalid start index: %s", err)
		}
		if err := sliceIndex(parts[1], n, &end); err != nil {
			return nil, fmt.Errorf("invalid end index: %s", err)
		}
		start, end = min(max(start, 0), n), min(max(end, 0), n)
		end = max(end, start)
	} else {
		start, end = n-1, -1
		if err := sliceIndex(parts[0], n, &start); err != nil {
			return nil, fmt.Errorf("invalid start index: %s", err)
		}
		if err := sliceIndex(parts[1], n, &end); err != nil {
			return nil, fmt.Errorf("invalid end index: %s", err)
		}
		start, end = min(start, n-1), max(end, -1)
		start = max(start, end)
	}
	var unit int64
	switch x.(type) {
	case *sl.List:
		unit = elemBytes
	case sl.Tuple:
		if step != 1 {
			unit = elemBytes
		}
	case sl.String, sl.Bytes:
		if step != 1 {
			unit = 1
		}
	}
	if unit > 0 {
		if err := stateOf(th).chargeMul(int64(rangeLen(start, end, step)), unit, "slice"); err != nil {
			return nil, err
		}
	}
	return sliceable.Slice(start, end, step), nil
}

// sliceIndex is upstream's: a written index, plus n if negative.
func sliceIndex(v sl.Value, n int, result *int) error {
	if v == sl.None {
		return nil
	}
	i, err := sl.AsInt32(v)
	if err != nil {
		return err
	}
	if i < 0 {
		i += n
	}
	*result = i
	return nil
}

// opAttr is x.name for the method names that have bounded replacements.
func opAttr(th *sl.Thread, _ *sl.Builtin, args sl.Tuple, _ []sl.Tuple) (sl.Value, error) {
	return getAttr(args[0], string(args[1].(sl.String)))
}

func getAttr(x sl.Value, name string) (sl.Value, error) {
	if m := boundedMethod(x, name); m != nil {
		return m.BindReceiver(x), nil
	}
	if t, ok := x.(libtime.Time); ok && name == "unix_nano" {
		// Exact: upstream's int64 wraps outside the years 1678 to 2262.
		u := time.Time(t)
		return sl.MakeInt64(u.Unix()).Mul(sl.MakeInt(1e9)).Add(sl.MakeInt(u.Nanosecond())), nil
	}
	ha, ok := x.(sl.HasAttrs)
	if !ok {
		return nil, fmt.Errorf("%s has no .%s field or method", x.Type(), name)
	}
	v, err := ha.Attr(name)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("%s has no .%s field or method", x.Type(), name)
	}
	return v, nil
}

// wrappedMethods are the method names the rewriter routes through $attr.
var wrappedMethods = map[string]bool{
	"join": true, "replace": true, "format": true, "split": true, "rsplit": true,
	"splitlines": true, "extend": true, "in_location": true,
	// Methods that copy their receiver or argument: charged.
	"upper": true, "lower": true, "title": true, "capitalize": true,
	"items": true, "keys": true, "values": true, "update": true,
	"union": true, "intersection": true, "difference": true, "symmetric_difference": true,
	// Set methods that hash each element of their argument.
	"issubset": true, "issuperset": true,
	// Methods that hash a key: the key's hashing is bounded.
	"get": true, "pop": true, "setdefault": true, "add": true, "remove": true, "discard": true,
	// List methods that compare: bounded as == is.
	"index": true,
	// Methods that scan a string or move a list's elements: their linear
	// work is counted as steps.
	"count": true, "find": true, "rfind": true, "rindex": true, "partition": true, "rpartition": true,
	"strip": true, "lstrip": true, "rstrip": true, "startswith": true, "endswith": true,
	"removeprefix": true, "removesuffix": true, "isalnum": true, "isalpha": true, "isdigit": true,
	"islower": true, "isspace": true, "istitle": true, "isupper": true, "insert": true,
	// A time's nanoseconds since 1970, exact beyond 64 bits.
	"unix_nano": true,
}

// scanningMethods are the string methods whose work is a scan of the
// receiver (and their string arguments), counted before upstream's runs.
var scanningMethods = map[string]*sl.Builtin{}

var (
	stringMethods = map[string]*sl.Builtin{
		"join":       sl.NewBuiltin("join", strJoin),
		"replace":    sl.NewBuiltin("replace", strReplace),
		"format":     sl.NewBuiltin("format", strFormat),
		"split":      sl.NewBuiltin("split", strSplit),
		"rsplit":     sl.NewBuiltin("rsplit", strSplit),
		"splitlines": sl.NewBuiltin("splitlines", strSplit),
	}
	listExtend    = sl.NewBuiltin("extend", listExtendBounded)
	copyingMethod = map[string]*sl.Builtin{}
	listSearch    = map[string]*sl.Builtin{
		"index":  sl.NewBuiltin("index", listSearchBounded),
		"remove": sl.NewBuiltin("remove", listSearchBounded),
	}
	timeIn = sl.NewBuiltin("in_location", timeInLocation)
)

func init() {
	for _, name := range []string{"upper", "lower", "title", "capitalize", "items", "keys", "values", "update",
		"union", "intersection", "difference", "symmetric_difference"} {
		copyingMethod[name] = sl.NewBuiltin(name, copyCharged)
	}
	for _, name := range []string{"get", "pop", "setdefault", "add", "remove", "discard"} {
		copyingMethod[name] = sl.NewBuiltin(name, keyBounded)
	}
	for _, name := range []string{"count", "find", "rfind", "index", "rindex", "partition", "rpartition",
		"strip", "lstrip", "rstrip", "startswith", "endswith", "removeprefix", "removesuffix",
		"isalnum", "isalpha", "isdigit", "islower", "isspace", "istitle", "isupper"} {
		scanningMethods[name] = sl.NewBuiltin(name, strScan)
	}
}

// setTests are set.issubset and set.issuperset: upstream hashes every
// element of the argument in one step.
var setTests = map[string]*sl.Builtin{
	"issubset":   sl.NewBuiltin("issubset", hashesArgs),
	"issuperset": sl.NewBuiltin("issuperset", hashesArgs),
}

// hashesArgs bounds the hashing of each element of the arguments (tuples
// nested or shared, long strings), then calls upstream's method.
func hashesArgs(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	w := newCostWalk(stateOf(th))
	for _, a := range args {
		if err := w.hashable(a); err != nil {
			return nil, err
		}
	}
	return upstream(th, b, args, kwargs)
}

// listShift is list.insert and list.pop: both move the elements after
// the index, which for a list of millions is one step of milliseconds.
var listShift = map[string]*sl.Builtin{
	"insert": sl.NewBuiltin("insert", listShiftCounted),
	"pop":    sl.NewBuiltin("pop", listShiftCounted),
}

// strScan counts the scan of the receiver and its string arguments as
// work, then calls upstream's method.
func strScan(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	n := int64(len(b.Receiver().(sl.String)))
	for _, a := range args {
		if s, ok := a.(sl.String); ok {
			n += int64(len(s))
		}
	}
	if err := stateOf(th).work(n); err != nil {
		return nil, err
	}
	return upstream(th, b, args, kwargs)
}

// listShiftCounted counts the elements insert or pop moves as work, then
// calls upstream's method.
func listShiftCounted(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	l := b.Receiver().(*sl.List)
	i, n := l.Len(), l.Len()
	if len(args) > 0 {
		if err := sl.AsInt(args[0], &i); err == nil && i < 0 {
			i += n
		}
	}
	if moved := n - min(max(i, 0), n); moved > 0 {
		if err := stateOf(th).work(int64(moved) * elemBytes); err != nil {
			return nil, err
		}
	}
	return upstream(th, b, args, kwargs)
}

// listSearchBounded walks the comparisons list.index and list.remove
// could make (containers compared recursively, see $cmp), polling, then
// calls upstream's method.
func listSearchBounded(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	if len(args) > 0 {
		l := b.Receiver().(*sl.List)
		w := newCostWalk(stateOf(th))
		deep := isContainer(args[0])
		for i := 0; i < l.Len(); i++ {
			if deep && isContainer(l.Index(i)) {
				if err := w.pair(l.Index(i), args[0], 0); err != nil {
					return nil, err
				}
			} else if err := w.visit(); err != nil {
				return nil, err
			} else if err := w.leaf(l.Index(i), args[0]); err != nil {
				return nil, err
			}
		}
	}
	return upstream(th, b, args, kwargs)
}

// keyBounded bounds the hashing of a dict or set method's key, then calls
// upstream's method.
func keyBounded(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	if len(args) > 0 {
		if hashed(args[0]) {
			w := newCostWalk(stateOf(th))
			if err := w.hash(args[0], 0); err != nil {
				return nil, err
			}
		}
	}
	return upstream(th, b, args, kwargs)
}

func boundedMethod(x sl.Value, name string) *sl.Builtin {
	switch x.(type) {
	case sl.String:
		if m := stringMethods[name]; m != nil {
			return m
		}
		if m := scanningMethods[name]; m != nil {
			return m
		}
		switch name {
		case "upper", "lower", "title", "capitalize":
			return copyingMethod[name]
		}
	case *sl.Dict:
		switch name {
		case "items", "keys", "values", "update", "get", "pop", "setdefault":
			return copyingMethod[name]
		}
	case *sl.Set:
		switch name {
		case "union", "intersection", "difference", "symmetric_difference", "update", "add", "remove", "discard":
			return copyingMethod[name]
		case "issubset", "issuperset":
			return setTests[name]
		}
	case *sl.List:
		switch name {
		case "extend":
			return listExtend
		case "index", "remove":
			return listSearch[name]
		case "insert", "pop":
			return listShift[name]
		}
	case libtime.Time:
		if name == "in_location" {
			return timeIn
		}
	}
	return nil
}

// upstream calls the original method of the receiver.
func upstream(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	m, err := b.Receiver().(sl.HasAttrs).Attr(b.Name())
	if err != nil {
		return nil, err
	}
	return sl.Call(th, m, args, kwargs)
}

func strJoin(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	st := stateOf(th)
	sep := string(b.Receiver().(sl.String))
	var iterable sl.Iterable
	if err := sl.UnpackPositionalArgs("join", args, kwargs, 1, &iterable); err != nil {
		return nil, err
	}
	var parts []string
	var total int64
	err := forEach(st, iterable, func(v sl.Value) error {
		s, ok := v.(sl.String)
		if !ok {
			return fmt.Errorf("join: in list, want string, got %s", v.Type())
		}
		if len(parts) > 0 {
			total += int64(len(sep))
		}
		total += int64(len(s))
		if total > st.budget-st.used {
			return st.charge(total, "join")
		}
		parts = append(parts, string(s))
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := st.charge(total+int64(len(parts))*elemBytes, "join"); err != nil {
		return nil, err
	}
	return sl.String(strings.Join(parts, sep)), nil
}

func strReplace(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	st := stateOf(th)
	s := string(b.Receiver().(sl.String))
	var old, new string
	count := -1
	if err := sl.UnpackPositionalArgs("replace", args, kwargs, 2, &old, &new, &count); err != nil {
		return nil, err
	}
	if err := st.work(int64(len(s))); err != nil {
		return nil, err
	}
	n := strings.Count(s, old)
	if old == "" {
		n = utf8.RuneCountInString(s) + 1
	}
	if count >= 0 && count < n {
		n = count
	}
	if len(new) > len(old) {
		if err := st.chargeMul(int64(n), int64(len(new)-len(old)), "replace"); err != nil {
			return nil, err
		}
	}
	if err := st.charge(int64(len(s)), "replace"); err != nil {
		return nil, err
	}
	return sl.String(strings.Replace(s, old, new, count)), nil
}

func strFormat(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	st := stateOf(th)
	format := string(b.Receiver().(sl.String))
	vals := append([]sl.Value(nil), args...)
	for _, kv := range kwargs {
		vals = append(vals, kv[1])
	}
	size, err := st.measureArgs("format", vals...)
	if err != nil {
		return nil, err
	}
	if err := st.chargeMul(int64(strings.Count(format, "{")), size, "format"); err != nil {
		return nil, err
	}
	if err := st.charge(int64(len(format)), "format"); err != nil {
		return nil, err
	}
	return upstream(th, b, args, kwargs)
}

// strSplit charges the pieces split, rsplit and splitlines can produce.
func strSplit(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	s := string(b.Receiver().(sl.String))
	if err := stateOf(th).work(2 * int64(len(s))); err != nil { // counted, then split
		return nil, err
	}
	pieces := int64(len(s))/2 + 1 // whitespace-separated words
	if b.Name() == "splitlines" {
		pieces = int64(strings.Count(s, "\n")+strings.Count(s, "\r")) + 1
	} else if len(args) > 0 {
		if sep, ok := args[0].(sl.String); ok && sep != "" {
			pieces = int64(strings.Count(s, string(sep))) + 1
		}
	}
	if err := stateOf(th).chargeMul(pieces, 2*elemBytes, b.Name()); err != nil {
		return nil, err
	}
	return upstream(th, b, args, kwargs)
}

func listExtendBounded(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	if len(args) == 1 {
		if n := sl.Len(args[0]); n > 0 {
			if err := stateOf(th).chargeMul(int64(n), elemBytes, "extend"); err != nil {
				return nil, err
			}
		}
	}
	return upstream(th, b, args, kwargs)
}

// copyCharged charges what a copying method makes, then calls upstream's:
// a string's case change copies it; a dict's items, keys and values copy
// its entries; a set's union and differences copy the receiver and the
// argument; update copies the argument's entries into the receiver.
func copyCharged(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	var n, unit int64
	switch x := b.Receiver().(type) {
	case sl.String:
		n, unit = int64(len(x)), 4 // case changes may lengthen UTF-8
	case *sl.Dict:
		n, unit = int64(x.Len()), 3*slotBytes
		if b.Name() == "update" {
			n, unit = 0, entryBytes+slotBytes
		}
	case *sl.Set:
		n, unit = int64(x.Len()), entryBytes
		if b.Name() == "update" {
			n = 0
		}
	}
	if b.Name() == "update" || b.Name() == "union" || b.Name() == "symmetric_difference" {
		for _, a := range args {
			if _, ok := a.(rangeValue); ok {
				continue // a range drained here charges itself
			}
			if m := sl.Len(a); m > 0 {
				n += int64(m)
			}
		}
		for range kwargs {
			n++
		}
	}
	st := stateOf(th)
	if err := st.chargeMul(n, unit, b.Name()); err != nil {
		return nil, err
	}
	w := newCostWalk(st)
	for _, a := range args {
		if err := w.hashable(a); err != nil {
			return nil, err
		}
	}
	return upstream(th, b, args, kwargs)
}

func timeInLocation(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	var loc string
	if err := sl.UnpackPositionalArgs("in_location", args, kwargs, 1, &loc); err != nil {
		return nil, err
	}
	if err := checkLocation(loc); err != nil {
		return nil, err
	}
	return upstream(th, b, args, kwargs)
}

// Augmented-assignment operator codes passed to $augindex and $augattr.
var augOps = []syntax.Token{syntax.STAR, syntax.PERCENT, syntax.LTLT, syntax.AMP, syntax.CIRCUMFLEX, syntax.MINUS, syntax.SLASH, syntax.SLASHSLASH}

// opAugIndex is x[i] op= y for the growth-checked operators.
func opAugIndex(th *sl.Thread, _ *sl.Builtin, args sl.Tuple, _ []sl.Tuple) (sl.Value, error) {
	x, key := args[1], args[2]
	z, err := augmented(th, args, func() (sl.Value, error) { return getIndex(x, key) })
	if err != nil {
		return nil, err
	}
	return sl.None, setIndex(x, key, z)
}

// augmented reads the target's old value and applies the operator coded
// in args[0] with the right operand args[3].
func augmented(th *sl.Thread, args sl.Tuple, read func() (sl.Value, error)) (sl.Value, error) {
	op, _ := args[0].(sl.Int).Int64()
	old, err := read()
	if err != nil {
		return nil, err
	}
	return binary(stateOf(th), augOps[op], old, args[3])
}

// opAugAttr is x.name op= y for the growth-checked operators.
func opAugAttr(th *sl.Thread, _ *sl.Builtin, args sl.Tuple, _ []sl.Tuple) (sl.Value, error) {
	x, name := args[1], string(args[2].(sl.String))
	z, err := augmented(th, args, func() (sl.Value, error) { return getAttr(x, name) })
	if err != nil {
		return nil, err
	}
	sf, ok := x.(sl.HasSetField)
	if !ok {
		return nil, fmt.Errorf("can't assign to .%s field of %s", name, x.Type())
	}
	return sl.None, sf.SetField(name, z)
}

func getIndex(x, key sl.Value) (sl.Value, error) {
	switch x := x.(type) {
	case sl.Mapping:
		v, found, err := x.Get(key)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("key %s not in %s", value.Clip(key.String(), 80), x.Type())
		}
		return v, nil
	case sl.Indexable:
		i, err := index(key, x.Len(), x.Type())
		if err != nil {
			return nil, err
		}
		return x.Index(i), nil
	}
	return nil, fmt.Errorf("unhandled index operation %s[%s]", x.Type(), key.Type())
}

func setIndex(x, key, v sl.Value) error {
	switch x := x.(type) {
	case sl.HasSetKey:
		return x.SetKey(key, v)
	case sl.HasSetIndex:
		i, err := index(key, x.Len(), x.Type())
		if err != nil {
			return err
		}
		return x.SetIndex(i, v)
	}
	return fmt.Errorf("%s value does not support item assignment", x.Type())
}

func index(key sl.Value, n int, typ string) (int, error) {
	var i int
	if err := sl.AsInt(key, &i); err != nil {
		return 0, fmt.Errorf("%s index: %s", typ, err)
	}
	if i < 0 {
		i += n
	}
	if i < 0 || i >= n {
		return 0, fmt.Errorf("%s index %d out of range [0:%d]", typ, i, n)
	}
	return i, nil
}
