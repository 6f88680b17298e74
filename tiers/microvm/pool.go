package microvm

type pool struct{}

func newPool(t *Tier, n int) *pool  { return &pool{} }
func (p *pool) claim(mem int64) *vm { return nil }
func (p *pool) close()              {}
