package starlark

import (
	"fmt"
	"math"

	sl "go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// rangeValue replaces the built-in range. It behaves like upstream's, but
// its iterator notices when it is drained inside a single interpreter step
// (by a builtin or an argument spread such as f(*range(1<<40))) and then
// charges the run's allocation budget and polls for cancellation, so no
// Go loop over a range can run unbounded.
type rangeValue struct {
	start, stop, step, len int
	st                     *runState
}

var (
	_ sl.Indexable  = rangeValue{}
	_ sl.Sequence   = rangeValue{}
	_ sl.Comparable = rangeValue{}
	_ sl.Sliceable  = rangeValue{}
	_ sl.Container  = rangeValue{}
)

func builtinRange(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	// Arguments are unpacked by hand: UnpackPositionalArgs would move them
	// to the heap, and range is called in nearly every loop.
	if len(kwargs) > 0 {
		return nil, fmt.Errorf("range: unexpected keyword arguments")
	}
	if len(args) < 1 || len(args) > 3 {
		return nil, fmt.Errorf("range: got %d arguments, want 1 to 3", len(args))
	}
	vals := [3]int{0, 0, 1}
	for i, a := range args {
		n, ok := a.(sl.Int)
		if !ok {
			return nil, fmt.Errorf("range: for parameter %d: got %s, want int", i+1, a.Type())
		}
		v, ok := n.Int64()
		if !ok || int64(int(v)) != v {
			var x int
			err := sl.AsInt(n, &x) // upstream's message, with the range it wants
			return nil, fmt.Errorf("range: for parameter %d: %v", i+1, err)
		}
		vals[i] = int(v)
	}
	start, stop, step := vals[0], vals[1], vals[2]
	if len(args) == 1 {
		start, stop = 0, start
	}
	if step == 0 {
		return nil, fmt.Errorf("range: step argument must not be zero")
	}
	n := rangeLen(start, stop, step)
	if n < 0 {
		return nil, fmt.Errorf("range: more than %d elements", math.MaxInt)
	}
	return rangeValue{start: start, stop: stop, step: step, len: n, st: stateOf(th)}, nil
}

// rangeLen is the number of elements of range(start, stop, step), or -1
// if it does not fit in an int. It is computed without overflow: the
// elements may span more than the int range.
func rangeLen(start, stop, step int) int {
	var n uint64
	switch {
	case step > 0 && stop > start:
		n = (uint64(stop)-uint64(start)-1)/uint64(step) + 1
	case step < 0 && start > stop:
		n = (uint64(start)-uint64(stop)-1)/uint64(-step) + 1
	}
	if n > math.MaxInt {
		return -1
	}
	return int(n)
}

func (r rangeValue) Len() int             { return r.len }
func (r rangeValue) Index(i int) sl.Value { return sl.MakeInt(r.start + i*r.step) }
func (r rangeValue) Iterate() sl.Iterator { return &rangeIterator{r: r} }
func (r rangeValue) Freeze()              {}
func (r rangeValue) Type() string         { return "range" }
func (r rangeValue) Truth() sl.Bool       { return r.len > 0 }
func (r rangeValue) Hash() (uint32, error) {
	return 0, fmt.Errorf("unhashable: range")
}

// Slice takes start, end and step as indices (end may be -1 or len). The
// elements' step may not fit in an int when they span more than the int
// range; then there are at most two of them.
func (r rangeValue) Slice(start, end, step int) sl.Value {
	n := rangeLen(start, end, step) // in index space: no overflow
	s, e, st := r.start+r.step*start, r.start+r.step*end, r.step*step
	if st/step == r.step && !(step == -1 && r.step == math.MinInt) {
		return rangeValue{start: s, stop: e, step: st, len: n, st: r.st}
	}
	if n == 2 {
		return sl.Tuple{r.Index(start), r.Index(start + step)}
	}
	unit := 1
	if (r.step < 0) != (step < 0) {
		unit = -1
	}
	return rangeValue{start: s, stop: s + n*unit, step: unit, len: n, st: r.st}
}

func (r rangeValue) String() string {
	switch {
	case r.step != 1:
		return fmt.Sprintf("range(%d, %d, %d)", r.start, r.stop, r.step)
	case r.start != 0:
		return fmt.Sprintf("range(%d, %d)", r.start, r.stop)
	}
	return fmt.Sprintf("range(%d)", r.stop)
}

func (r rangeValue) CompareSameType(op syntax.Token, y sl.Value, depth int) (bool, error) {
	o := y.(rangeValue)
	eq := r.len == o.len && (r.len == 0 || r.start == o.start && (r.len == 1 || r.step == o.step))
	switch op {
	case syntax.EQL:
		return eq, nil
	case syntax.NEQ:
		return !eq, nil
	}
	return false, fmt.Errorf("range %s range not implemented", op)
}

func (r rangeValue) Has(y sl.Value) (bool, error) {
	i, err := sl.NumberToInt(y)
	if err != nil {
		return false, fmt.Errorf("'in <range>' requires integer as left operand, not %s", y.Type())
	}
	x, ok := i.Int64()
	if !ok || int64(int(x)) != x {
		return false, nil
	}
	// Distances in uint64: the elements may span more than the int range.
	v := int(x)
	var d, step uint64
	switch {
	case r.step > 0 && v >= r.start:
		d, step = uint64(v)-uint64(r.start), uint64(r.step)
	case r.step < 0 && v <= r.start:
		d, step = uint64(r.start)-uint64(v), uint64(-r.step)
	default:
		return false, nil
	}
	return d%step == 0 && d/step < uint64(r.len), nil
}

// rangeIterator counts the elements it yields within one interpreter step;
// past a batch it charges them to the budget and polls.
type rangeIterator struct {
	r     rangeValue
	i     int
	steps uint64
	n     int
}

// rangeElemBytes is what one element drained inside a step is charged: the
// consumer is not known, so assume it is stored in a hash table.
const rangeElemBytes = 96

func (it *rangeIterator) Next(p *sl.Value) bool {
	if it.i >= it.r.len {
		return false
	}
	if st := it.r.st; st != nil {
		if st.thread.Steps != it.steps {
			it.steps, it.n = st.thread.Steps, 0
		} else if it.n++; it.n%pollIters == 0 {
			if st.chargeMul(pollIters, rangeElemBytes, "iterating a range inside one step") != nil || st.poll() != nil {
				return false
			}
		}
	}
	*p = it.r.Index(it.i)
	it.i++
	return true
}

func (it *rangeIterator) Done() {}
