package warmpool

// WithSize returns a copy of sizes (pool sizes by image reference) with
// ref's set to n, or removed for n = 0: the tiers' configs are values, so
// a config derived from another never shares its map.
func WithSize(sizes map[string]int, ref string, n int) map[string]int {
	m := make(map[string]int, len(sizes)+1)
	for r, k := range sizes {
		m[r] = k
	}
	if n == 0 {
		delete(m, ref)
	} else {
		m[ref] = n
	}
	return m
}
