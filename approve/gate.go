package approve

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// Authorize is the check before a job runs on tier for tenant: when policy
// requires an approval for it, token must approve exactly this job (its
// digest recomputed here), for this tenant, at now. It returns ctx
// carrying the placed-files check bound to that digest, which a tier that
// places files runs over what it placed (see [airlock.WithPlacedCheck]), and the
// rule that required the approval ("" when none did; ctx is then
// returned as is).
func (s *Signer) Authorize(ctx context.Context, p Policy, job *airlock.Job, tier, tenant, token string, now time.Time) (context.Context, string, error) {
	rule := p.Requires(job, tier)
	if rule == "" {
		return ctx, "", nil
	}
	d := Of(job, tier, tenant)
	if token == "" {
		return ctx, rule, &airlock.NotAdmitted{Reason: fmt.Sprintf("%s: rule %s requires an approval for this job (digest %s)", Required, rule, d)}
	}
	if _, err := s.Check(token, d, tenant, now); err != nil {
		return ctx, rule, err
	}
	return airlock.WithPlacedCheck(ctx, PlacedCheck(*job, tier, tenant, d)), rule, nil
}
