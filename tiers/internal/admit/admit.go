// Package admit holds the reasons the OS tiers share for not admitting a
// job, so each says the same.
package admit

// EnvUnsupported is the reason a tier that cannot pass a job's env to its
// programs gives for not admitting a job that sets it: an environment
// silently dropped would change what the program does.
const EnvUnsupported = "env is not passed to programs on this tier yet (only wasm jobs have one): refused rather than dropped"

// ClockNotShown is the reason a tier whose programs see the host's real
// time gives for not admitting a job that pins its clock: it would record
// a time the program never saw.
const ClockNotShown = "a pinned clock is not what programs see here (they see the host's real time; the microVM sets its guest's clock): refused rather than recorded"
