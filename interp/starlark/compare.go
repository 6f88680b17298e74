package starlark

import (
	"fmt"

	sl "go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// nameCmp is the hidden built-in that guards comparisons and membership
// tests whose operands are not known to be scalars.
const nameCmp = "$cmp"

// nameKey is the hidden built-in that bounds the hashing of subscripts
// and dict keys.
const nameKey = "$key"

// opKey returns its argument, after walking what hashing it would visit
// if it is a tuple: upstream hashes tuples recursively, with no depth
// limit (a chain millions deep overflows the Go stack, which is fatal) and
// no cancellation (a tuple sharing itself 64 levels deep hashes 2^64
// nodes).
func opKey(th *sl.Thread, _ *sl.Builtin, args sl.Tuple, _ []sl.Tuple) (sl.Value, error) {
	k := args[0]
	if hashed(k) {
		w := newCostWalk(stateOf(th))
		if err := w.hash(k, 0); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// leafWork counts the work of comparing two strings (or bytes), which
// upstream does in one step however long they are. Other pairs cost
// nothing here.
func leafWork(st *runState, x, y sl.Value) error {
	return st.work(leafBytes(x, y))
}

// leafBytes is what comparing x and y reads at most: the shorter of two
// strings (or bytes).
func leafBytes(x, y sl.Value) int64 {
	var n, m int
	switch x := x.(type) {
	case sl.String:
		y, ok := y.(sl.String)
		if !ok {
			return 0
		}
		n, m = len(x), len(y)
	case sl.Bytes:
		y, ok := y.(sl.Bytes)
		if !ok {
			return 0
		}
		n, m = len(x), len(y)
	default:
		return 0
	}
	return int64(min(n, m))
}

// hashBytes is what hashing a string or bytes key reads.
func hashBytes(x sl.Value) int64 {
	switch x := x.(type) {
	case sl.String:
		return int64(len(x))
	case sl.Bytes:
		return int64(len(x))
	}
	return 0
}

// hashWork counts the work of hashing a string or bytes key.
func hashWork(st *runState, x sl.Value) error { return st.work(hashBytes(x)) }

// hashable bounds the hashing of each element of an iterable about to be
// inserted into a set or dict (pairs for a dict: their keys are hashed),
// cumulatively.
func (w *costWalk) hashable(x sl.Value) error {
	switch x := x.(type) {
	case sl.Tuple:
		return w.hash(x, 0)
	case *sl.List, *sl.Set:
		it := x.(sl.Iterable).Iterate()
		defer it.Done()
		var e sl.Value
		for it.Next(&e) {
			if hashed(e) {
				if err := w.hash(e, 0); err != nil {
					return err
				}
			}
		}
	case *sl.Dict:
		for _, kv := range x.Items() {
			if hashed(kv[0]) {
				if err := w.hash(kv[0], 0); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// hashed reports the keys whose hashing the walk bounds or counts:
// tuples (recursive) and strings and bytes (linear).
func hashed(k sl.Value) bool {
	switch k.(type) {
	case sl.Tuple, sl.String, sl.Bytes:
		return true
	}
	return false
}

// cmpOps are the operators $cmp takes, by the code the rewriter passes.
var cmpOps = []syntax.Token{syntax.EQL, syntax.NEQ, syntax.LT, syntax.GT, syntax.LE, syntax.GE, syntax.IN, syntax.NOT_IN}

func cmpCode(op syntax.Token) int {
	for i, o := range cmpOps {
		if o == op {
			return i
		}
	}
	return -1
}

// opCmp bounds the work of a comparison before upstream does it: upstream
// compares containers recursively (ten levels deep but unbounded in
// width) and hashes tuples recursively, inside one step and without
// checking for cancellation, so containers that share their parts can
// make one comparison take longer than the universe has. The cost walk
// below visits what upstream could visit, up to a limit, polling as it
// goes; past the limit the comparison is refused.
func opCmp(th *sl.Thread, _ *sl.Builtin, args sl.Tuple, _ []sl.Tuple) (sl.Value, error) {
	code, _ := args[0].(sl.Int).Int64()
	op, x, y := cmpOps[code], args[1], args[2]
	st := stateOf(th)
	w := newCostWalk(st)
	var err error
	switch op {
	case syntax.IN, syntax.NOT_IN:
		// A substring search scans the whole string.
		switch y := y.(type) {
		case sl.String:
			err = st.work(int64(len(y)))
		case sl.Bytes:
			err = st.work(int64(len(y)))
		}
		if err != nil {
			return nil, err
		}
		if found, done, err := w.scan(x, y); done {
			if err != nil {
				return nil, err
			}
			return sl.Bool(found == (op == syntax.IN)), nil
		}
		err = w.membership(x, y)
	default:
		err = w.pair(x, y, 0)
	}
	if err != nil {
		return nil, err
	}
	if op == syntax.IN || op == syntax.NOT_IN {
		return sl.Binary(op, x, y)
	}
	ok, err := sl.Compare(op, x, y)
	return sl.Bool(ok), err
}

func newCostWalk(st *runState) costWalk {
	return costWalk{st: st, limit: max(1<<20, st.budget/16)}
}

// compare is sl.Compare for the bounded built-ins (sorted, max, min):
// comparisons between containers are walked first, cumulatively.
func (w *costWalk) compare(op syntax.Token, x, y sl.Value) (bool, error) {
	if isContainer(x) && isContainer(y) {
		if err := w.pair(x, y, 0); err != nil {
			return false, err
		}
	} else if err := leafWork(w.st, x, y); err != nil {
		return false, err
	}
	return sl.Compare(op, x, y)
}

func isContainer(v sl.Value) bool {
	switch v.(type) {
	case *sl.List, sl.Tuple, *sl.Dict, *sl.Set:
		return true
	}
	return false
}

type costWalk struct {
	st            *runState
	visits, limit int64
	// bytes is what the walk counted of strings compared or hashed; past
	// the budget (at least 256 MiB) the walk refuses: strings shared many
	// times in a tuple or list cost no memory, but upstream reads each
	// copy in full in one step after the walk.
	bytes int64
}

// leaf counts the work of comparing two strings the walk reaches.
func (w *costWalk) leaf(x, y sl.Value) error {
	return w.read(leafBytes(x, y))
}

func (w *costWalk) read(n int64) error {
	if n == 0 {
		return nil
	}
	w.bytes += n
	if w.bytes > max(1<<28, w.st.budget) {
		return fmt.Errorf("comparison or hashing refused: it would read more than %d bytes of strings (values that share their parts)", max(1<<28, w.st.budget))
	}
	return w.st.work(n)
}

func (w *costWalk) visit() error {
	w.visits++
	if w.visits > w.limit {
		return fmt.Errorf("comparison or hashing refused: it would visit more than %d elements (values that share their parts)", w.limit)
	}
	if w.visits%pollIters == 0 {
		return w.st.poll()
	}
	return nil
}

// pair walks x and y in step as upstream's recursive comparison could.
func (w *costWalk) pair(x, y sl.Value, depth int) error {
	if err := w.visit(); err != nil {
		return err
	}
	if err := w.leaf(x, y); err != nil {
		return err
	}
	if depth >= sl.CompareLimit {
		return nil
	}
	switch x := x.(type) {
	case *sl.List:
		if y, ok := y.(*sl.List); ok {
			return w.seq(x, y, min(x.Len(), y.Len()), depth)
		}
	case sl.Tuple:
		if y, ok := y.(sl.Tuple); ok {
			return w.seq(x, y, min(len(x), len(y)), depth)
		}
	case *sl.Set:
		// Upstream compares sets by looking up each element of one in the
		// other: every element is hashed again.
		if y, ok := y.(*sl.Set); ok {
			for _, s := range []*sl.Set{x, y} {
				if err := w.hashable(s); err != nil {
					return err
				}
			}
		}
	case *sl.Dict:
		if y, ok := y.(*sl.Dict); ok && x.Len() == y.Len() {
			for _, kv := range x.Items() {
				if err := w.hash(kv[0], 0); err != nil {
					return err
				}
				if v, found, _ := y.Get(kv[0]); found {
					if err := w.pair(kv[1], v, depth+1); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func (w *costWalk) seq(x, y sl.Indexable, n, depth int) error {
	for i := 0; i < n; i++ {
		if err := w.pair(x.Index(i), y.Index(i), depth+1); err != nil {
			return err
		}
	}
	return nil
}

// hash walks what hashing x visits: tuples recurse, without a depth limit.
func (w *costWalk) hash(x sl.Value, depth int) error {
	if err := w.visit(); err != nil {
		return err
	}
	if err := w.read(hashBytes(x)); err != nil {
		return err
	}
	if t, ok := x.(sl.Tuple); ok {
		if depth > maxFormatDepth {
			return fmt.Errorf("tuple nested more than %d deep cannot be hashed", maxFormatDepth)
		}
		for _, e := range t {
			if err := w.hash(e, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// scan answers x in y for a list or tuple y as upstream does (equality
// with each element in turn), polling as it goes: scanning millions of
// elements is one step, and hundreds of such steps fit between two
// step-based polls. Pairs of containers are walked first. done is false
// for other kinds of y.
func (w *costWalk) scan(x, y sl.Value) (found, done bool, err error) {
	var seq sl.Indexable
	switch y := y.(type) {
	case *sl.List:
		seq = y
	case sl.Tuple:
		seq = y
	default:
		return false, false, nil
	}
	deep := isContainer(x)
	for i := 0; i < seq.Len(); i++ {
		e := seq.Index(i)
		if deep && isContainer(e) {
			if err := w.pair(x, e, 0); err != nil {
				return false, true, err
			}
		} else if i%pollIters == pollIters-1 {
			if err := w.st.poll(); err != nil {
				return false, true, err
			}
		}
		if err := leafWork(w.st, x, e); err != nil {
			return false, true, err
		}
		if eq, err := sl.Equal(e, x); err != nil || eq {
			return eq, true, err
		}
	}
	return false, true, nil
}

// membership walks x in y: equality with each element of a sequence, or
// one hash for a dict or set.
func (w *costWalk) membership(x, y sl.Value) error {
	switch y := y.(type) {
	case *sl.List, sl.Tuple:
		seq := y.(sl.Indexable)
		for i := 0; i < seq.Len(); i++ {
			if err := w.pair(x, seq.Index(i), 0); err != nil {
				return err
			}
		}
	case *sl.Dict, *sl.Set:
		return w.hash(x, 0)
	}
	return nil
}
