package engine

import "simpler/internal/wiretest"

// The canonical-encoding check of the fuzz targets (internal/wiretest).
type decodeFunc = wiretest.DecodeFunc

var (
	fuzzCanonical = wiretest.FuzzCanonical
	canonical     = wiretest.Canonical
)
