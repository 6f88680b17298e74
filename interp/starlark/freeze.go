package starlark

import (
	"fmt"
	"unsafe"

	sl "go.starlark.net/starlark"
)

// maxFreezeDepth bounds how deep the values of a loaded module may be
// nested. Upstream's Freeze recurses with no depth limit: a value nested
// millions deep overflows the Go stack, which ends the process.
const maxFreezeDepth = 10000

// freezeModule freezes a loaded module's globals as StringDict.Freeze
// does, but without deep recursion: it walks the values with an explicit
// stack and freezes each list, dict, set and function after everything
// it reaches, so upstream's Freeze finds them frozen and returns at once.
// What upstream would still recurse through (ancestors on the walk's
// path, and tuples, which have no frozen mark) is bounded first: nesting
// past maxFreezeDepth, or tuples that share their parts past the
// comparison walk's bound, are refused.
func (s *runState) freezeModule(module string, globals sl.StringDict) error {
	type frame struct {
		v        sl.Value
		children []sl.Value
		next     int
		key      unsafe.Pointer
	}
	seen := map[unsafe.Pointer]bool{}
	tupleSize := map[unsafe.Pointer]int64{}
	limit := max(1<<20, s.budget/16)
	refuse := func(why string) error {
		return fmt.Errorf("load(%q): a value of the module %s, so it cannot be frozen", module, why)
	}
	var stack []frame
	visits := 0
	push := func(v sl.Value) (bool, error) {
		var key unsafe.Pointer
		var children []sl.Value
		switch x := v.(type) {
		case *sl.List:
			key = unsafe.Pointer(x)
			for i := 0; i < x.Len(); i++ {
				children = append(children, x.Index(i))
			}
		case *sl.Dict:
			key = unsafe.Pointer(x)
			for _, kv := range x.Items() {
				children = append(children, kv[0], kv[1])
			}
		case *sl.Set:
			key = unsafe.Pointer(x)
			it := x.Iterate()
			var e sl.Value
			for it.Next(&e) {
				children = append(children, e)
			}
			it.Done()
		case sl.Tuple:
			if len(x) == 0 {
				return false, nil
			}
			key = unsafe.Pointer(&x[0])
			children = x
		case *sl.Function:
			key = unsafe.Pointer(x)
			for i := 0; i < x.NumParams(); i++ {
				if d := x.ParamDefault(i); d != nil {
					children = append(children, d)
				}
			}
			for i := 0; i < x.NumFreeVars(); i++ {
				if _, fv := x.FreeVar(i); fv != nil {
					children = append(children, fv)
				}
			}
		default:
			return false, nil
		}
		if seen[key] {
			return false, nil
		}
		if len(stack) >= maxFreezeDepth {
			return false, refuse(fmt.Sprintf("is nested more than %d deep", maxFreezeDepth))
		}
		seen[key] = true
		stack = append(stack, frame{v: v, children: children, key: key})
		return true, nil
	}
	for _, v := range globals {
		if _, err := push(v); err != nil {
			return err
		}
		for len(stack) > 0 {
			if visits++; visits%pollIters == 0 {
				if err := s.poll(); err != nil {
					return err
				}
			}
			top := &stack[len(stack)-1]
			if top.next < len(top.children) {
				c := top.children[top.next]
				top.next++
				if _, err := push(c); err != nil {
					return err
				}
				continue
			}
			stack = stack[:len(stack)-1]
			// What upstream's Freeze of this value re-walks: its tuples,
			// which have no frozen mark, whole.
			var work int64 = 1
			for _, c := range top.children {
				if t, ok := c.(sl.Tuple); ok && len(t) > 0 {
					work += tupleSize[unsafe.Pointer(&t[0])]
				}
			}
			if work > limit {
				return refuse(fmt.Sprintf("shares tuples that would be walked more than %d times", limit))
			}
			if _, ok := top.v.(sl.Tuple); ok {
				tupleSize[top.key] = work
				continue
			}
			top.v.Freeze()
		}
	}
	globals.Freeze()
	return nil
}
