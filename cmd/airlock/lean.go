//go:build lean

package main

import (
	"context"
	"os"
)

// accountServe runs an account's executor, which serves the HTTP API: in a
// lean build, in airlock-full (see heavy.go).
func accountServe(context.Context, *env, string, string) error {
	return execFull("account serve", os.Args[1:])
}
