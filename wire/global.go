package wire

import "simpler/hal/dtype"

// The tables of the global-domain commands: what Domain.Table and
// PREPARE's reply Data hold. The CONTROL codec bounds them as blobs; the
// node decodes them with these. They cross TCP, so their layouts belong
// to protocol v2: docs/protocol.md describes the topology, and a
// descriptor is hal/comm's fixed layout, opaque here.

// MaxBuffers bounds the buffers of a domain's window.
const MaxBuffers = 4096

// minBufferSpec is the fewest bytes an encoded BufferSpec takes: an empty
// name, the dtype, the count and the bytes.
const minBufferSpec = 4 + 1 + 8 + 8

// BufferSpec is one named buffer of a domain's window.
type BufferSpec struct {
	Name   string
	DType  dtype.DType // any byte: the node checks the layout as a whole
	Count  int         // elements, ≤ MaxBufferBytes
	NBytes int         // ≤ MaxBufferBytes
}

// PrepareExtra is PREPARE's table: the domain's name and the buffer
// layout of its window, which the command itself does not carry.
type PrepareExtra struct {
	Name    string
	Buffers []BufferSpec // ≤ MaxBuffers
}

// Encode writes the table.
func (p *PrepareExtra) Encode(e *Encoder) {
	e.String(p.Name)
	e.U32(uint32(len(p.Buffers)))
	for _, b := range p.Buffers {
		e.String(b.Name)
		e.U8(uint8(b.DType))
		e.Int(b.Count)
		e.Int(b.NBytes)
	}
}

// DecodePrepareExtra reads the table.
func DecodePrepareExtra(b []byte) (PrepareExtra, error) {
	d := NewDecoder(b)
	p := PrepareExtra{Name: d.String()}
	n := d.Count(MaxBuffers, minBufferSpec)
	if n > 0 {
		p.Buffers = make([]BufferSpec, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		p.Buffers = append(p.Buffers, BufferSpec{Name: d.String(), DType: dtype.DType(d.U8()),
			Count: d.Int(MaxBufferBytes), NBytes: d.Int(MaxBufferBytes)})
	}
	if err := d.Finish(); err != nil {
		return PrepareExtra{}, err
	}
	return p, nil
}

// DescriptorSize is the size of one global-domain descriptor, hal/comm's
// fixed and versioned layout (the engine checks at compile time that
// comm.DescriptorSize is this).
const DescriptorSize = 192

// Descriptor is one rank's descriptor; hal/comm encodes and decodes its
// fields.
type Descriptor [DescriptorSize]byte

// DescriptorTable is a rank-ordered table of descriptors: whole
// descriptors back to back, at most MaxRanks, as many as its length over
// DescriptorSize. It always travels in a blob, whose length prefix counts
// it: PREPARE's reply and IMPORT_TABLE over TCP, RankImport in the
// mailbox.
type DescriptorTable struct{ Descriptors []Descriptor }

// Encode writes the table.
func (t *DescriptorTable) Encode(e *Encoder) {
	for i := range t.Descriptors {
		e.Raw(t.Descriptors[i][:])
	}
}

// DecodeDescriptorTable reads a table: whole descriptors only, at most
// MaxRanks of them.
func DecodeDescriptorTable(b []byte) (DescriptorTable, error) {
	if len(b)%DescriptorSize != 0 {
		return DescriptorTable{}, errorf(ErrTruncated, "a descriptor table of %d bytes is not whole descriptors", len(b))
	}
	n := len(b) / DescriptorSize
	if n > MaxRanks {
		return DescriptorTable{}, errorf(ErrBounds, "a descriptor table of %d descriptors exceeds the bound %d", n, MaxRanks)
	}
	var t DescriptorTable
	if n > 0 {
		t.Descriptors = make([]Descriptor, n)
		for i := range t.Descriptors {
			copy(t.Descriptors[i][:], b[i*DescriptorSize:])
		}
	}
	return t, nil
}

// encodeBlob writes the table as a blob, as the messages that carry one
// do.
func (t *DescriptorTable) encodeBlob(e *Encoder) {
	e.U32(uint32(len(t.Descriptors) * DescriptorSize))
	t.Encode(e)
}

func decodeTableBlob(d *Decoder) DescriptorTable {
	b := d.BlobRef(MaxDomainTable)
	if d.err != nil {
		return DescriptorTable{}
	}
	t, err := DecodeDescriptorTable(b)
	d.nest("descriptor table", err)
	return t
}

// Topology is COMM_INIT's table: the broker's cluster id, this node's
// rank among the domain's nodes and their number, the domain's topology
// hash, and the global device rank of each of this node's ranks (in the
// command's rank order). The node checks what these mean.
type Topology struct {
	Cluster     uint64
	NodeRank    uint32
	Nodes       uint32
	Hash        string
	DeviceRanks []uint32 // ≤ MaxRanks
}

// Encode writes the table.
func (t *Topology) Encode(e *Encoder) {
	e.U64(t.Cluster)
	e.U32(t.NodeRank)
	e.U32(t.Nodes)
	e.String(t.Hash)
	e.U32(uint32(len(t.DeviceRanks)))
	for _, r := range t.DeviceRanks {
		e.U32(r)
	}
}

// DecodeTopology reads the table.
func DecodeTopology(b []byte) (Topology, error) {
	d := NewDecoder(b)
	t := Topology{Cluster: d.U64(), NodeRank: d.U32(), Nodes: d.U32(), Hash: d.String()}
	n := d.Count(MaxRanks, 4)
	if n > 0 {
		t.DeviceRanks = make([]uint32, n)
		for i := range t.DeviceRanks {
			t.DeviceRanks[i] = d.U32()
		}
	}
	if err := d.Finish(); err != nil {
		return Topology{}, err
	}
	return t, nil
}

// Reattach is REATTACH's table: what COMM_INIT, PREPARE and IMPORT_TABLE
// carry in a full transaction, for a domain whose windows its nodes take
// back from their pools. Each part travels in a blob of its own, bounded
// by MaxDomainTable like the whole: the node's topology, the buffer
// layout, and the complete rank-ordered descriptor table (which names
// the windows to take back; the broker makes it from the names of an
// earlier domain over the same members).
type Reattach struct {
	Topology    Topology
	Extra       PrepareExtra
	Descriptors DescriptorTable
}

// Encode writes the table.
func (r *Reattach) Encode(e *Encoder) {
	e.Message(&r.Topology)
	e.Message(&r.Extra)
	r.Descriptors.encodeBlob(e)
}

// DecodeReattach reads the table.
func DecodeReattach(b []byte) (Reattach, error) {
	d := NewDecoder(b)
	var r Reattach
	var err error
	if part := d.BlobRef(MaxDomainTable); d.err == nil {
		r.Topology, err = DecodeTopology(part)
		d.nest("topology", err)
	}
	if part := d.BlobRef(MaxDomainTable); d.err == nil {
		r.Extra, err = DecodePrepareExtra(part)
		d.nest("buffer layout", err)
	}
	if d.err == nil {
		r.Descriptors = decodeTableBlob(d)
	}
	if err := d.Finish(); err != nil {
		return Reattach{}, err
	}
	return r, nil
}
