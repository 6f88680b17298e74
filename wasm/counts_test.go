package wasm

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// countsModule is a module with an empty _start and n entries of the
// section with the given id.
func countsModule(id byte, n int) []byte {
	vec := binary.AppendUvarint(nil, uint64(n))
	types := []byte{1, 0x60, 0, 0}
	funcs, code := []byte{1, 0}, []byte{1, 2, 0, 0x0b}
	exports := append([]byte{1, 6}, "_start\x00\x00"...)
	var extra []byte
	switch id {
	case sectionType:
		types = vec
		for range n {
			types = append(types, 0x60, 0, 0)
		}
	case sectionImport:
		types = []byte{2, 0x60, 0, 0, 0x60, 0, 1, 0x7f}
		extra = vec
		for range n {
			extra = append(extra, 22)
			extra = append(extra, "wasi_snapshot_preview1"...)
			extra = append(extra, 11)
			extra = append(extra, "sched_yield\x00\x01"...)
		}
		exports = append([]byte{1, 6}, "_start\x00"...)
		exports = binary.AppendUvarint(exports, uint64(n))
	case sectionFunction:
		funcs, code = slices.Clone(vec), slices.Clone(vec)
		for range n {
			funcs = append(funcs, 0)
			code = append(code, 2, 0, 0x0b)
		}
	case sectionGlobal:
		extra = vec
		for range n {
			extra = append(extra, 0x7f, 0x00, 0x41, 0x00, 0x0b)
		}
	case sectionExport:
		exports = binary.AppendUvarint(nil, uint64(n+1))
		exports = append(exports, 6)
		exports = append(exports, "_start\x00\x00"...)
		for i := range n {
			name := fmt.Sprint(i)
			exports = append(exports, byte(len(name)))
			exports = append(exports, name...)
			exports = append(exports, 0, 0)
		}
	case sectionElement:
		extra = vec
		for range n {
			extra = append(extra, 0x01, 0x00, 0x00) // passive, funcref, none
		}
	case sectionData:
		extra = vec
		for range n {
			extra = append(extra, 0x01, 0x00) // passive, empty
		}
	}
	mod := []byte("\x00asm\x01\x00\x00\x00")
	mod = append(mod, section(sectionType, types)...)
	if id == sectionImport {
		mod = append(mod, section(sectionImport, extra)...)
	}
	mod = append(mod, section(sectionFunction, funcs)...)
	if id == sectionGlobal {
		mod = append(mod, section(sectionGlobal, extra)...)
	}
	mod = append(mod, section(sectionExport, exports)...)
	if id == sectionElement {
		mod = append(mod, section(sectionElement, extra)...)
	}
	mod = append(mod, section(sectionCode, code)...)
	if id == sectionData {
		mod = append(mod, section(sectionData, extra)...)
	}
	return mod
}

// TestDeclaredCountsAreBounded: a module declaring more entries of a kind
// than maxDeclared allows is refused before wazero sees it (each entry
// costs the host memory per compile or per run that no limit counts),
// and one at the limit of exports and globals still runs.
func TestDeclaredCountsAreBounded(t *testing.T) {
	tier := newTier(t, NewConfig())
	ctx := context.Background()
	for _, id := range []byte{sectionType, sectionImport, sectionFunction, sectionGlobal, sectionExport, sectionElement, sectionData} {
		m := maxDeclared[id]
		mod := countsModule(id, int(m.limit)+1) // with _start, two more exports
		_, err := tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: mod})
		if airlock.KindOf(err) != airlock.ErrCompile || !strings.Contains(err.Error(), m.what) {
			t.Errorf("%d %s (%d bytes): want a compile error, got %v", m.limit+1, m.what, len(mod), err)
		}
	}
	for _, id := range []byte{sectionGlobal, sectionExport} {
		m := maxDeclared[id]
		n := int(m.limit)
		if id == sectionExport {
			n-- // and _start
		}
		if _, err := tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: countsModule(id, n)}); err != nil {
			t.Errorf("%d %s: %v", m.limit, m.what, err)
		}
	}
}

