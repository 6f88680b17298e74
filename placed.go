package airlock

import "context"

// A placed-files check inspects what a tier actually placed into a sandbox
// (the scratch directory after the job's files were copied in) before
// anything runs there. Approvals use it to recompute a job's digest over
// the placed files, so a file swapped after approval is refused.
type placedCheck func(dir string) error

type placedKey struct{}

// WithPlacedCheck returns a context carrying check; tiers that place files
// call [CheckPlaced] with it.
func WithPlacedCheck(ctx context.Context, check func(dir string) error) context.Context {
	return context.WithValue(ctx, placedKey{}, placedCheck(check))
}

// CheckPlaced runs the context's placed-files check on dir, if there is
// one. A tier that places files must call it after placing them and before
// starting the job, and refuse the run when it returns an error.
func CheckPlaced(ctx context.Context, dir string) error {
	if check, ok := ctx.Value(placedKey{}).(placedCheck); ok && check != nil {
		return check(dir)
	}
	return nil
}

// HasPlacedCheck reports whether ctx carries a placed-files check, so a tier
// can skip work that only the check needs (staging files on the host, an
// extra round trip) when there is none.
func HasPlacedCheck(ctx context.Context) bool {
	check, ok := ctx.Value(placedKey{}).(placedCheck)
	return ok && check != nil
}
