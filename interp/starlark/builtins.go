package starlark

import (
	"fmt"
	"math/bits"
	"sort"
	"strings"
	"unicode/utf8"

	sl "go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"github.com/airlock-sandbox/airlock"
)

// MaxIntDigits bounds the length of a decimal (or other non-power-of-two
// base) string converted by int(): the conversion is quadratic. Python
// applies the same limit.
const MaxIntDigits = 4300

// slotBytes is what one collected element is charged (a slot and its value).
const slotBytes = 32

// entryBytes is what one set element or dict entry is charged (hash table
// entry, bucket share and boxed values).
const entryBytes = 128

// universe returns the bounded replacements for upstream's built-ins that
// allocate or loop within one interpreter step. They are predeclared, so
// they shadow upstream's universe for every script this tier runs.
func universe() sl.StringDict {
	return sl.StringDict{
		"range":     sl.NewBuiltin("range", builtinRange),
		"list":      sl.NewBuiltin("list", builtinList),
		"tuple":     sl.NewBuiltin("tuple", builtinTuple),
		"sorted":    sl.NewBuiltin("sorted", builtinSorted),
		"reversed":  sl.NewBuiltin("reversed", builtinReversed),
		"enumerate": sl.NewBuiltin("enumerate", builtinEnumerate),
		"zip":       sl.NewBuiltin("zip", builtinZip),
		"set":       sl.NewBuiltin("set", builtinSet),
		"dict":      sl.NewBuiltin("dict", builtinDict),
		"max":       sl.NewBuiltin("max", builtinMinMax),
		"min":       sl.NewBuiltin("min", builtinMinMax),
		"any":       sl.NewBuiltin("any", builtinAnyAll),
		"all":       sl.NewBuiltin("all", builtinAnyAll),
		"sum":       sl.NewBuiltin("sum", builtinSum),
		"bytes":     sl.NewBuiltin("bytes", builtinBytes),
		"int":       sl.NewBuiltin("int", builtinInt),
		"str":       sl.NewBuiltin("str", builtinStr),
		"repr":      sl.NewBuiltin("repr", builtinStr),
		"print":     sl.NewBuiltin("print", builtinPrint),
		"fail":      sl.NewBuiltin("fail", builtinFail),
		"getattr":   sl.NewBuiltin("getattr", builtinGetattr),
		"hash":      sl.NewBuiltin("hash", builtinHash),
	}
}

// forEach calls fn for each element of x, polling for cancellation as it
// goes. Ranges are walked arithmetically.
func forEach(st *runState, x sl.Iterable, fn func(sl.Value) error) error {
	if r, ok := x.(rangeValue); ok {
		for i := 0; i < r.len; i++ {
			if i%pollIters == pollIters-1 {
				if err := st.poll(); err != nil {
					return err
				}
			}
			if err := fn(sl.MakeInt(r.start + i*r.step)); err != nil {
				return err
			}
		}
		return nil
	}
	it := x.Iterate()
	defer it.Done()
	var v sl.Value
	for i := 0; it.Next(&v); i++ {
		if i%pollIters == pollIters-1 {
			if err := st.poll(); err != nil {
				return err
			}
		}
		if err := fn(v); err != nil {
			return err
		}
	}
	return st.stopped()
}

