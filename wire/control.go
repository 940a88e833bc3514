package wire

import "fmt"

// Command is a CONTROL command.
type Command uint8

// The commands. Buffer commands name buffers by BufferRef; the global
// domain commands carry a Domain (see Control for which fields each uses).
const (
	CmdRegister      Command = iota + 1 // Digest, Module, Name → ()
	CmdUnregister                       // Digest → ()
	CmdMalloc                           // NBytes → Buffer
	CmdFree                             // Buffer → ()
	CmdCopyTo                           // Buffer, Offset, Data → ()
	CmdCopyFrom                         // Buffer, Offset, NBytes → Data
	CmdExport                           // Buffer, Offset, NBytes, Access → Data (the export token)
	CmdImport                           // Token, Access (0: as exported) → Buffer
	CmdReleaseImport                    // Buffer → ()
	CmdCommInit                         // Domain{ID, Generation, Size, Ranks, Table (the topology)} → ()
	CmdPrepare                          // Domain{ID, Generation, Size, Ranks, WindowSize, Table} → Data (this node's descriptors)
	CmdImportTable                      // Domain{ID, Generation, Table} → ()
	CmdCommit                           // Domain{ID, Generation} → ()
	CmdAbort                            // Domain{ID, Generation} → ()
	CmdReleaseDomain                    // Domain{ID, Generation} → ()
	CmdStageTo                          // Domain{ID, Generation}, Rank, Offset, Data (≤ MaxStage) → ()
	CmdStageFrom                        // Domain{ID, Generation}, Rank, Offset, NBytes (≤ MaxStage) → Data
	CmdBundle                           // Bundle → ()
	CmdCancel                           // TaskSeq → (); stop that TASK if it is queued or runs
	CmdReattach                         // Domain{ID, Generation, Size, Ranks, WindowSize, Table (a Reattach)} → ()
	numCommands
)

var commandNames = [...]string{
	CmdRegister:      "REGISTER",
	CmdUnregister:    "UNREGISTER",
	CmdMalloc:        "REMOTE_MALLOC",
	CmdFree:          "REMOTE_FREE",
	CmdCopyTo:        "COPY_TO",
	CmdCopyFrom:      "COPY_FROM",
	CmdExport:        "EXPORT",
	CmdImport:        "IMPORT",
	CmdReleaseImport: "RELEASE_IMPORT",
	CmdCommInit:      "COMM_INIT",
	CmdPrepare:       "PREPARE",
	CmdImportTable:   "IMPORT_TABLE",
	CmdCommit:        "COMMIT",
	CmdAbort:         "ABORT",
	CmdReleaseDomain: "RELEASE_DOMAIN",
	CmdStageTo:       "STAGE_TO",
	CmdStageFrom:     "STAGE_FROM",
	CmdBundle:        "BUNDLE",
	CmdCancel:        "CANCEL",
	CmdReattach:      "REATTACH",
}

// Valid reports whether c is a known command.
func (c Command) Valid() bool { return c > 0 && c < numCommands }

func (c Command) String() string {
	if c.Valid() {
		return commandNames[c]
	}
	return fmt.Sprintf("Command(%d)", uint8(c))
}

// DomainRank places one rank of a global domain on this node: the rank
// in the domain and the node's local worker (chip) id hosting it.
type DomainRank struct {
	Rank   uint32
	Worker uint32
}

// Domain is the body of the global-domain commands.
type Domain struct {
	ID         uint64 // non-zero
	Generation uint64 // non-zero
	Size       int    // ranks in the whole domain, 1..MaxRanks
	Ranks      []DomainRank
	WindowSize uint64 // 1..MaxWindow
	Table      []byte // opaque descriptors, ≤ MaxDomainTable
}

