package wasm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// moduleInfo is what the tier learns from a module's binary before
// compiling it.
type moduleInfo struct {
	memMinPages uint32 // the largest declared minimum of a defined memory
	tableMin    uint64 // the largest declared minimum of a defined table
	stackGuard  bool   // rewritten by guardStack: exports exportStack
}

const (
	sectionImport  = 2
	sectionTable   = 4
	sectionMemory  = 5
	sectionCode    = 10
	sectionElement = 9
	sectionData    = 11
)

// Bounds on the locals a module declares. wazero's decoder expands each
// function's locals into a slice of their types before anything else
// checks them, so a function body of a few bytes declaring 2^32-1 locals
// costs gigabytes and seconds of the host's: maxFunctionLocals is the
// WebAssembly JavaScript API's limit per function, and a module may
// declare at most max(minModuleLocals, its size in bytes) in all.
const (
	maxFunctionLocals = 50000
	minModuleLocals   = 1 << 20
)

var errMalformed = errors.New("malformed module")

// maxDeclared bounds how many entries of each kind a module may declare.
// Each costs the host memory that no limit of the job counts, per compile
// or per run, far beyond its few bytes of binary: a 3 MB module of a
// million function types took 1 GB and 8 s to compile, an 8.9 MB module
// of a million exports 560 MB and 7 s per run, a 5 MB module of a million
// globals 90 MB per run. The bounds are the WebAssembly JavaScript API's
// (which browsers apply), lower for types and globals.
var maxDeclared = map[byte]struct {
	what  string
	limit uint64
}{
	sectionType:     {"function types", 100_000},
	sectionImport:   {"imports", 100_000},
	sectionFunction: {"functions", 1_000_000},
	sectionGlobal:   {"globals", 100_000},
	sectionExport:   {"exports", 100_000},
	sectionElement:  {"element segments", 100_000},
	sectionData:     {"data segments", 100_000},
}

// inspect reads the sections of a module and returns what it declares, and
// the module with its tables' maximums lowered (added where the module
// declared none) so that together they are at most maxTable (capTables):
// wazero lets a table without a maximum grow to 2^32 elements, which is an
// out-of-memory, and a module may define many tables. A module whose
// table minimums add up to more than maxTable is refused with a
// [tableError]. The result is
// mod itself when nothing needed rewriting, and a new slice otherwise.
func inspect(mod []byte, maxTable uint32) ([]byte, moduleInfo, error) {
	var info moduleInfo
	if len(mod) < 8 || string(mod[:4]) != "\x00asm" {
		return nil, info, fmt.Errorf("%w: not a WebAssembly binary (bad magic)", errMalformed)
	}
	if v := binary.LittleEndian.Uint32(mod[4:8]); v != 1 {
		return nil, info, fmt.Errorf("%w: unsupported binary version %d", errMalformed, v)
	}
	var out []byte // nil until a section is rewritten
	for off := 8; off < len(mod); {
		id := mod[off]
		size, n, err := uleb(mod[off+1:])
		if err != nil {
			return nil, info, fmt.Errorf("%w: section header at byte %d: %v", errMalformed, off, err)
		}
		start := off + 1 + n
		if size > uint64(len(mod)-start) {
			return nil, info, fmt.Errorf("%w: section %d at byte %d runs past the end", errMalformed, id, off)
		}
		end := start + int(size)
		body := mod[start:end]
		section := mod[off:end]
		if m, ok := maxDeclared[id]; ok {
			if n, _, err := uleb(body); err == nil && n > m.limit {
				return nil, info, fmt.Errorf("the module declares %d %s, above the limit of %d", n, m.what, m.limit)
			}
		}
		switch id {
		case sectionImport:
			if err := checkImportKinds(body); err != nil {
				return nil, info, err
			}
		case sectionCode:
			if err := checkLocals(body, max(minModuleLocals, uint64(len(mod)))); err != nil {
				return nil, info, err
			}
		case sectionMemory:
			lims, err := readLimits(body, false)
			if err != nil {
				return nil, info, fmt.Errorf("%w: memory section: %v", errMalformed, err)
			}
			for _, l := range lims {
				info.memMinPages = max(info.memMinPages, uint32(min(l.min, 1<<32-1)))
			}
		case sectionTable:
			lims, err := readLimits(body, true)
			if err != nil {
				return nil, info, fmt.Errorf("%w: table section: %v", errMalformed, err)
			}
			var total uint64
			for _, l := range lims {
				info.tableMin = max(info.tableMin, l.min)
				if l.hasMax && l.max < l.min {
					return nil, info, fmt.Errorf("%w: table maximum %d below its minimum %d", errMalformed, l.max, l.min)
				}
				if l.min > uint64(maxTable) || total+l.min > uint64(maxTable) {
					return nil, info, &tableError{declared: total + l.min, cap: maxTable}
				}
				total += l.min
			}
			if capped, rewrite := capTables(lims, maxTable); rewrite {
				if out == nil {
					out = append(make([]byte, 0, len(mod)+16), mod[:off]...)
				}
				sec := encodeTables(capped)
				section = binary.AppendUvarint([]byte{sectionTable}, uint64(len(sec)))
				section = append(section, sec...)
			}
		}
		if out != nil {
			out = append(out, section...)
		}
		off = end
	}
	if out == nil {
		return mod, info, nil
	}
	return out, info, nil
}

