package expr

import (
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/vm/runtime"
)

// Checked arithmetic. expr's VM adds, subtracts, multiplies and negates
// 64-bit integers (and durations) with Go's wrapping operators, and
// converts floats to integers with Go's conversion, whose result for a
// value out of range is unspecified: 9223372036854775807 + 1 is a large
// negative number and int(1e300) is -9223372036854775808, with no error.
// The walker replaces those operations by the helpers below, which give
// the same results where the true result fits and a runtime error where
// it does not. Floats keep IEEE semantics (an infinite or NaN result is
// refused when the value is exported, as JSON cannot represent it).

// errOverflow is the error of an integer result outside int64.
func errOverflow(x any, op string, y any) error {
	return fmt.Errorf("integer overflow: %v %s %v is outside the 64-bit integer range", x, op, y)
}

// errBig is the error of arithmetic on an input integer beyond int64
// (JSON input keeps every digit, as *big.Int), or nil.
func errBig(vs ...any) error {
	for _, v := range vs {
		if b, ok := v.(*big.Int); ok {
			return fmt.Errorf("integer overflow: %v is outside the 64-bit integer range that arithmetic works in", b)
		}
	}
	return nil
}

// intOf returns v as an int64 when it is an integer of a type expr's VM
// treats as int (the input's int64, the VM's int, smaller widths).
func intOf(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint8:
		return int64(x), true
	}
	return 0, false
}

func addInt(x, y int64) (int64, bool) {
	s := x + y
	return s, (y >= 0) == (s >= x)
}

func subInt(x, y int64) (int64, bool) {
	d := x - y
	return d, (y >= 0) == (d <= x)
}

func mulInt(x, y int64) (int64, bool) {
	if x == 0 || y == 0 {
		return 0, true
	}
	p := x * y
	if (x == -1 && y == math.MinInt64) || (y == -1 && x == math.MinInt64) || p/y != x {
		return 0, false
	}
	return p, true
}

// checkedAdd is a + b for numbers and durations; anything else goes to
// expr's own Add (time plus duration, or its "invalid operation" error).
func checkedAdd(a, b any) (any, error) {
	if x, ok := intOf(a); ok {
		if y, ok := intOf(b); ok {
			if s, ok := addInt(x, y); ok {
				return int(s), nil
			}
			return nil, errOverflow(a, "+", b)
		}
	}
	if x, ok := a.(time.Duration); ok {
		if y, ok := b.(time.Duration); ok {
			if s, ok := addInt(int64(x), int64(y)); ok {
				return time.Duration(s), nil
			}
			return nil, errOverflow(a, "+", b)
		}
	}
	if err := errBig(a, b); err != nil {
		return nil, err
	}
	return runtime.Add(a, b), nil
}

func checkedSub(a, b any) (any, error) {
	if x, ok := intOf(a); ok {
		if y, ok := intOf(b); ok {
			if d, ok := subInt(x, y); ok {
				return int(d), nil
			}
			return nil, errOverflow(a, "-", b)
		}
	}
	switch x := a.(type) {
	case time.Duration:
		if y, ok := b.(time.Duration); ok {
			if d, ok := subInt(int64(x), int64(y)); ok {
				return time.Duration(d), nil
			}
			return nil, errOverflow(a, "-", b)
		}
	case time.Time:
		// Time.Sub saturates at the largest duration (about 292 years).
		if y, ok := b.(time.Time); ok {
			d := x.Sub(y)
			if !y.Add(d).Equal(x) {
				return nil, fmt.Errorf("duration overflow: %v - %v is more than %v apart", x.Format(time.RFC3339), y.Format(time.RFC3339), time.Duration(math.MaxInt64))
			}
			return d, nil
		}
	}
	if err := errBig(a, b); err != nil {
		return nil, err
	}
	return runtime.Subtract(a, b), nil
}

func checkedMul(a, b any) (any, error) {
	if x, ok := intOf(a); ok {
		if y, ok := intOf(b); ok {
			if p, ok := mulInt(x, y); ok {
				return int(p), nil
			}
			return nil, errOverflow(a, "*", b)
		}
	}
	// A duration times an integer (or a duration) is a duration.
	x, xd := a.(time.Duration)
	y, yd := b.(time.Duration)
	if xd || yd {
		if !xd {
			n, ok := intOf(a)
			if !ok {
				return runtime.Multiply(a, b), nil
			}
			x = time.Duration(n)
		}
		if !yd {
			n, ok := intOf(b)
			if !ok {
				return runtime.Multiply(a, b), nil
			}
			y = time.Duration(n)
		}
		if p, ok := mulInt(int64(x), int64(y)); ok {
			return time.Duration(p), nil
		}
		return nil, errOverflow(a, "*", b)
	}
	if err := errBig(a, b); err != nil {
		return nil, err
	}
	return runtime.Multiply(a, b), nil
}

func checkedNeg(a any) (any, error) {
	if x, ok := intOf(a); ok {
		if x == math.MinInt64 {
			return nil, fmt.Errorf("integer overflow: -(%d) is outside the 64-bit integer range", x)
		}
		return int(-x), nil
	}
	if x, ok := a.(time.Duration); ok {
		if x == math.MinInt64 {
			return nil, fmt.Errorf("integer overflow: -(%v) is outside the 64-bit integer range", x)
		}
		return -x, nil
	}
	if err := errBig(a); err != nil {
		return nil, err
	}
	return runtime.Negate(a), nil
}

