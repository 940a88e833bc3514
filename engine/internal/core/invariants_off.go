//go:build !invariants && !race

package core

// invariants is off in ordinary builds (see invariants_on.go).
const invariants = false