type limits struct {
	ref      byte // table element type; 0 for memories
	min, max uint64
	hasMax   bool
}

// readLimits reads a vector of table types (reftype + limits) or, when
// tables is false, of memory types (limits).
func readLimits(b []byte, tables bool) ([]limits, error) {
	count, n, err := uleb(b)
	if err != nil {
		return nil, err
	}
	if count > uint64(len(b)) {
		return nil, fmt.Errorf("count %d larger than the section", count)
	}
	b = b[n:]
	out := make([]limits, 0, count)
	for range count {
		var l limits
		if len(b) == 0 {
			return nil, errors.New("truncated")
		}
		if tables {
			if b[0] != 0x70 && b[0] != 0x6f { // funcref, externref
				return nil, fmt.Errorf("unsupported table element type %#x", b[0])
			}
			l.ref = b[0]
			b = b[1:]
		}
		if len(b) == 0 {
			return nil, errors.New("truncated limits")
		}
		if b[0] > 1 && tables {
			return nil, fmt.Errorf("unsupported table limits flag %#x", b[0])
		}
		l.hasMax = b[0]&1 == 1
		b = b[1:]
		if l.min, n, err = uleb(b); err != nil {
			return nil, err
		}
		b = b[n:]
		if l.hasMax {
			if l.max, n, err = uleb(b); err != nil {
				return nil, err
			}
			b = b[n:]
		}
		out = append(out, l)
	}
	if len(b) != 0 {
		return nil, errors.New("trailing bytes")
	}
	return out, nil
}

// capTables gives every table a maximum so that together they hold at
// most maxTable elements, however many tables a module defines (each one
// costs a few bytes of binary, and their elements are allocated at their
// minimum). The sum of the minimums is at most maxTable (inspect checked).
// Declared maximums are kept first, in order, as far as they fit; the
// room left goes to tables without one, in order. rewrite is false when
// every table already had a maximum that fits.
func capTables(lims []limits, maxTable uint32) (capped []limits, rewrite bool) {
	room := uint64(maxTable)
	for _, l := range lims {
		room -= l.min
	}
	capped = slices.Clone(lims)
	grant := func(l *limits, want uint64) {
		grow := min(want, room)
		room -= grow
		if !l.hasMax || l.max != l.min+grow {
			rewrite = true
		}
		l.hasMax, l.max = true, l.min+grow
	}
	for i := range capped {
		if l := &capped[i]; l.hasMax {
			grant(l, l.max-min(l.max, l.min))
		}
	}
	for i := range capped {
		if l := &capped[i]; !lims[i].hasMax {
			grant(l, room)
		}
	}
	return capped, rewrite
}

func encodeTables(lims []limits) []byte {
	var sec []byte
	sec = binary.AppendUvarint(sec, uint64(len(lims)))
	for _, l := range lims {
		sec = append(sec, l.ref, 0x01)
		sec = binary.AppendUvarint(sec, l.min)
		sec = binary.AppendUvarint(sec, l.max)
	}
	return sec
}