// collect materialises x, charging slotBytes per element before storing it.
func collect(st *runState, x sl.Iterable, what string) ([]sl.Value, error) {
	var out []sl.Value
	if n := sl.Len(x); n >= 0 {
		if err := st.chargeMul(int64(n), slotBytes, what); err != nil {
			return nil, err
		}
		out = make([]sl.Value, 0, n)
		return out, forEach(st, x, func(v sl.Value) error { out = append(out, v); return nil })
	}
	err := forEach(st, x, func(v sl.Value) error {
		if len(out)%pollIters == 0 {
			if err := st.chargeMul(pollIters, slotBytes, what); err != nil {
				return err
			}
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

func oneIterable(name string, args sl.Tuple, kwargs []sl.Tuple) (sl.Iterable, error) {
	var x sl.Iterable
	if err := sl.UnpackPositionalArgs(name, args, kwargs, 0, &x); err != nil {
		return nil, err
	}
	return x, nil
}

func builtinList(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	x, err := oneIterable("list", args, kwargs)
	if err != nil || x == nil {
		return sl.NewList(nil), err
	}
	elems, err := collect(stateOf(th), x, "list")
	if err != nil {
		return nil, err
	}
	return sl.NewList(elems), nil
}

func builtinTuple(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	x, err := oneIterable("tuple", args, kwargs)
	if err != nil || x == nil {
		return sl.Tuple(nil), err
	}
	if t, ok := x.(sl.Tuple); ok {
		return t, nil
	}
	elems, err := collect(stateOf(th), x, "tuple")
	if err != nil {
		return nil, err
	}
	return sl.Tuple(elems), nil
}

func builtinReversed(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	var x sl.Iterable
	if err := sl.UnpackPositionalArgs("reversed", args, kwargs, 1, &x); err != nil {
		return nil, err
	}
	elems, err := collect(stateOf(th), x, "reversed")
	if err != nil {
		return nil, err
	}
	for i, j := 0, len(elems)-1; i < j; i, j = i+1, j-1 {
		elems[i], elems[j] = elems[j], elems[i]
	}
	return sl.NewList(elems), nil
}

func builtinSorted(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	var (
		x       sl.Iterable
		key     sl.Callable
		reverse bool
	)
	if err := sl.UnpackArgs("sorted", args, kwargs, "iterable", &x, "key?", &key, "reverse?", &reverse); err != nil {
		return nil, err
	}
	st := stateOf(th)
	elems, err := collect(st, x, "sorted")
	if err != nil {
		return nil, err
	}
	keys := elems
	if key != nil {
		if err := st.chargeMul(int64(len(elems)), slotBytes, "sorted"); err != nil {
			return nil, err
		}
		keys = make([]sl.Value, len(elems))
		for i, e := range elems {
			k, err := sl.Call(th, key, sl.Tuple{e}, nil)
			if err != nil {
				return nil, err
			}
			keys[i] = k
		}
	}
	idx := make([]int, len(elems))
	for i := range idx {
		idx[i] = i
	}
	// As upstream, a failed comparison does not end the sort, and the last
	// one is reported; a stop or a refused walk ends it at once.
	var cmpErr, stopErr error
	compares := 0
	w := newCostWalk(st)
	sort.SliceStable(idx, func(i, j int) bool {
		if stopErr != nil {
			return false
		}
		if compares++; compares%pollIters == 0 {
			if stopErr = st.poll(); stopErr != nil {
				return false
			}
		}
		a, c := keys[idx[i]], keys[idx[j]]
		if reverse {
			a, c = c, a
		}
		if isContainer(a) && isContainer(c) {
			if stopErr = w.pair(a, c, 0); stopErr != nil {
				return false
			}
		} else if stopErr = leafWork(st, a, c); stopErr != nil {
			return false
		}
		less, err := sl.Compare(syntax.LT, a, c)
		if err != nil {
			cmpErr = err
		}
		return less
	})
	if stopErr != nil {
		return nil, stopErr
	}
	if cmpErr != nil {
		return nil, cmpErr
	}
	out := make([]sl.Value, len(elems))
	for i, k := range idx {
		out[i] = elems[k]
	}
	return sl.NewList(out), nil
}

func builtinEnumerate(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	var (
		x     sl.Iterable
		start int
	)
	if err := sl.UnpackArgs("enumerate", args, kwargs, "iterable", &x, "start?", &start); err != nil {
		return nil, err
	}
	st := stateOf(th)
	elems, err := collect(st, x, "enumerate")
	if err != nil {
		return nil, err
	}
	if err := st.chargeMul(int64(len(elems)), 3*slotBytes, "enumerate"); err != nil {
		return nil, err
	}
	out := make([]sl.Value, len(elems))
	for i, e := range elems {
		out[i] = sl.Tuple{sl.MakeInt(start + i), e}
	}
	return sl.NewList(out), nil
}

func builtinZip(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	if len(kwargs) > 0 {
		return nil, fmt.Errorf("zip does not accept keyword arguments")
	}
	st := stateOf(th)
	cols := make([][]sl.Value, len(args))
	n := -1
	for i, a := range args {
		it, ok := a.(sl.Iterable)
		if !ok {
			return nil, fmt.Errorf("zip: argument #%d is not iterable: %s", i+1, a.Type())
		}
		col, err := collect(st, it, "zip")
		if err != nil {
			return nil, err
		}
		cols[i] = col
		if n < 0 || len(col) < n {
			n = len(col)
		}
	}
	n = max(n, 0)
	if err := st.chargeMul(int64(n), int64(len(args)+1)*slotBytes, "zip"); err != nil {
		return nil, err
	}
	out := make([]sl.Value, n)
	for i := range out {
		t := make(sl.Tuple, len(cols))
		for j, col := range cols {
			t[j] = col[i]
		}
		out[i] = t
	}
	return sl.NewList(out), nil
}

func builtinSet(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	x, err := oneIterable("set", args, kwargs)
	if err != nil {
		return nil, err
	}
	s := new(sl.Set)
	if x == nil {
		return s, nil
	}
	st := stateOf(th)
	n := 0
	w := newCostWalk(st)
	return s, forEach(st, x, func(v sl.Value) error {
		if err := keyWork(st, &w, v); err != nil {
			return err
		}
		if n++; n%pollIters == 1 {
			if err := st.chargeMul(pollIters, entryBytes, "set"); err != nil {
				return err
			}
		}
		return s.Insert(v)
	})
}

func builtinDict(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	if len(args) > 1 {
		return nil, fmt.Errorf("dict: got %d arguments, want at most 1", len(args))
	}
	d := new(sl.Dict)
	if err := updateDict(stateOf(th), d, args, kwargs); err != nil {
		if _, ok := err.(*airlock.Stop); ok {
			return nil, err
		}
		return nil, fmt.Errorf("dict: %v", err)
	}
	return d, nil
}

// keyWork bounds the hashing of one key that set() or dict() inserts
// itself: a tuple through the walk (cumulative, as upstream's hash of it
// is one step), a string or bytes counted as work only (each insert is a
// step of its own here, polled).
func keyWork(st *runState, w *costWalk, k sl.Value) error {
	if _, ok := k.(sl.Tuple); ok {
		return w.hash(k, 0)
	}
	return hashWork(st, k)
}

// updateDict is upstream's dict update (the same pairs accepted, the same
// errors), charged and polled.
func updateDict(st *runState, d *sl.Dict, args sl.Tuple, kwargs []sl.Tuple) error {
	n := 0
	w := newCostWalk(st)
	put := func(k, v sl.Value) error {
		if err := keyWork(st, &w, k); err != nil {
			return err
		}
		if n++; n%pollIters == 1 {
			if err := st.chargeMul(pollIters, entryBytes+slotBytes, "dict"); err != nil {
				return err
			}
		}
		return d.SetKey(k, v)
	}
	if len(args) == 1 {
		if m, ok := args[0].(sl.IterableMapping); ok {
			for _, kv := range m.Items() {
				if err := put(kv[0], kv[1]); err != nil {
					return err
				}
			}
		} else {
			it, ok := args[0].(sl.Iterable)
			if !ok {
				return fmt.Errorf("got %s, want iterable", args[0].Type())
			}
			i := 0
			err := forEach(st, it, func(pair sl.Value) error {
				defer func() { i++ }()
				iter := sl.Iterate(pair)
				if iter == nil {
					return fmt.Errorf("dictionary update sequence element #%d is not iterable (%s)", i, pair.Type())
				}
				defer iter.Done()
				switch l := sl.Len(pair); {
				case l < 0:
					return fmt.Errorf("dictionary update sequence element #%d has unknown length (%s)", i, pair.Type())
				case l != 2:
					return fmt.Errorf("dictionary update sequence element #%d has length %d, want 2", i, l)
				}
				var k, v sl.Value
				iter.Next(&k)
				iter.Next(&v)
				return put(k, v)
			})
			if err != nil {
				return err
			}
		}
	}
	before := d.Len()
	for _, kv := range kwargs {
		if err := put(kv[0], kv[1]); err != nil {
			return err
		}
	}
	if d.Len() < before+len(kwargs) {
		seen := make(map[sl.String]bool, len(kwargs))
		for _, kv := range kwargs {
			k := kv[0].(sl.String)
			if seen[k] {
				return fmt.Errorf("duplicate keyword arg: %v", k)
			}
			seen[k] = true
		}
	}
	return nil
}

func builtinMinMax(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	name := b.Name()
	if len(args) == 0 {
		return nil, fmt.Errorf("%s requires at least one positional argument", name)
	}
	var key sl.Callable
	var deflt sl.Value
	if err := sl.UnpackArgs(name, nil, kwargs, "key?", &key, "default?", &deflt); err != nil {
		return nil, err
	}
	op := syntax.LT
	if name == "max" {
		op = syntax.GT
	}
	var it sl.Iterable = args
	if len(args) == 1 {
		x, ok := args[0].(sl.Iterable)
		if !ok {
			return nil, fmt.Errorf("%s: %s value is not iterable", name, args[0].Type())
		}
		it = x
		if r, ok := x.(rangeValue); ok && key == nil && r.len > 0 {
			// Ranges are monotonic: the extreme is at one end.
			first, last := r.Index(0), r.Index(r.len-1)
			if (op == syntax.GT) == (r.step > 0) {
				return last, nil
			}
			return first, nil
		}
	} else if deflt != nil {
		return nil, fmt.Errorf("%s: default may only be given with a single iterable", name)
	}
	var best, bestKey sl.Value
	st := stateOf(th)
	w := newCostWalk(st)
	err := forEach(st, it, func(v sl.Value) error {
		k := v
		if key != nil {
			var err error
			if k, err = sl.Call(th, key, sl.Tuple{v}, nil); err != nil {
				return err
			}
		}
		if best == nil {
			best, bestKey = v, k
			return nil
		}
		better, err := w.compare(op, k, bestKey)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if better {
			best, bestKey = v, k
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if best == nil {
		if deflt != nil {
			return deflt, nil
		}
		return nil, fmt.Errorf("%s: argument is an empty sequence", name)
	}
	return best, nil
}

func builtinAnyAll(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	var x sl.Iterable
	if err := sl.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &x); err != nil {
		return nil, err
	}
	want := b.Name() == "any"
	found := false
	errFound := fmt.Errorf("found")
	err := forEach(stateOf(th), x, func(v sl.Value) error {
		if bool(v.Truth()) == want {
			found = true
			return errFound
		}
		return nil
	})
	if err != nil && err != errFound {
		return nil, err
	}
	return sl.Bool(found == want), nil
}

func builtinSum(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	var (
		x     sl.Iterable
		start sl.Value = sl.MakeInt(0)
	)
	if err := sl.UnpackArgs("sum", args, kwargs, "iterable", &x, "start?", &start); err != nil {
		return nil, err
	}
	if _, ok := start.(sl.String); ok {
		return nil, fmt.Errorf("sum: can't sum strings (use ''.join(seq) instead)")
	}
	st := stateOf(th)
	acc := start
	err := forEach(st, x, func(v sl.Value) error {
		z, err := binary(st, syntax.PLUS, acc, v)
		if err != nil {
			return fmt.Errorf("sum: %w", err)
		}
		acc = z
		return nil
	})
	return acc, err
}

func builtinBytes(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	if len(args) == 1 && len(kwargs) == 0 {
		switch x := args[0].(type) {
		case sl.String:
			// Invalid encodings become U+FFFD, as upstream does: at most
			// three bytes for each input byte.
			if utf8.ValidString(string(x)) {
				return sl.Bytes(x), stateOf(th).charge(int64(len(x)), "bytes")
			}
			if err := stateOf(th).chargeMul(int64(len(x)), utf8.UTFMax-1, "bytes"); err != nil {
				return nil, err
			}
			var buf strings.Builder
			for _, r := range string(x) {
				buf.WriteRune(r) // one U+FFFD per invalid byte
			}
			return sl.Bytes(buf.String()), nil
		case sl.Bytes:
			return x, nil
		case sl.Iterable:
			st := stateOf(th)
			elems, err := collect(st, x, "bytes")
			if err != nil {
				return nil, err
			}
			buf := make([]byte, len(elems))
			for i, e := range elems {
				if err := sl.AsInt(e, &buf[i]); err != nil {
					return nil, fmt.Errorf("bytes: at index %d, %s", i, err)
				}
			}
			return sl.Bytes(buf), nil
		}
	}
	return sl.Call(th, sl.Universe["bytes"], args, kwargs)
}

func builtinInt(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	if len(args) > 0 {
		if s, ok := args[0].(sl.String); ok {
			base := 10
			if len(args) > 1 {
				_ = sl.AsInt(args[1], &base)
			}
			for _, kv := range kwargs {
				if kv[0] == sl.String("base") {
					_ = sl.AsInt(kv[1], &base)
				}
			}
			digits := len(strings.TrimSpace(string(s)))
			switch base {
			case 2, 4, 8, 16, 32:
				if digits*bits.Len(uint(base-1)) > MaxIntBits {
					return nil, fmt.Errorf("int: string of %d digits exceeds the limit of %d bits", digits, MaxIntBits)
				}
			default:
				if digits > MaxIntDigits {
					return nil, fmt.Errorf("int: string of %d digits exceeds the limit of %d digits for base %d conversion", digits, MaxIntDigits, base)
				}
			}
		}
	}
	return sl.Call(th, sl.Universe["int"], args, kwargs)
}

func builtinStr(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	var x sl.Value
	if err := sl.UnpackPositionalArgs(b.Name(), args, kwargs, 1, &x); err != nil {
		return nil, err
	}
	if x, ok := x.(sl.Bytes); ok && b.Name() == "str" {
		// Decoding copies the bytes, each invalid one as a three-byte
		// U+FFFD.
		st := stateOf(th)
		if err := st.chargeMul(int64(len(x)), utf8.UTFMax-1, "str"); err != nil {
			return nil, err
		}
		if err := st.work(int64(len(x))); err != nil {
			return nil, err
		}
		return sl.Call(th, sl.Universe["str"], args, nil)
	}
	s, err := stateOf(th).boundedString(x, b.Name() == "repr", b.Name())
	if err != nil {
		return nil, err
	}
	return sl.String(s), nil
}

// joinArgs formats print and fail arguments, bounded by the budget.
func joinArgs(st *runState, name string, args sl.Tuple, kwargs []sl.Tuple) (string, error) {
	sep := " "
	if err := sl.UnpackArgs(name, nil, kwargs, "sep?", &sep); err != nil {
		return "", err
	}
	var buf strings.Builder
	for i, v := range args {
		if i > 0 {
			buf.WriteString(sep)
		}
		s, err := st.boundedString(v, false, name)
		if err != nil {
			return "", err
		}
		buf.WriteString(s)
	}
	return buf.String(), nil
}

func builtinPrint(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	st := stateOf(th)
	msg, err := joinArgs(st, "print", args, kwargs)
	if err != nil {
		return nil, err
	}
	return sl.None, st.write(msg + "\n")
}

func builtinFail(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	msg, err := joinArgs(stateOf(th), "fail", args, kwargs)
	if err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("fail: %s", msg)
}

func builtinGetattr(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	var (
		x     sl.Value
		name  string
		deflt sl.Value
	)
	if err := sl.UnpackPositionalArgs("getattr", args, kwargs, 2, &x, &name, &deflt); err != nil {
		return nil, err
	}
	v, err := getAttr(x, name)
	if err != nil && deflt != nil {
		return deflt, nil
	}
	return v, err
}

// builtinHash counts the hashing of a string as work, then calls
// upstream's hash.
func builtinHash(th *sl.Thread, b *sl.Builtin, args sl.Tuple, kwargs []sl.Tuple) (sl.Value, error) {
	if len(args) == 1 {
		if err := hashWork(stateOf(th), args[0]); err != nil {
			return nil, err
		}
	}
	return sl.Call(th, sl.Universe["hash"], args, kwargs)
}
