// Package airlock runs untrusted, model-generated code inside the cheapest
// isolation boundary that still holds.
//
// The package owns the vocabulary every part of airlock speaks: a [Job] says
// what to run and what it may touch, a [Tier] runs it behind one isolation
// boundary, and a [Result] says what happened. Tiers live in their own
// packages (interp/expr, interp/starlark, wasm, tiers/...); the router in
// escalate picks the cheapest tier whose [Level] the job's situation
// requires.
//
// Everything a job may touch is withheld unless granted in [Grants]; every
// run is bounded by [Limits], whose wall clock is always applied. Errors are
// typed: use errors.As with [*Stop], [*Denied], [*NotAdmitted],
// [*InvalidJob] and [*ErrorInfo].
package airlock
