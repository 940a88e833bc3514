package global

import (
	"testing"

	"simpler/hal/comm"
	"simpler/internal/wiretest"
	"simpler/wire"
)

// The global-domain tables are wire's and fuzzed there (wire/global.go).
// This fuzzes the engine's side of a descriptor table: every descriptor
// must decode by hal/comm's layout, and a table that does converts back to
// the same bytes.

func sampleDescriptor(rank uint32) comm.Descriptor {
	return comm.Descriptor{Profile: comm.ProfileSim, DomainID: 1, Generation: 2, Rank: rank, Ranks: 2,
		MappingSize: 1 << 20, Handle: "simpler-1-gdom-1-2-r0", Secret: comm.Secret{0: 1, 15: byte(rank + 1)}}
}

func FuzzDecodeDescs(f *testing.F) {
	seeds := [][]byte{
		{},
		encodeDescs([]comm.Descriptor{sampleDescriptor(0)}),
		encodeDescs([]comm.Descriptor{sampleDescriptor(0), sampleDescriptor(1)}),
	}
	wiretest.FuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		ds, err := decodeDescs(b)
		return func(e *wire.Encoder) error { e.Raw(encodeDescs(ds)); return nil }, err
	})
}
