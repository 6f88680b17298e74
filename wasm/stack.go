package wasm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The call stack's bound.
//
// wazero keeps a guest's call stack in memory of its own, outside the
// linear memory that limits.memory_mb caps, and bounds it only by fixed
// ceilings: about 160 MB of allocations per run with the compiler, and
// 2000 frames of any size with the interpreter (a 30 KB module whose
// recursive function keeps 10,000 values live took 645 MB). guardStack
// rewrites a module so that every call of one of its functions that calls
// others goes through a thunk that takes an estimate of the function's
// frame off what is left of the run's budget, traps when that falls below
// zero, and gives it back when the function returns. The tier sets the
// budget to limits.memory_mb before any of the guest's code runs, and
// reads the global back after a trap: below zero, the run stopped on its
// call stack.
//
// The estimate is an upper bound on what either engine keeps per frame:
// frameValueBytes per value the frame can hold (its parameters, results
// and locals, and at most arity values for every two bytes of its body,
// which bounds its operand stack) plus frameBytes, for the function and
// for its thunk. A function that calls no function of the module is not
// counted: it adds at most one frame on top of the counted ones.
const (
	frameValueBytes = 16
	frameBytes      = 128

	// exportStack is the exported global holding what is left of the
	// run's budget.
	exportStack = "airlock:stack"
	// exportStart is the module's start function, exported instead of
	// run by the start section, so that it runs after the budget is set.
	exportStart = "airlock:start"
)

const (
	sectionCustom   = 0
	sectionType     = 1
	sectionFunction = 3
	sectionGlobal   = 6
	sectionExport   = 7
	sectionStart    = 8
)

// sectionRank is the order non-custom sections must appear in.
var sectionRank = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

type rawSection struct {
	id   byte
	body []byte
}