// floatToInt truncates f towards zero, as Go and expr do, when the result
// fits in an int64.
func floatToInt(name string, f float64) (int, error) {
	// -2^63 is exactly representable; 2^63 is the first float beyond.
	if math.IsNaN(f) || f < -(1<<63) || f >= 1<<63 {
		return 0, fmt.Errorf("%s: %v is outside the 64-bit integer range", name, f)
	}
	return int(f), nil
}

func checkedInt(a any) (any, error) {
	switch x := a.(type) {
	case int:
		return x, nil
	case float64:
		return floatToInt("int", x)
	case float32:
		return floatToInt("int", float64(x))
	}
	if x, ok := intOf(a); ok {
		return int(x), nil
	}
	if err := errBig(a); err != nil {
		return nil, err
	}
	return builtin.Int(a), nil // strings, and expr's errors for the rest
}

func checkedAbs(a any) (any, error) {
	switch x := a.(type) {
	case int:
		if x == math.MinInt64 {
			return nil, fmt.Errorf("integer overflow: abs(%d) is outside the 64-bit integer range", x)
		}
		if x < 0 {
			return -x, nil
		}
		return x, nil
	case int64:
		if x == math.MinInt64 {
			return nil, fmt.Errorf("integer overflow: abs(%d) is outside the 64-bit integer range", x)
		}
		if x < 0 {
			return -x, nil
		}
		return x, nil
	}
	if err := errBig(a); err != nil {
		return nil, err
	}
	return builtin.Abs(a), nil
}

// rangeBound converts a bound of a..b as expr's VM does (floats truncate),
// refusing floats beyond the integer range.
func rangeBound(v any) (int64, error) {
	switch x := v.(type) {
	case float64:
		n, err := floatToInt("range bound", x)
		return int64(n), err
	case float32:
		n, err := floatToInt("range bound", float64(x))
		return int64(n), err
	}
	if n, ok := intOf(v); ok {
		return n, nil
	}
	return int64(runtime.ToInt(v)), nil // expr's error for the rest
}

// checkedRange is a..b: expr's VM works out its length as b - a + 1
// with wrapping arithmetic, so a range longer than the integer range came
// out empty. Its elements are charged to the memory budget.
func checkedRange(args ...any) (any, error) {
	lo, err := rangeBound(args[1])
	if err != nil {
		return nil, err
	}
	hi, err := rangeBound(args[2])
	if err != nil {
		return nil, err
	}
	if hi < lo {
		return []int{}, nil
	}
	n, ok := subInt(hi, lo)
	if !ok || n >= math.MaxInt64/elementBytes {
		return nil, st(args).reserve(-1)
	}
	n++
	if err := st(args).reserve(n * elementBytes); err != nil {
		return nil, err
	}
	out := make([]int, n)
	for i := range out {
		out[i] = int(lo) + i
	}
	return out, nil
}

// rangeSum is m + (m+1) + ... + n for literal bounds, when it fits.
func rangeSum(m, n int64) (int64, bool) {
	if n < m {
		return 0, true
	}
	count := new(big.Int).Sub(big.NewInt(n), big.NewInt(m))
	count.Add(count, big.NewInt(1))
	s := new(big.Int).Add(big.NewInt(m), big.NewInt(n))
	s.Mul(s, count)
	s.Quo(s, big.NewInt(2))
	if !s.IsInt64() {
		return 0, false
	}
	return s.Int64(), true
}

// must panics with err, which expr's VM turns into the run's error (as
// it does its own "invalid operation" panics).
func must(v any, err error) any {
	if err != nil {
		panic(err)
	}
	return v
}

// typedHelpers are the checked operations the walker patches in as
// constant callees, without the run's state. Their signatures are among
// those expr's VM calls directly (OpCallTyped): no argument slice, so a
// warm run still allocates nothing. __addn is + where no operand can be a
// string (one is a number literal, or it sums numbers).
var typedHelpers = map[string]any{
	"__addn": func(a, b any) any { return must(checkedAdd(a, b)) },
	"__sub":  func(a, b any) any { return must(checkedSub(a, b)) },
	"__mul":  func(a, b any) any { return must(checkedMul(a, b)) },
	"__neg":  func(a any) any { return must(checkedNeg(a)) },
	"__int":  func(a any) any { return must(checkedInt(a)) },
	"__abs":  func(a any) any { return must(checkedAbs(a)) },
	"__rangeSum": func(a, b any) any {
		lo, hi := a.(int), b.(int)
		if v, ok := rangeSum(int64(lo), int64(hi)); ok {
			return int(v)
		}
		panic(fmt.Errorf("integer overflow: sum(%d..%d) is outside the 64-bit integer range", lo, hi))
	},
}

// arithHelpers are the checked operations that take the run's state
// first: __range charges its elements to the memory budget.
var arithHelpers = map[string]func(args ...any) (any, error){
	"__range": checkedRange,
}
