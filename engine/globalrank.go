package engine

// A global domain's rank on a chip is what engine/global (which runs the
// node's side of the transaction) and engine/proc (whose chip processes
// host ranks) meet at: the NodeRank interface, and the descriptor tables
// both carry in wire's form.

import (
	"fmt"

	"simpler/hal/comm"
	"simpler/wire"
)

// NodeRank is one rank of a global domain on a node's chip: engine/global's
// when the chip is in this process, engine/proc's when the chip is a
// process of its own (ChipProcess.PrepareGlobalRank). The steps are
// hal/comm's GlobalRank's.
type NodeRank interface {
	Import(table []comm.Descriptor) error
	Commit() error
	Invalidate()
	Release() error
	DeviceCtx() uint64  // in the chip's address space
	WindowBase() uint64 // in the chip's address space
	// Stage copies n bytes at c.Offset into the window (STAGE_TO, from
	// c.Data) or out of it (STAGE_FROM, into reply.Data); the caller has
	// checked that they lie inside it.
	Stage(c wire.Control, reply *wire.ControlReply, n int) error
}

// A wire.Descriptor is the bytes of a comm.Descriptor: the sizes agree, or
// this constant overflows and the package does not build.
const _ = uint(comm.DescriptorSize-wire.DescriptorSize) + uint(wire.DescriptorSize-comm.DescriptorSize)

// WireDescriptor is d in hal/comm's layout.
func WireDescriptor(d comm.Descriptor) (w wire.Descriptor) {
	copy(w[:], comm.EncodeDescriptor(d))
	return w
}

// WireDescriptors is ds as a table, in their order.
func WireDescriptors(ds []comm.Descriptor) wire.DescriptorTable {
	var t wire.DescriptorTable
	for _, d := range ds {
		t.Descriptors = append(t.Descriptors, WireDescriptor(d))
	}
	return t
}

// CommDescriptors decodes every descriptor of a table (comm's decoder is
// canonical, so a table that decodes re-encodes to the same bytes).
func CommDescriptors(t wire.DescriptorTable) ([]comm.Descriptor, error) {
	var ds []comm.Descriptor
	for i := range t.Descriptors {
		d, err := comm.DecodeDescriptor(t.Descriptors[i][:])
		if err != nil {
			return nil, Wrap(err, fmt.Sprintf("descriptor %d", i))
		}
		ds = append(ds, d)
	}
	return ds, nil
}