// guardStack returns mod rewritten with the stack guard (see above), and
// whether it was (a module none of whose functions calls another of its
// own needs none). It
// refuses a module that names a global it does not define (which the
// guard's own globals would otherwise answer to) or that exports one of
// the names the guard uses.
func guardStack(mod []byte) ([]byte, bool, error) {
	var secs []rawSection
	for off := 8; off < len(mod); {
		id := mod[off]
		size, n, err := uleb(mod[off+1:])
		if err != nil || size > uint64(len(mod)-off-1-n) {
			return nil, false, fmt.Errorf("%w: section at byte %d", errMalformed, off)
		}
		start := off + 1 + n
		secs = append(secs, rawSection{id, mod[start : start+int(size)]})
		off = start + int(size)
	}
	find := func(id byte) []byte {
		for _, s := range secs {
			if s.id == id {
				return s.body
			}
		}
		return nil
	}
	malformed := func(what string) error { return fmt.Errorf("%w: %s", errMalformed, what) }

	// Types: parameter and result counts.
	type sig struct{ params, results uint64 }
	var types []sig
	arity := uint64(1)
	if b := find(sectionType); b != nil {
		r := reader{b: b}
		count := r.vecLen()
		for range count {
			if r.byte() != 0x60 {
				return nil, false, malformed("type section: not a function type")
			}
			var s sig
			s.params = r.vecLen()
			r.skip(s.params)
			s.results = r.vecLen()
			r.skip(s.results)
			if r.err == nil && max(s.params, s.results) > maxTypeArity {
				return nil, false, fmt.Errorf("function type %d has %d parameters and %d results, above the limit of %d each", len(types), s.params, s.results, maxTypeArity)
			}
			arity = max(arity, s.results)
			types = append(types, s)
		}
		if r.err != nil {
			return nil, false, malformed("type section")
		}
	}
	// Imports: functions and globals come first in their index spaces.
	var funcImports, globalImports uint64
	if b := find(sectionImport); b != nil {
		r := reader{b: b}
		for range r.vecLen() {
			r.skip(r.vecLen())
			r.skip(r.vecLen())
			switch r.byte() {
			case 0x00:
				r.uleb()
				funcImports++
			case 0x01: // table: reftype, limits
				r.byte()
				if r.byte()&1 == 1 {
					r.uleb()
				}
				r.uleb()
			case 0x02: // memory: limits
				if r.byte()&1 == 1 {
					r.uleb()
				}
				r.uleb()
			case 0x03: // global: valtype, mutability
				r.byte()
				r.byte()
				globalImports++
			default:
				return nil, false, malformed("import section")
			}
		}
		if r.err != nil {
			return nil, false, malformed("import section")
		}
	}
	var funcTypes []uint64
	if b := find(sectionFunction); b != nil {
		r := reader{b: b}
		for range r.vecLen() {
			funcTypes = append(funcTypes, r.uleb())
		}
		if r.err != nil {
			return nil, false, malformed("function section")
		}
	}
	if len(funcTypes) == 0 {
		return mod, false, nil
	}
	var globals uint64
	if b := find(sectionGlobal); b != nil {
		r := reader{b: b}
		globals = r.vecLen()
		if r.err != nil {
			return nil, false, malformed("global section")
		}
	}
	known := globalImports + globals
	gLeft := known // the guard's global: what is left of the budget

	var exports [][]byte // the module's own, as they are
	if b := find(sectionExport); b != nil {
		r := reader{b: b}
		for range r.vecLen() {
			begin := r.off
			name := string(r.bytes(r.vecLen()))
			r.byte()
			r.uleb()
			if r.err != nil {
				return nil, false, malformed("export section")
			}
			if name == exportStack || name == exportStart {
				return nil, false, fmt.Errorf("the module exports %q, a name airlock reserves", name)
			}
			exports = append(exports, b[begin:r.off])
		}
	}
	// No index the module names may reach the guard's own globals or the
	// functions that move behind their thunks: those would be calls that
	// are not counted, or a budget the module could reset.
	defined := funcImports + uint64(len(funcTypes))
	for _, e := range exports {
		r := reader{b: e}
		r.skip(r.vecLen())
		if kind, idx := r.byte(), r.uleb(); (kind == 0x00 && idx >= defined) || (kind == 0x03 && idx >= known) {
			return nil, false, fmt.Errorf("the module exports index %d of kind %d, which it does not define", idx, kind)
		}
	}
	if b := find(sectionGlobal); b != nil {
		r := reader{b: b}
		for range r.vecLen() {
			r.byte()
			r.byte()
			if err := constExpr(&r, known, defined); err != nil {
				return nil, false, fmt.Errorf("global section: %w", err)
			}
		}
	}
	if b := find(sectionElement); b != nil {
		if err := checkElements(b, known, defined); err != nil {
			return nil, false, fmt.Errorf("element section: %w", err)
		}
	}
	startFn, hasStart := uint64(0), false
	if b := find(sectionStart); b != nil {
		r := reader{b: b}
		startFn, hasStart = r.uleb(), true
		if r.err != nil || startFn >= defined {
			return nil, false, malformed("start section")
		}
	}

	code := find(sectionCode)
	r := reader{b: code}
	n := uint64(len(funcTypes))
	if code == nil || r.vecLen() != n {
		return nil, false, malformed("code section does not match the function section")
	}
	// A function that calls none of the module's functions (it may call
	// imports, which do not call back) adds one frame on top of the
	// stack at most and keeps its code as it is. Every other function
	// moves to an index after the module's own functions, and a thunk
	// takes its place.
	brTargets := uint64(maxBrTableTargets) // left for the module's br_tables
	var (
		newCode  []byte // the functions at their own indices: bodies and thunks
		moved    []byte // the bodies of the functions that moved
		newFuncs []byte // the types of the moved functions
		count    = n
	)
	for i := range n {
		begin := r.off
		body := r.bytes(r.vecLen())
		if r.err != nil {
			return nil, false, malformed(fmt.Sprintf("code section, function body %d", i))
		}
		entry := code[begin:r.off]
		locals, calls, err := scanBody(body, known, funcImports, funcImports+uint64(len(funcTypes)), &brTargets)
		if err != nil {
			return nil, false, fmt.Errorf("function body %d: %w", i, err)
		}
		if !calls {
			newCode = append(newCode, entry...)
			continue
		}
		if funcTypes[i] >= uint64(len(types)) {
			return nil, false, malformed(fmt.Sprintf("function %d has type %d, which is not defined", i, funcTypes[i]))
		}
		t := types[funcTypes[i]]
		values := 2*t.params + 2*t.results + locals + arity*(uint64(len(body))/2+1)
		weight := int64(min(values, 1<<40))*frameValueBytes + 2*frameBytes
		thunk := thunkBody(gLeft, weight, t.params, funcImports+count)
		newCode = binary.AppendUvarint(newCode, uint64(len(thunk)))
		newCode = append(newCode, thunk...)
		moved = append(moved, entry...)
		newFuncs = binary.AppendUvarint(newFuncs, funcTypes[i])
		count++
	}
	if count == n {
		// Nothing calls: no frame beyond the first of each call from the host.
		return mod, false, nil
	}
	newCode = append(binary.AppendUvarint(nil, count), append(newCode, moved...)...)
	funcs := binary.AppendUvarint(nil, count)
	for _, t := range funcTypes {
		funcs = binary.AppendUvarint(funcs, t)
	}
	newFuncs = append(funcs, newFuncs...)

	var newGlobals []byte
	newGlobals = binary.AppendUvarint(newGlobals, globals+1)
	if b := find(sectionGlobal); b != nil {
		_, k := binary.Uvarint(b)
		newGlobals = append(newGlobals, b[k:]...)
	}
	// (mut i64) (i64.const 0): a module whose budget is not set traps
	// at its first call.
	newGlobals = append(newGlobals, 0x7e, 0x01, 0x42, 0x00, 0x0b)

	exp := func(b []byte, name string, kind byte, idx uint64) []byte {
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = append(b, kind)
		return binary.AppendUvarint(b, idx)
	}
	extra := 1
	if hasStart {
		extra++
	}
	newExports := binary.AppendUvarint(nil, uint64(len(exports)+extra))
	for _, e := range exports {
		newExports = append(newExports, e...)
	}
	newExports = exp(newExports, exportStack, 0x03, gLeft)
	if hasStart {
		newExports = exp(newExports, exportStart, 0x00, startFn)
	}

	out := append(make([]byte, 0, len(newCode)+len(newFuncs)+len(mod)/2+64), mod[:8]...)
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	pending := []rawSection{{sectionGlobal, newGlobals}, {sectionExport, newExports}}
	flush := func(before int) {
		for len(pending) > 0 && sectionRank[pending[0].id] < before {
			emit(pending[0].id, pending[0].body)
			pending = pending[1:]
		}
	}
	for _, s := range secs {
		if s.id != sectionCustom {
			flush(sectionRank[s.id])
		}
		switch s.id {
		case sectionFunction:
			emit(s.id, newFuncs)
		case sectionCode:
			emit(s.id, newCode)
		case sectionGlobal, sectionExport:
			flush(sectionRank[s.id] + 1)
		case sectionStart:
			// Exported as exportStart instead; the tier calls it.
		default:
			emit(s.id, s.body)
		}
	}
	flush(1 << 30)
	return out, true, nil
}

