package starlark_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sl "go.starlark.net/starlark"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/interp/starlark"
)

// TestStreamsOutput: what print writes reaches the sink while the script
// waits, in a test built-in, for the test to have seen it.
func TestStreamsOutput(t *testing.T) {
	gate := make(chan struct{})
	wait := sl.NewBuiltin("wait_gate", func(*sl.Thread, *sl.Builtin, sl.Tuple, []sl.Tuple) (sl.Value, error) {
		select {
		case <-gate:
			return sl.True, nil
		case <-time.After(30 * time.Second): // bounded: Gated then fails
			return sl.False, nil
		}
	})
	tier, err := starlark.NewHarnessTier(starlark.NewConfig(), sl.StringDict{"wait_gate": wait}, nil, nil)
	require.NoError(t, err)
	j := airlock.Job{Kind: airlock.KindStarlark, Code: "print('first')\nwait_gate()\nprint('second')"}
	j.Limits.WallMS = 60_000
	res := tiertest.Gated(t, tier, j, "first\n", func() { close(gate) })
	if res.Stdout != "first\nsecond\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}
