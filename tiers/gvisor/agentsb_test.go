package gvisor

import (
	"math"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// TestSplitRunDistrustsAgent: the agent's spawn and exit times split the
// host's run time only when they fit inside it; an agent that reports
// times past the host's, or near the int64 limit, leaves the host's
// timings as they are (start and run never above the total, never
// negative).
func TestSplitRunDistrustsAgent(t *testing.T) {
	host := airlock.Timings{StartUS: 1000, RunUS: 5000, TotalUS: 6000}
	for _, c := range []struct {
		name string
		exit agentExit
		want airlock.Timings
	}{
		{"honest", agentExit{SpawnUS: 300, ExitUS: 4000}, airlock.Timings{StartUS: 1300, RunUS: 3700, TotalUS: 6000}},
		{"no times", agentExit{}, host},
		{"exit before spawn", agentExit{SpawnUS: 300, ExitUS: 200}, host},
		{"past the host's run", agentExit{SpawnUS: 300, ExitUS: 3_600_000_000}, host},
		{"spawn past the host's run", agentExit{SpawnUS: 1 << 40, ExitUS: 1<<40 + 1}, host},
		{"overflow", agentExit{SpawnUS: math.MaxInt64 - 10, ExitUS: math.MaxInt64}, host},
	} {
		got := host
		splitRun(&got, &c.exit)
		if got != c.want {
			t.Errorf("%s: timings %+v, want %+v", c.name, got, c.want)
		}
		if got.StartUS < 0 || got.RunUS < 0 || got.StartUS+got.RunUS > got.TotalUS {
			t.Errorf("%s: timings %+v do not fit the total", c.name, got)
		}
	}
}
