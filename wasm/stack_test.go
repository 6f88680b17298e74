package wasm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/airlock-sandbox/airlock"
)

// liveRecursion is a function that recurses without end while keeping n
// distinct values on its operand stack across each call: every frame
// holds them.
func liveRecursion(n int) string {
	var b strings.Builder
	b.WriteString("(module (func $down (param i64) (result i64)\n")
	for i := range n {
		fmt.Fprintf(&b, "(i64.add (local.get 0) (i64.const %d))\n", i)
	}
	b.WriteString("(call $down (i64.add (local.get 0) (i64.const 1)))\n")
	b.WriteString(strings.Repeat("i64.add\n", n))
	b.WriteString(") (func (export \"_start\") (drop (call $down (i64.const 0)))))")
	return b.String()
}

// allocatedBy is the bytes the Go heap allocated while f ran.
func allocatedBy(f func()) uint64 {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestCallStackIsBounded: unbounded recursion whose frames each hold 4000
// values stops on the run's memory limit, having allocated no more than a
// small multiple of it, with the compiler and with the interpreter. (The
// call stack is wazero's own memory: without a bound of airlock's, this
// run allocated about 165 MB with the compiler and 375 MB with the
// interpreter, whose only bound is 2000 frames of any size.)
func TestCallStackIsBounded(t *testing.T) {
	const memMB = 16
	mod := wat(t, liveRecursion(4000))
	for _, interp := range []bool{false, true} {
		t.Run(fmt.Sprintf("interpreter=%v", interp), func(t *testing.T) {
			tier := newTier(t, NewConfig().WithInterpreter(interp))
			ctx := context.Background()
			c, err := tier.e.acquire(ctx, mod) // compiled outside the measurement
			if err != nil {
				t.Fatal(err)
			}
			defer tier.e.release(c)
			var res airlock.Result
			n := allocatedBy(func() {
				res, err = tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: mod, Limits: airlock.Limits{MemoryMB: memMB}})
			})
			var st *airlock.Stop
			if !errors.As(err, &st) || st.Reason != airlock.StopMemory || !strings.Contains(st.Detail, "call stack") {
				t.Errorf("want a memory stop on the call stack, got %T %v", err, err)
			}
			if n > 3*memMB<<20 {
				t.Errorf("the run allocated %d MB under a %d MiB limit", n>>20, memMB)
			}
			t.Logf("allocated %.1f MB; %+v", float64(n)/1e6, res.Error)
		})
	}
}

// TestDeepRecursionWithinBudget: a recursion 20,000 calls deep of a small
// function fits a 16 MiB limit, and the same stops under 1 MiB: the
// budget is the job's limits.memory_mb.
func TestDeepRecursionWithinBudget(t *testing.T) {
	mod := corpusWAT(t, "deep-call")
	tier := newTier(t, NewConfig())
	ctx := context.Background()
	job := airlock.Job{Kind: airlock.KindWasm, Module: mod, Entry: "depth", Input: map[string]any{"args": []any{int64(20000)}}, Limits: airlock.Limits{MemoryMB: 16}}
	res, err := tier.Run(ctx, job)
	if err != nil || res.Value != int64(20000) {
		t.Fatalf("depth 20000 under 16 MiB: %v %v", res.Value, err)
	}
	job.Limits.MemoryMB = 1
	_, err = tier.Run(ctx, job)
	var st *airlock.Stop
	if !errors.As(err, &st) || st.Reason != airlock.StopMemory {
		t.Fatalf("depth 20000 under 1 MiB: want a memory stop, got %v", err)
	}
}

// section encodes a module section.
func section(id byte, body []byte) []byte {
	return append(append([]byte{id}, binary.AppendUvarint(nil, uint64(len(body)))...), body...)
}