// Control is one command on the command lane. Only the fields its command
// uses (see the Cmd constants) are encoded; the others must be zero.
type Control struct {
	Cmd    Command
	Digest string    // REGISTER, UNREGISTER
	Module string    // REGISTER
	Name   string    // REGISTER
	Buffer BufferRef // REMOTE_FREE, COPY_TO, COPY_FROM, EXPORT, RELEASE_IMPORT
	Offset uint64    // COPY_TO, COPY_FROM, EXPORT; STAGE_*: in the rank's window
	NBytes uint64    // REMOTE_MALLOC, COPY_FROM (≤ MaxCopy), EXPORT, STAGE_FROM (≤ MaxStage)
	Data   []byte    // COPY_TO: 1..MaxCopy bytes; STAGE_TO: 1..MaxStage
	Rank   uint32    // STAGE_TO, STAGE_FROM: the domain rank whose window it is
	Access Access    // EXPORT, IMPORT
	Token  []byte    // IMPORT: the export id, 1..MaxExportToken bytes
	Domain Domain    // COMM_INIT … RELEASE_DOMAIN; STAGE_*: ID and Generation
	Bundle Bundle    // BUNDLE
	// TaskSeq is CANCEL's: the sequence of the TASK frame to stop.
	TaskSeq uint64
}

// Encode writes the CONTROL payload.
func (c *Control) Encode(e *Encoder) {
	e.U8(uint8(c.Cmd))
	switch c.Cmd {
	case CmdRegister:
		e.String(c.Digest)
		e.String(c.Module)
		e.String(c.Name)
	case CmdUnregister:
		e.String(c.Digest)
	case CmdMalloc:
		e.U64(c.NBytes)
	case CmdFree, CmdReleaseImport:
		c.Buffer.encode(e)
	case CmdCopyTo:
		c.Buffer.encode(e)
		e.U64(c.Offset)
		e.Blob(c.Data)
	case CmdCopyFrom:
		c.Buffer.encode(e)
		e.U64(c.Offset)
		e.U64(c.NBytes)
	case CmdExport:
		c.Buffer.encode(e)
		e.U64(c.Offset)
		e.U64(c.NBytes)
		e.U8(uint8(c.Access))
	case CmdImport:
		e.Blob(c.Token)
		e.U8(uint8(c.Access))
	case CmdBundle:
		c.Bundle.encode(e)
	case CmdCancel:
		e.U64(c.TaskSeq)
	case CmdStageTo, CmdStageFrom:
		e.U64(c.Domain.ID)
		e.U64(c.Domain.Generation)
		e.U32(c.Rank)
		e.U64(c.Offset)
		if c.Cmd == CmdStageTo {
			e.Blob(c.Data)
		} else {
			e.U64(c.NBytes)
		}
	case CmdCommInit, CmdPrepare, CmdImportTable, CmdCommit, CmdAbort, CmdReleaseDomain, CmdReattach:
		dm := &c.Domain
		e.U64(dm.ID)
		e.U64(dm.Generation)
		if c.Cmd == CmdCommInit || c.Cmd == CmdPrepare || c.Cmd == CmdReattach {
			e.U32(uint32(dm.Size))
			e.U32(uint32(len(dm.Ranks)))
			for _, r := range dm.Ranks {
				e.U32(r.Rank)
				e.U32(r.Worker)
			}
		}
		if c.Cmd == CmdPrepare || c.Cmd == CmdReattach {
			e.U64(dm.WindowSize)
		}
		if c.Cmd != CmdCommit && c.Cmd != CmdAbort && c.Cmd != CmdReleaseDomain {
			e.Blob(dm.Table)
		}
	}
}

