package process

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// TestSlowSinkKeepsOutput: a job whose output sink is slow (as a slow
// client's stream is) keeps all of its output. The program writes less
// than its pipe holds and exits at once, while the sink still holds the
// first chunk, longer than the tier waited for a program's output after
// its end: the rest was cut from the result, with no error and no note.
func TestSlowSinkKeepsOutput(t *testing.T) {
	forBothTiers(t, func(t *testing.T, tier *Tier, cfg Config) {
		first := true
		slow := airlock.WithOutput(context.Background(), func(airlock.Stream, []byte) {
			if first {
				first = false
				time.Sleep(6 * time.Second)
			}
		})
		const n = 60_000
		job := cmdJob("head", "-c", "60000", "/dev/zero")
		job.Limits.OutputBytes = 1 << 20
		res, err := tier.Run(slow, job)
		if err != nil || len(res.Stdout) != n {
			t.Errorf("%v, %d bytes of stdout, want %d", err, len(res.Stdout), n)
		}
	})
}
