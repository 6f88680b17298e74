// Package jobs holds helpers the project's tiers, server and CLI share for
// building airlock's typed job errors.
package jobs

import (
	"fmt"

	"github.com/airlock-sandbox/airlock"
)

// Invalid returns an [*airlock.InvalidJob] for field, its reason
// formatted as fmt.Sprintf does.
func Invalid(field, format string, args ...any) error {
	return &airlock.InvalidJob{Field: field, Reason: fmt.Sprintf(format, args...)}
}
