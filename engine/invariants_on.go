//go:build invariants || race

package engine

// invariants is on: every core step checks the core's, the scheduler's and
// the heap's invariants, and panics naming the first one broken. Builds
// with -race (the whole test suite) and with -tags invariants have it.
const invariants = true
