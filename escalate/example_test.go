package escalate_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/escalate"
	"github.com/airlock-sandbox/airlock/interp/expr"
	"github.com/airlock-sandbox/airlock/interp/starlark"
)

// The library use the README shows: a router over the in-process tiers,
// and a job it sends to the cheapest one that may run it.
func Example() {
	scripts, err := starlark.New(starlark.NewConfig())
	if err != nil {
		panic(err)
	}
	router, err := escalate.New(escalate.DefaultPolicy(), []airlock.Tier{expr.New(), scripts})
	if err != nil {
		panic(err)
	}
	res, err := router.Run(context.Background(), airlock.Job{
		Kind:  airlock.KindExpr,
		Code:  "items[0] % 2",
		Input: map[string]any{"items": []any{int64(3)}},
	})
	var stop *airlock.Stop
	switch {
	case errors.As(err, &stop): // timeout, memory, steps, output, ...
		fmt.Println("stopped:", stop.Reason)
	case err != nil: // *airlock.ErrorInfo, *airlock.NotAdmitted, *airlock.InvalidJob
		fmt.Println("failed:", err)
	default:
		fmt.Println(res.Value, res.Tier)
	}
	// Output: 1 expr
}

// A stop is a typed error: here the step budget ends a loop.
func Example_stopped() {
	scripts, err := starlark.New(starlark.NewConfig())
	if err != nil {
		panic(err)
	}
	router, err := escalate.New(escalate.DefaultPolicy(), []airlock.Tier{scripts})
	if err != nil {
		panic(err)
	}
	_, err = router.Run(context.Background(), airlock.Job{
		Kind:   airlock.KindStarlark,
		Code:   "x = 0\nfor i in range(100000000):\n    x += i",
		Limits: airlock.Limits{Steps: 1000},
	})
	var stop *airlock.Stop
	fmt.Println(errors.As(err, &stop), stop.Reason)
	// Output: true steps
}