// DecodeControl reads a CONTROL payload. COPY_TO data aliases b.
func DecodeControl(b []byte) (Control, error) {
	d := NewDecoder(b)
	c := Control{Cmd: Command(d.U8())}
	if d.err == nil && !c.Cmd.Valid() {
		d.FailBounds("unknown command %d", uint8(c.Cmd))
	}
	if d.err != nil {
		return Control{}, d.err
	}
	switch c.Cmd {
	case CmdRegister:
		c.Digest = decodeDigest(d)
		c.Module = decodeName(d, "module name")
		c.Name = decodeName(d, "function name")
	case CmdUnregister:
		c.Digest = decodeDigest(d)
	case CmdMalloc:
		c.NBytes = decodeSize(d, MaxBufferBytes, "allocation")
	case CmdFree, CmdReleaseImport:
		c.Buffer = decodeBufferRef(d)
	case CmdCopyTo:
		c.Buffer = decodeBufferRef(d)
		c.Offset = d.U64()
		c.Data = d.BlobRef(MaxCopy)
		if d.err == nil && len(c.Data) == 0 {
			d.FailBounds("empty copy")
		}
		checkRange(d, c.Offset, uint64(len(c.Data)))
	case CmdCopyFrom:
		c.Buffer = decodeBufferRef(d)
		c.Offset = d.U64()
		c.NBytes = decodeSize(d, MaxCopy, "copy")
		checkRange(d, c.Offset, c.NBytes)
	case CmdExport:
		c.Buffer = decodeBufferRef(d)
		c.Offset = d.U64()
		c.NBytes = decodeSize(d, MaxBufferBytes, "export")
		checkRange(d, c.Offset, c.NBytes)
		c.Access = decodeAccess(d, false)
	case CmdImport:
		c.Token = d.Blob(MaxExportToken)
		if d.err == nil && len(c.Token) == 0 {
			d.FailBounds("empty export token")
		}
		c.Access = decodeAccess(d, true)
	case CmdBundle:
		c.Bundle = decodeBundle(d)
	case CmdCancel:
		c.TaskSeq = decodeSeq(d)
	case CmdStageTo, CmdStageFrom:
		decodeStage(d, &c)
	default:
		c.Domain = decodeDomain(d, c.Cmd)
	}
	if err := d.Finish(); err != nil {
		return Control{}, err
	}
	return c, nil
}

// decodeStage reads the body of STAGE_TO or STAGE_FROM into c.
func decodeStage(d *Decoder, c *Control) {
	c.Domain.ID, c.Domain.Generation = d.U64(), d.U64()
	if d.err == nil && (c.Domain.ID == 0 || c.Domain.Generation == 0) {
		d.FailBounds("domain id %d generation %d: both must be non-zero", c.Domain.ID, c.Domain.Generation)
	}
	c.Rank = d.U32()
	if d.err == nil && c.Rank >= MaxRanks {
		d.FailBounds("rank %d exceeds its bound %d", c.Rank, MaxRanks-1)
	}
	c.Offset = d.U64()
	n := c.NBytes
	if c.Cmd == CmdStageTo {
		c.Data = d.BlobRef(MaxStage)
		if d.err == nil && len(c.Data) == 0 {
			d.FailBounds("empty staging copy")
		}
		n = uint64(len(c.Data))
	} else {
		c.NBytes = decodeSize(d, MaxStage, "staging copy")
		n = c.NBytes
	}
	if d.err == nil && (c.Offset > MaxWindow || n > MaxWindow-c.Offset) {
		d.FailBounds("staging range at offset %d of %d bytes ends beyond %d", c.Offset, n, uint64(MaxWindow))
	}
}

func decodeDomain(d *Decoder, cmd Command) Domain {
	var dm Domain
	dm.ID = d.U64()
	dm.Generation = d.U64()
	if d.err == nil && (dm.ID == 0 || dm.Generation == 0) {
		d.FailBounds("domain id %d generation %d: both must be non-zero", dm.ID, dm.Generation)
	}
	if cmd == CmdCommInit || cmd == CmdPrepare || cmd == CmdReattach {
		size := d.U32()
		if d.err == nil && (size == 0 || size > MaxRanks) {
			d.FailBounds("domain size %d: want 1..%d", size, MaxRanks)
		}
		dm.Size = int(size)
		n := d.Count(MaxRanks, minDomainRank)
		if d.err == nil && n == 0 {
			d.FailBounds("no ranks on this node")
		}
		if n > 0 && d.err == nil {
			dm.Ranks = make([]DomainRank, 0, n)
		}
		for i := 0; i < n && d.err == nil; i++ {
			r := DomainRank{Rank: d.U32(), Worker: d.U32()}
			switch {
			case d.err != nil:
			case r.Rank >= size:
				d.FailBounds("rank %d of a domain of %d", r.Rank, size)
			case i > 0 && r.Rank <= dm.Ranks[i-1].Rank:
				d.FailBounds("rank %d after %d: ranks must be sorted and unique", r.Rank, dm.Ranks[i-1].Rank)
			case r.Worker >= MaxDevices:
				d.FailBounds("local worker %d exceeds its bound %d", r.Worker, MaxDevices-1)
			}
			dm.Ranks = append(dm.Ranks, r)
		}
	}
	if cmd == CmdPrepare || cmd == CmdReattach {
		dm.WindowSize = decodeSize(d, MaxWindow, "window")
	}
	if cmd == CmdCommInit || cmd == CmdPrepare || cmd == CmdImportTable || cmd == CmdReattach {
		dm.Table = d.Blob(MaxDomainTable)
	}
	return dm
}

