//go:build race

package process

// raceEnabled: this test binary is built with the race detector.
const raceEnabled = true
