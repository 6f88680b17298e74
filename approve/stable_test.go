package approve

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// TestDigestIsStable pins the digest's bytes: approval tokens outlive a
// restart (approvals.key_file), so a change to the encoding — an
// optimisation included — must not change the digest of the same job.
// The values were computed by the first, unbuffered implementation.
func TestDigestIsStable(t *testing.T) {
	big := strings.Repeat("x", 10000) // longer than the buffer's bypass
	for _, c := range []struct {
		job  airlock.Job
		want Digest
	}{
		{airlock.Job{Kind: airlock.KindExpr, Code: "a + b", Input: map[string]any{"a": int64(1)}},
			"cd53e6ead3282f7ea748d004c0f18df1a6163ba916d0acb2fdbc1c468f6bfe69"},
		{airlock.Job{Kind: airlock.KindCommand, Argv: []string{"a", "b"}, Files: map[string]string{"f": big, "g": "small"}, Stdin: big,
			Grants: airlock.Grants{Net: []airlock.NetRule{{Host: "Example.com", Methods: []string{"GET"}, Ports: []int{443}}}, Secrets: map[string]string{"K": "v"}},
			Limits: airlock.Limits{WallMS: 5}},
			"984184f65694fadab2bf811c69030312dfc25bf6d4636b4013ede3a9dd69d064"},
	} {
		if got := Of(&c.job, "tier", "tenant"); got != c.want {
			t.Errorf("digest of %s job: %s, was %s", c.job.Kind, got, c.want)
		}
	}
}