// TestStackGuardCannotBeReset: a module that names a global it does not
// define (the index the guard's own global takes) is refused, so that it
// cannot give itself a new budget on every call.
func TestStackGuardCannotBeReset(t *testing.T) {
	body := []byte{0x00, 0x42}
	body = appendSLEB(body, 1<<60)
	body = append(body, 0x24, 0x00, 0x10, 0x00, 0x0b) // global.set 0, call 0, end
	mod := []byte("\x00asm\x01\x00\x00\x00")
	mod = append(mod, section(1, []byte{1, 0x60, 0, 0})...)
	mod = append(mod, section(3, []byte{1, 0})...)
	mod = append(mod, section(7, append([]byte{1, 6}, "_start\x00\x00"...))...)
	mod = append(mod, section(10, append([]byte{1, byte(len(body))}, body...))...)
	tier := newTier(t, NewConfig())
	_, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindWasm, Module: mod, Limits: airlock.Limits{MemoryMB: 16}})
	if airlock.KindOf(err) != airlock.ErrCompile || !strings.Contains(err.Error(), "global 0") {
		t.Fatalf("want a compile error naming global 0, got %T %v", err, err)
	}
	// The reserved export names are refused too.
	for _, name := range []string{exportStack, exportStart} {
		src := fmt.Sprintf(`(module (func $f (call $g)) (func $g) (export %q (func $f)) (func (export "_start")))`, name)
		_, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindWasm, Module: wat(t, src)})
		if airlock.KindOf(err) != airlock.ErrCompile || !strings.Contains(err.Error(), "reserves") {
			t.Errorf("export %q: want a compile error, got %v", name, err)
		}
	}
}

// TestStackGuardStartSection: the start section runs under the budget
// too (it runs after the budget is set), before _start or _initialize.
func TestStackGuardStartSection(t *testing.T) {
	tier := newTier(t, NewConfig())
	ctx := context.Background()
	loop := wat(t, `(module (func $r (call $r)) (start $r) (func (export "_start")))`)
	_, err := tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: loop, Limits: airlock.Limits{MemoryMB: 4}})
	var st *airlock.Stop
	if !errors.As(err, &st) || st.Reason != airlock.StopMemory {
		t.Fatalf("recursion in the start section: want a memory stop, got %T %v", err, err)
	}
	order := wat(t, `(module
  (global $g (mut i32) (i32.const 0))
  (func $set (global.set $g (i32.const 40)))
  (func $init (call $set))
  (start $init)
  (func (export "_initialize") (global.set $g (i32.add (global.get $g) (i32.const 2))))
  (func (export "get") (result i32) (global.get $g)))`)
	res, err := tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: order, Entry: "get"})
	if err != nil || res.Value != int64(42) {
		t.Fatalf("start section, then _initialize, then the entry: %v %v", res.Value, err)
	}
}

// decodeAll uses an instruction of every kind of immediate the guard's
// scanner must step over, in a function that calls another (so that it
// is guarded).
const decodeAll = `(module
  (type $ii (func (param i32) (result i32)))
  (memory 1)
  (table $t 4 funcref)
  (table $e 2 externref)
  (global $k (mut i64) (i64.const -1234567890123))
  (data $d "\01\02\03\04\05\06\07\08")
  (elem $el func $id)
  (func $id (type $ii) (local.get 0))
  (func (export "run") (result i32) (local $x i32) (local $v v128)
    (table.set $t (i32.const 1) (ref.func $id))
    (local.set $x (call_indirect $t (type $ii) (i32.const 5) (i32.const 1)))
    (memory.init $d (i32.const 16) (i32.const 0) (i32.const 8))
    (data.drop $d)
    (memory.copy (i32.const 32) (i32.const 16) (i32.const 8))
    (memory.fill (i32.const 48) (i32.const 7) (i32.const 4))
    (table.init $t $el (i32.const 2) (i32.const 0) (i32.const 1))
    (elem.drop $el)
    (table.copy $t $t (i32.const 3) (i32.const 2) (i32.const 1))
    (drop (table.grow $t (ref.null func) (i32.const 1)))
    (table.fill $e (i32.const 0) (ref.null extern) (i32.const 2))
    (local.set $x (i32.add (local.get $x) (table.size $t)))
    (local.set $x (i32.add (local.get $x) (i32.extend8_s (i32.const 0x1ff))))
    (local.set $x (i32.add (local.get $x) (i32.trunc_sat_f64_s (f64.const 3.9))))
    (local.set $x (i32.add (local.get $x) (i32.trunc_f32_s (f32.const 2.5))))
    (local.set $x (i32.add (local.get $x) (i32.wrap_i64 (i64.and (global.get $k) (i64.const 0xff)))))
    (local.set $x (i32.add (local.get $x) (i32.load8_u offset=33 (i32.const 0))))
    (i32.store16 offset=2 align=1 (i32.const 64) (i32.const 0x0102))
    (local.set $v (v128.const i32x4 1 2 3 4))
    (local.set $v (i8x16.shuffle 4 5 6 7 0 1 2 3 8 9 10 11 12 13 14 15 (local.get $v) (local.get $v)))
    (local.set $v (i32x4.replace_lane 3 (local.get $v) (i32.const 9)))
    (local.set $v (v128.load8_lane 0 (i32.const 50) (local.get $v)))
    (v128.store offset=80 (i32.const 0) (i32x4.add (local.get $v) (v128.load32_zero (i32.const 16))))
    (local.set $x (i32.add (local.get $x) (i32x4.extract_lane 0 (local.get $v))))
    (local.set $x (i32.add (local.get $x) (i32x4.extract_lane 3 (local.get $v))))
    (local.set $x (i32.add (local.get $x) (select (result i32) (i32.const 1) (i32.const 2) (ref.is_null (ref.null func)))))
    (block $out
      (loop $l
        (block $a (block $b
          (br_table $a $b $out (i32.and (local.get $x) (i32.const 3)))))
        (local.set $x (i32.add (local.get $x) (i32.const 1)))
        (br_if $l (i32.lt_u (local.get $x) (i32.const 100)))))
    (i32.add (local.get $x)
      (call $id (if (result i32) (memory.grow (i32.const 0)) (then (i32.const 1)) (else (memory.size)))))))
`

