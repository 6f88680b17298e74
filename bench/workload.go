package bench

import (
	"encoding/binary"
	"fmt"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// The trivial workload every tier runs, one per kind. Each is the cheapest
// thing that still goes through the whole start-up path of its tier: parse
// or compile, instantiate, run, collect the result.
const (
	ExprCode     = "1+1"
	StarlarkCode = "result = 1+1"
	CommandPath  = "/bin/true"
	// WasmEntry is the export of WasmModule that returns 1+1.
	WasmEntry = "run"
)

// wasmModule is the WebAssembly module below, assembled by hand so that the
// benchmark needs no wat2wasm:
//
//	(module
//	  (func (export "run") (result i32)
//	    i32.const 1
//	    i32.const 1
//	    i32.add))
var wasmModule = []byte{
	0x00, 0x61, 0x73, 0x6d, // magic "\0asm"
	0x01, 0x00, 0x00, 0x00, // version 1
	0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7f, // type section: 1 type, func () -> (i32)
	0x03, 0x02, 0x01, 0x00, // function section: 1 function of type 0
	0x07, 0x07, 0x01, 0x03, 'r', 'u', 'n', 0x00, 0x00, // export section: "run" = func 0
	0x0a, 0x09, 0x01, 0x07, 0x00, 0x41, 0x01, 0x41, 0x01, 0x6a, 0x0b, // code: no locals, i32.const 1, i32.const 1, i32.add, end
}

// WasmModule returns the benchmark's WebAssembly module. A non-zero salt
// appends a custom section holding it, so that the module's bytes (and any
// cache keyed by them) differ while the code is the same.
func WasmModule(salt uint64) []byte {
	m := append([]byte(nil), wasmModule...)
	if salt == 0 {
		return m
	}
	// custom section: id 0, size 10, name "n" (length 1), 8 bytes of salt
	m = append(m, 0x00, 0x0a, 0x01, 'n')
	return binary.LittleEndian.AppendUint64(m, salt)
}

// Kinds lists the workload kinds in the order a tier's kind is probed.
var Kinds = []airlock.Kind{airlock.KindExpr, airlock.KindStarlark, airlock.KindWasm, airlock.KindCommand}

// Job returns the workload job of a kind. It is hermetic and in the
// "expression" situation for expressions, "public" otherwise.
func Job(kind airlock.Kind) airlock.Job {
	switch kind {
	case airlock.KindExpr:
		return airlock.Job{Kind: kind, Code: ExprCode, Situation: airlock.SituationExpression}
	case airlock.KindStarlark:
		return airlock.Job{Kind: kind, Code: StarlarkCode}
	case airlock.KindWasm:
		return airlock.Job{Kind: kind, Module: WasmModule(0), Entry: WasmEntry}
	}
	return airlock.Job{Kind: airlock.KindCommand, Argv: []string{CommandPath}}
}

// check verifies that a run of the workload did what it should: a benchmark
// of something that failed measures nothing.
func check(kind airlock.Kind, res airlock.Result, err error) error {
	if err != nil {
		return err
	}
	switch kind {
	case airlock.KindCommand:
		if res.ExitCode != 0 {
			return fmt.Errorf("%s exited with status %d: %s", CommandPath, res.ExitCode, value.Clip(res.Stderr, 200))
		}
	default:
		if fmt.Sprint(res.Value) != "2" {
			return fmt.Errorf("value %v, want 2", res.Value)
		}
	}
	return nil
}