// thunkBody is the code of the thunk of a function: take weight off what
// is left of the budget, trap if that is below zero, call the function
// with the thunk's arguments, and give weight back.
func thunkBody(left uint64, weight int64, params, target uint64) []byte {
	b := []byte{0x00} // no locals
	b = append(b, 0x23)
	b = binary.AppendUvarint(b, left)
	b = append(b, 0x42)
	b = appendSLEB(b, weight)
	b = append(b, 0x7d, 0x24) // i64.sub, global.set
	b = binary.AppendUvarint(b, left)
	b = append(b, 0x23)
	b = binary.AppendUvarint(b, left)
	b = append(b, 0x42, 0x00, 0x53, 0x04, 0x40, 0x00, 0x0b) // i64.const 0, i64.lt_s, if, unreachable, end
	for i := range params {
		b = append(b, 0x20)
		b = binary.AppendUvarint(b, i)
	}
	b = append(b, 0x10)
	b = binary.AppendUvarint(b, target)
	b = append(b, 0x23)
	b = binary.AppendUvarint(b, left)
	b = append(b, 0x42)
	b = appendSLEB(b, weight)
	b = append(b, 0x7c, 0x24) // i64.add, global.set
	b = binary.AppendUvarint(b, left)
	return append(b, 0x0b)
}

func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// Bounds on what wazero's compiler spends superlinear time or much memory
// on, checked by scanBody before it sees the module. Blocks nested 30,000
// deep took 8 s and 89 MB to compile (90 KB of module), 100,000 deep more
// than 90 s; a br_table of 100,000 targets 5 s and 266 MB (100 KB). At
// the bounds: about 0.2 s a function, and 0.4 GB for the br_tables of a
// module. maxBrTable is V8's limit.
//
// A function type has at most maxTypeArity parameters and as many results
// (the WebAssembly JavaScript API's limit): compiling a call grows with
// the square of its arguments (a call of 100,000 arguments, 300 KB of
// module, allocated 15 GB; 10,000, 160 MB).
const (
	maxTypeArity      = 1000
	maxNesting        = 4096
	maxBrTable        = 65520
	maxBrTableTargets = 1 << 17 // all of a module's br_tables together
)