// bodiesModule is a module with an empty _start and a function of each
// of the bodies (locals declaration included).
func bodiesModule(bodies ...[]byte) []byte {
	funcs := binary.AppendUvarint(nil, uint64(len(bodies)+1))
	code := binary.AppendUvarint(nil, uint64(len(bodies)+1))
	code = append(code, 2, 0, 0x0b)
	for range len(bodies) + 1 {
		funcs = append(funcs, 0)
	}
	for _, b := range bodies {
		code = binary.AppendUvarint(code, uint64(len(b)))
		code = append(code, b...)
	}
	mod := []byte("\x00asm\x01\x00\x00\x00")
	mod = append(mod, section(sectionType, []byte{1, 0x60, 0, 0})...)
	mod = append(mod, section(sectionFunction, funcs)...)
	mod = append(mod, section(sectionExport, append([]byte{1, 6}, "_start\x00\x00"...))...)
	return append(mod, section(sectionCode, code)...)
}

// nested is a body of n nested empty blocks.
func nested(n int) []byte {
	b := []byte{0}
	for range n {
		b = append(b, 0x02, 0x40)
	}
	for range n + 1 {
		b = append(b, 0x0b)
	}
	return b
}

// brTable is a body with a br_table of n targets.
func brTable(n int) []byte {
	b := []byte{0, 0x02, 0x40, 0x41, 0x00, 0x0e}
	b = binary.AppendUvarint(b, uint64(n))
	for range n + 1 {
		b = append(b, 0)
	}
	return append(b, 0x0b, 0x0b)
}

// TestHeavyCodeIsBounded: what wazero's compiler spends superlinear time
// or much memory on is refused before it sees the module: blocks nested
// deeper than maxNesting (100,000 deep, 200 KB of module, took more than
// 90 s to compile), br_tables of more than maxBrTable targets, and more
// than maxBrTableTargets in a module (2.6 KB of the host's per target),
// function types of more than maxTypeArity parameters or results (a call
// of 100,000 arguments, 300 KB of module, allocated 15 GB to compile).
func TestHeavyCodeIsBounded(t *testing.T) {
	tier := newTier(t, NewConfig())
	ctx := context.Background()
	for name, mod := range map[string][]byte{
		"nesting":          bodiesModule(nested(maxNesting + 1)),
		"br_table":         bodiesModule(brTable(maxBrTable + 1)),
		"br_tables in all": bodiesModule(brTable(maxBrTable), brTable(maxBrTable), brTable(maxBrTableTargets-2*maxBrTable+1)),
	} {
		_, err := tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: mod})
		if airlock.KindOf(err) != airlock.ErrCompile || !strings.Contains(err.Error(), map[bool]string{true: "nested", false: "br_table"}[name == "nesting"]) {
			t.Errorf("%s: want a compile error, got %v", name, err)
		}
	}
	// A call's compile grows with the square of its arguments: types are
	// bounded in parameters and results.
	for _, results := range []bool{false, true} {
		ty := []byte{1, 0x60}
		vals := binary.AppendUvarint(nil, maxTypeArity+1)
		for range maxTypeArity + 1 {
			vals = append(vals, 0x7f)
		}
		if results {
			ty = append(append(ty, 0), vals...)
		} else {
			ty = append(append(ty, vals...), 0)
		}
		mod := []byte("\x00asm\x01\x00\x00\x00")
		mod = append(mod, section(sectionType, ty)...)
		mod = append(mod, section(sectionFunction, []byte{1, 0})...)
		mod = append(mod, section(sectionCode, []byte{1, 2, 0, 0x0b})...)
		_, err := tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: mod, Entry: "none"})
		if airlock.KindOf(err) != airlock.ErrCompile || !strings.Contains(err.Error(), "limit of 1000") {
			t.Errorf("a type of %d values (results: %v): want a compile error, got %v", maxTypeArity+1, results, err)
		}
	}
	if _, err := tier.Run(ctx, airlock.Job{Kind: airlock.KindWasm, Module: bodiesModule(nested(maxNesting), brTable(1000))}); err != nil {
		t.Fatalf("at the nesting bound: %v", err)
	}
}
