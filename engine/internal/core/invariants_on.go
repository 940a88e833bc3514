//go:build invariants || race

package core

// invariants is on: every step checks the core's and the scheduler's
// invariants (and the engine's, Config.Check), and panics naming the first
// one broken. Builds with -race (the whole test suite) and with -tags
// invariants have it.
const invariants = true