// scanBody reads a function body's locals and instructions and returns
// how many locals it declares and whether it calls one of the module's
// functions (index imports and above), refusing a global at or above known
// or a function at or above funcs (the guard's own), refusing blocks nested more than
// maxNesting deep and br_tables of more than maxBrTable targets or more
// than brLeft (which it lowers). It refuses a global.get or global.set of
// an index at or above known (the guard's own globals), and any
// instruction it does not know: it has to agree with wazero on where
// every instruction starts, for the instructions of the features the
// runtime enables (WebAssembly 2.0: bulk memory, multi-value, reference
// types, sign extension, saturating conversions, SIMD).
func scanBody(body []byte, known, imports, funcs uint64, brLeft *uint64) (locals uint64, calls bool, err error) {
	r := reader{b: body}
	for range r.vecLen() {
		locals += min(r.uleb(), 1<<32)
		r.byte()
	}
	if r.err != nil {
		return 0, false, errors.New("malformed locals")
	}
	depth := 0
	for r.off < len(r.b) && r.err == nil {
		at := r.off
		op := r.byte()
		switch {
		case op == 0x0b:
			depth--
		case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0f || op == 0x1a || op == 0x1b || op == 0xd1:
		case op >= 0x45 && op <= 0xc4: // numeric, no immediates
		case op == 0x02 || op == 0x03 || op == 0x04: // block type
			if depth++; depth > maxNesting {
				return 0, false, fmt.Errorf("blocks nested more than %d deep", maxNesting)
			}
			if c := r.peek(); c == 0x40 || c == 0x7f || c == 0x7e || c == 0x7d || c == 0x7c || c == 0x7b || c == 0x70 || c == 0x6f {
				r.byte()
			} else {
				r.sleb()
			}
		case op == 0x10 || op == 0xd2: // call, ref.func
			idx := r.uleb()
			if idx >= funcs && r.err == nil {
				return 0, false, fmt.Errorf("instruction at byte %d names function %d, which the module does not define", at, idx)
			}
			if op == 0x10 && idx >= imports {
				calls = true
			}
		case op == 0x0c || op == 0x0d || (op >= 0x20 && op <= 0x22) || op == 0x25 || op == 0x26 || op == 0x3f || op == 0x40:
			r.uleb()
		case op == 0x23 || op == 0x24:
			if idx := r.uleb(); idx >= known && r.err == nil {
				return 0, false, fmt.Errorf("instruction at byte %d names global %d, which the module does not define", at, idx)
			}
		case op == 0x0e: // br_table
			n := r.vecLen()
			if n > maxBrTable || n > *brLeft {
				return 0, false, fmt.Errorf("a br_table of %d targets: at most %d each, and %d in all", n, maxBrTable, maxBrTableTargets)
			}
			*brLeft -= n
			r.skipULEBs(n + 1)
		case op == 0x11: // call_indirect
			calls = true
			r.uleb()
			r.uleb()
		case op == 0x1c: // select t*
			r.skip(r.vecLen())
		case op >= 0x28 && op <= 0x3e:
			r.memarg()
		case op == 0x41 || op == 0x42:
			r.sleb()
		case op == 0x43:
			r.skip(4)
		case op == 0x44:
			r.skip(8)
		case op == 0xd0: // ref.null heaptype
			r.byte()
		case op == 0xfc:
			switch sub := r.uleb(); {
			case sub <= 7:
			case sub == 8 || sub == 10 || sub == 12 || sub == 14:
				r.uleb()
				r.uleb()
			case sub == 9 || sub == 11 || sub == 13 || (sub >= 15 && sub <= 17):
				r.uleb()
			default:
				return 0, false, fmt.Errorf("unknown instruction 0xfc %d at byte %d", sub, at)
			}
		case op == 0xfd:
			switch sub := r.uleb(); {
			case sub <= 11 || sub == 0x5c || sub == 0x5d:
				r.memarg()
			case sub == 12 || sub == 13:
				r.skip(16)
			case sub >= 0x15 && sub <= 0x22:
				r.byte()
			case sub >= 0x54 && sub <= 0x5b:
				r.memarg()
				r.byte()
			case sub <= 0xff:
			default:
				return 0, false, fmt.Errorf("unknown instruction 0xfd %d at byte %d", sub, at)
			}
		default:
			return 0, false, fmt.Errorf("unknown instruction %#x at byte %d", op, at)
		}
	}
	if r.err != nil {
		return 0, false, errors.New("malformed instruction")
	}
	return locals, calls, nil
}