// importError names an import airlock cannot satisfy.
type importError struct{ module, name, kind string }

func (e *importError) Error() string {
	return fmt.Sprintf("module imports %s %s.%s; airlock provides only functions (define the %s in the module)", e.kind, e.module, e.name, e.kind)
}

// checkImportKinds refuses imports of tables, memories, globals and tags:
// airlock's host modules export functions only, so such a module could not
// link; refusing it here gives a clear compile error.
func checkImportKinds(b []byte) error {
	count, n, err := uleb(b)
	if err != nil || count > uint64(len(b)) {
		return fmt.Errorf("%w: import section", errMalformed)
	}
	b = b[n:]
	name := func() (string, bool) {
		l, n, err := uleb(b)
		if err != nil || l > uint64(len(b)-n) {
			return "", false
		}
		s := string(b[n : n+int(l)])
		b = b[n+int(l):]
		return s, true
	}
	for range count {
		mod, ok1 := name()
		field, ok2 := name()
		if !ok1 || !ok2 || len(b) == 0 {
			return fmt.Errorf("%w: import section", errMalformed)
		}
		kind := b[0]
		b = b[1:]
		if kind != 0x00 {
			k := map[byte]string{1: "table", 2: "memory", 3: "global", 4: "tag"}[kind]
			if k == "" {
				return fmt.Errorf("%w: import %s.%s of unknown kind %#x", errMalformed, mod, field, kind)
			}
			return &importError{module: mod, name: field, kind: k}
		}
		_, n, err := uleb(b) // the function's type index
		if err != nil {
			return fmt.Errorf("%w: import section", errMalformed)
		}
		b = b[n:]
	}
	return nil
}

// checkLocals refuses a code section whose functions declare more than
// maxFunctionLocals locals each, or more than total together.
func checkLocals(b []byte, total uint64) error {
	count, n, err := uleb(b)
	if err != nil || count > uint64(len(b)) {
		return fmt.Errorf("%w: code section", errMalformed)
	}
	b = b[n:]
	var sum uint64
	for i := range count {
		size, n, err := uleb(b)
		if err != nil || size > uint64(len(b)-n) {
			return fmt.Errorf("%w: code section, function body %d", errMalformed, i)
		}
		body := b[n : n+int(size)]
		b = b[n+int(size):]
		groups, n, err := uleb(body)
		if err != nil || groups > uint64(len(body)) {
			return fmt.Errorf("%w: code section, locals of function body %d", errMalformed, i)
		}
		body = body[n:]
		var locals uint64
		for range groups {
			num, n, err := uleb(body)
			if err != nil || n >= len(body) {
				return fmt.Errorf("%w: code section, locals of function body %d", errMalformed, i)
			}
			typ := body[n]
			body = body[n+1:]
			if typ == 0x63 || typ == 0x64 { // (ref null? heaptype): skip the heap type
				_, n := binary.Varint(body)
				if n <= 0 {
					return fmt.Errorf("%w: code section, locals of function body %d", errMalformed, i)
				}
				body = body[n:]
			}
			if locals += min(num, maxFunctionLocals+1); locals > maxFunctionLocals {
				return fmt.Errorf("function body %d declares more than %d locals", i, maxFunctionLocals)
			}
		}
		if sum += locals; sum > total {
			return fmt.Errorf("the module declares more than %d locals in all", total)
		}
	}
	return nil
}

// uleb reads an unsigned LEB128 number of at most 64 bits.
func uleb(b []byte) (uint64, int, error) {
	v, n := binary.Uvarint(b)
	switch {
	case n == 0:
		return 0, 0, errors.New("truncated number")
	case n < 0:
		return 0, 0, errors.New("number overflows 64 bits")
	}
	return v, n, nil
}

// tableError reports a table minimum above the cap.
type tableError struct {
	declared uint64
	cap      uint32
}

func (e *tableError) Error() string {
	return fmt.Sprintf("module declares tables of %d elements, above the cap of %d", e.declared, e.cap)
}
