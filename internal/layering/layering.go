// Package layering holds the test that keeps simpler's packages in their
// layers: which package may import which, checked on the import graph
// `go list` reports, and the structure measures of the engine split
// (structure_test.go): a package's file cycles, and the files a submit
// walks through. It has no code of its own.
//
// The rules (layering_test.go):
//
//   - engine never imports engine/proc or engine/remote: they implement
//     the engine's interfaces, and Config brings them in;
//   - engine/proc and engine/remote never import each other;
//   - engine/internal/core, the decision logic of a Worker's runs,
//     imports no package of the module (only the standard library), and
//     its files refer to each other without a cycle (files_test.go,
//     measured with go/types);
//   - nothing below starlib imports the Starlark interpreter: the engine,
//     hal, wire, kind and internal (but internal/mpitest, a test helper
//     that parses scripts) know nothing of scripts;
//   - the detectors and the scheduler (internal/race, internal/dsched,
//     internal/halt) import nothing of engine or starlib, which call them.
package layering