// constExpr reads a constant expression up to its end, refusing a
// global at or above known, a function at or above funcs, and any
// instruction a constant expression cannot hold.
func constExpr(r *reader, known, funcs uint64) error {
	for r.err == nil {
		switch op := r.byte(); op {
		case 0x0b:
			return nil
		case 0x41, 0x42:
			r.sleb()
		case 0x43:
			r.skip(4)
		case 0x44:
			r.skip(8)
		case 0xd0:
			r.byte()
		case 0x23:
			if idx := r.uleb(); idx >= known && r.err == nil {
				return fmt.Errorf("names global %d, which the module does not define", idx)
			}
		case 0xd2:
			if idx := r.uleb(); idx >= funcs && r.err == nil {
				return fmt.Errorf("names function %d, which the module does not define", idx)
			}
		case 0xfd:
			if r.uleb() != 12 { // v128.const
				return errors.New("unknown instruction in a constant expression")
			}
			r.skip(16)
		default:
			return fmt.Errorf("instruction %#x in a constant expression", op)
		}
	}
	return errMalformed
}

// checkElements reads the element segments (all eight forms), refusing a
// function at or above funcs and a global at or above known.
func checkElements(b []byte, known, funcs uint64) error {
	r := reader{b: b}
	for range r.vecLen() {
		flags := r.uleb()
		if flags > 7 {
			return errMalformed
		}
		if flags&3 == 2 { // an explicit table index
			r.uleb()
		}
		if flags&1 == 0 { // active: an offset
			if err := constExpr(&r, known, funcs); err != nil {
				return err
			}
		}
		if flags&3 != 0 { // elemkind or reftype
			r.byte()
		}
		for range r.vecLen() {
			if flags&4 != 0 {
				if err := constExpr(&r, known, funcs); err != nil {
					return err
				}
			} else if idx := r.uleb(); idx >= funcs && r.err == nil {
				return fmt.Errorf("names function %d, which the module does not define", idx)
			}
		}
	}
	if r.err != nil {
		return errMalformed
	}
	return nil
}

// reader reads a section or body; the first error sticks and every later
// read returns zero.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail() { r.err, r.off = errMalformed, len(r.b) }

func (r *reader) byte() byte {
	if r.off >= len(r.b) {
		r.fail()
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

func (r *reader) peek() byte {
	if r.off >= len(r.b) {
		return 0
	}
	return r.b[r.off]
}

func (r *reader) uleb() uint64 {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 || n > 10 {
		r.fail()
		return 0
	}
	r.off += n
	return v
}

// sleb skips a signed LEB128 number (of at most 64 bits).
func (r *reader) sleb() {
	for i := 0; ; i++ {
		if i == 10 {
			r.fail()
			return
		}
		if r.byte()&0x80 == 0 || r.err != nil {
			return
		}
	}
}

// vecLen reads a vector's length, which cannot exceed the bytes left.
func (r *reader) vecLen() uint64 {
	n := r.uleb()
	if n > uint64(len(r.b)-r.off) {
		r.fail()
		return 0
	}
	return n
}

func (r *reader) skip(n uint64) { r.bytes(n) }

func (r *reader) bytes(n uint64) []byte {
	if n > uint64(len(r.b)-r.off) {
		r.fail()
		return nil
	}
	r.off += int(n)
	return r.b[r.off-int(n) : r.off]
}

func (r *reader) skipULEBs(n uint64) {
	for i := uint64(0); i < n && r.err == nil; i++ {
		r.uleb()
	}
}

// memarg reads alignment and offset; an alignment with bit 6 set (a
// memory index follows, multi-memory) is refused: the runtime does not
// enable it.
func (r *reader) memarg() {
	if a := r.uleb(); a&0x40 != 0 {
		r.fail()
		return
	}
	r.uleb()
}