// decodeSize reads a byte count in 1..max.
func decodeSize(d *Decoder, max uint64, what string) uint64 {
	n := d.U64()
	if d.err == nil && (n == 0 || n > max) {
		d.FailBounds("%s of %d bytes: want 1..%d", what, n, max)
	}
	return n
}

// checkRange refuses an offset and length that end beyond MaxBufferBytes.
func checkRange(d *Decoder, off, n uint64) {
	if d.err == nil && (off > MaxBufferBytes || n > MaxBufferBytes-off) {
		d.FailBounds("range at offset %d of %d bytes ends beyond %d", off, n, uint64(MaxBufferBytes))
	}
}

// ControlReply answers one CONTROL: the request's sequence and command,
// and either Err or the command's result (see the Cmd constants):
// REMOTE_MALLOC and IMPORT return Buffer; COPY_FROM, EXPORT, PREPARE and
// STAGE_FROM return Data (the bytes, the export token, the node's
// descriptor table, the window's bytes).
type ControlReply struct {
	Seq    uint64 // the CONTROL frame's sequence (also the header's)
	Cmd    Command
	Err    *ErrorBody
	Buffer BufferRef
	Data   []byte
}

// Encode writes the CONTROL_REPLY payload.
func (r *ControlReply) Encode(e *Encoder) {
	e.U64(r.Seq)
	e.U8(uint8(r.Cmd))
	if r.Err != nil {
		e.U8(statusErr)
		r.Err.encode(e)
		return
	}
	e.U8(statusOK)
	switch r.Cmd {
	case CmdMalloc, CmdImport:
		r.Buffer.encode(e)
	case CmdCopyFrom, CmdExport, CmdPrepare, CmdStageFrom:
		e.Blob(r.Data)
	}
}

// DecodeControlReply reads a CONTROL_REPLY payload. COPY_FROM data
// aliases b. That the data has the requested length is the caller's
// check: the reply does not carry the request.
func DecodeControlReply(b []byte) (ControlReply, error) {
	d := NewDecoder(b)
	r := ControlReply{Seq: decodeSeq(d), Cmd: Command(d.U8())}
	if d.err == nil && !r.Cmd.Valid() {
		d.FailBounds("unknown command %d", uint8(r.Cmd))
	}
	if decodeStatus(d) == statusErr {
		r.Err = decodeErrorBody(d)
	} else if d.err == nil {
		switch r.Cmd {
		case CmdMalloc, CmdImport:
			r.Buffer = decodeBufferRef(d)
		case CmdCopyFrom:
			r.Data = d.BlobRef(MaxCopy)
			if d.err == nil && len(r.Data) == 0 {
				d.FailBounds("empty copy")
			}
		case CmdExport:
			r.Data = d.Blob(MaxExportToken)
			if d.err == nil && len(r.Data) == 0 {
				d.FailBounds("empty export token")
			}
		case CmdPrepare:
			r.Data = d.Blob(MaxDomainTable)
		case CmdStageFrom:
			r.Data = d.Blob(MaxStage)
			if d.err == nil && len(r.Data) == 0 {
				d.FailBounds("empty staging copy")
			}
		}
	}
	if err := d.Finish(); err != nil {
		return ControlReply{}, err
	}
	return r, nil
}
