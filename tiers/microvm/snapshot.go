package microvm

import "context"

type snapshot struct{}

func (t *Tier) restore(ctx context.Context, mem int64) (*vm, error) { return t.boot(ctx, mem) }
