package engine

import (
	"testing"

	"simpler/hal/comm"
	"simpler/hal/dtype"
	"simpler/wire"
)

// Fuzz targets for the byte forms a level-3 node gets from the broker of a
// global domain (gnode.go): whatever decodes re-encodes to the same bytes.

func FuzzDecodePrepareExtra(f *testing.F) {
	seeds := [][]byte{
		encodePrepareExtra("", nil),
		encodePrepareExtra("dom", []BufferSpec{
			{Name: "x", DType: dtype.Float32, Count: 1024, NBytes: 4096},
			{Name: "", DType: dtype.Int8, Count: 0, NBytes: 0},
		}),
	}
	fuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		name, bufs, err := decodePrepareExtra(b)
		return func(e *wire.Encoder) error { e.Raw(encodePrepareExtra(name, bufs)); return nil }, err
	})
}

func sampleDescriptor(rank uint32) comm.Descriptor {
	return comm.Descriptor{Profile: comm.ProfileSim, DomainID: 1, Generation: 2, Rank: rank, Ranks: 2,
		MappingSize: 1 << 20, Handle: "simpler-1-gdom-1-2-r0"}
}

func FuzzDecodeDescs(f *testing.F) {
	seeds := [][]byte{
		{},
		encodeDescs([]comm.Descriptor{sampleDescriptor(0)}),
		encodeDescs([]comm.Descriptor{sampleDescriptor(0), sampleDescriptor(1)}),
	}
	fuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		ds, err := decodeDescs(b)
		return func(e *wire.Encoder) error { e.Raw(encodeDescs(ds)); return nil }, err
	})
}

func FuzzDecodeTopology(f *testing.F) {
	seeds := [][]byte{
		nodeTopology{}.encode(),
		nodeTopology{Cluster: 7, NodeRank: 1, Nodes: 2, Hash: "sha256:x", DeviceRanks: []int{2, 3}}.encode(),
	}
	fuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		top, err := decodeTopology(b)
		return func(e *wire.Encoder) error { e.Raw(top.encode()); return nil }, err
	})
}