// TestStackGuardDecodes: the guard's scanner steps over every kind of
// immediate, so a guarded module runs as the module itself does on plain
// wazero.
func TestStackGuardDecodes(t *testing.T) {
	mod := wat(t, decodeAll)
	out, guarded, err := guardStack(mod)
	if err != nil || !guarded || len(out) <= len(mod) {
		t.Fatalf("guardStack: guarded %v, %v", guarded, err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	m, err := rt.Instantiate(ctx, mod)
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.ExportedFunction("run").Call(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tier := newTier(t, NewConfig())
	res, err := tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: mod, Entry: "run"})
	if err != nil || res.Value != int64(int32(want[0])) {
		t.Fatalf("through the tier: %v %v; plain wazero: %d", res.Value, err, int32(want[0]))
	}
}

// TestStackGuardCannotBeBypassed: no index the module names may reach a
// function that moved behind its thunk (function 1 here, where the
// module defines only function 0): a call of it, a reference to it in
// code, an element segment, a global or an export would be a call the
// guard does not count.
func TestStackGuardCannotBeBypassed(t *testing.T) {
	base := func(body []byte, extra ...[]byte) []byte {
		mod := []byte("\x00asm\x01\x00\x00\x00")
		mod = append(mod, section(sectionType, []byte{1, 0x60, 0, 0})...)
		mod = append(mod, section(sectionFunction, []byte{1, 0})...)
		for _, e := range extra {
			mod = append(mod, e...)
		}
		code := append([]byte{1}, binary.AppendUvarint(nil, uint64(len(body)))...)
		return append(mod, section(sectionCode, append(code, body...))...)
	}
	recurse := []byte{0, 0x10, 0x00, 0x0b} // call 0: guarded
	start := section(sectionExport, append([]byte{1, 6}, "_start\x00\x00"...))
	for name, mod := range map[string][]byte{
		"call":     base([]byte{0, 0x10, 0x01, 0x0b}, start),
		"ref.func": base([]byte{0, 0x10, 0x00, 0xd2, 0x01, 0x1a, 0x0b}, start),
		"element": base(recurse, section(sectionTable, []byte{1, 0x70, 0, 1}), start,
			section(sectionElement, []byte{1, 0, 0x41, 0, 0x0b, 1, 1})),
		"global": base(recurse, section(sectionGlobal, []byte{1, 0x70, 0, 0xd2, 1, 0x0b}), start),
		"export": base(recurse, section(sectionExport, append([]byte{2, 6}, "_start\x00\x00\x01x\x00\x01"...))),
	} {
		_, err := newTier(t, NewConfig()).Run(context.Background(), airlock.Job{Kind: airlock.KindWasm, Module: mod, Limits: airlock.Limits{MemoryMB: 4}})
		if airlock.KindOf(err) != airlock.ErrCompile || !strings.Contains(err.Error(), "does not define") {
			t.Errorf("%s: want a compile error naming function 1, got %T %v", name, err, err)
		}
	}
}
