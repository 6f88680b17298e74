package wasm

import (
	"slices"

	"github.com/airlock-sandbox/airlock/internal/collect"
)

// memTree is a directory of the in-memory scratch as package collect
// walks it. The scratch holds no links, so none is ever met.
type memTree struct {
	m *memFS
	n *memNode
}

func (t memTree) Close() {}

func (t memTree) Names() ([]string, error) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	names := make([]string, 0, len(t.n.children))
	for name := range t.n.children {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

func (t memTree) Stat(name string) (collect.Kind, int64, error) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	c, ok := t.n.children[name]
	switch {
	case !ok:
		return collect.Missing, 0, nil
	case c.dir:
		return collect.Directory, 0, nil
	}
	return collect.Regular, int64(len(c.data)), nil
}

func (t memTree) Sub(name string) (collect.Tree, error) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	return memTree{t.m, t.n.children[name]}, nil
}

func (t memTree) Read(name string, limit int64) ([]byte, error) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	data := t.n.children[name].data
	return slices.Clone(data[:min(int64(len(data)), limit)]), nil
}

// collected reads the job's collect patterns from the run's scratch.
func (f *fsSpec) collected(patterns []string) (map[string]string, []string) {
	if f.mem == nil {
		return nil, []string{"collect: the run had no scratch"}
	}
	got := collect.Walk(memTree{f.mem, f.mem.root}, patterns, collect.MaxBytes)
	return got.Files, got.Skipped
}
