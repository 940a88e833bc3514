package wire

// The link: messages between a remote-l3-worker daemon and the session
// processes it starts, over a Unix seqpacket socket the daemon hands each
// session (one message a packet, at most MaxLink bytes). The daemon sends
// LINK_START once; after that the link carries export resolution: a
// session importing an export sends LINK_RESOLVE, the daemon forwards it to
// the owner named by the export id (through the owner's daemon when that
// is another daemon of the same user on this host, over its peer socket),
// and the owner's LINK_GRANT comes back the same way with the buffer's
// shared-memory object attached as a descriptor (SCM_RIGHTS), never as a
// name. A session trusts its daemon; a daemon trusts neither a session nor
// a peer further than this format, so it is fuzzed like the TCP frames.

// LinkKind is a link message's first byte.
type LinkKind uint8

// The link messages.
const (
	LinkStart   LinkKind = iota + 1 // daemon → session: Daemon, Slot, Session, Worker, Limits, Hello
	LinkResolve                     // importer → daemon → owner: Req, ID, Parent
	LinkGrant                       // owner → daemon → importer: Req, then Err or Offset, NBytes, Access (+ a descriptor)
	numLinkKinds
)

// MaxLink bounds one link message: a LINK_START with a maximal HELLO, or
// a LINK_GRANT with a maximal error.
const MaxLink = MaxHello + MaxMessage + 1024

// Limits bound what one session may hold or queue; the daemon sets them
// (its flags) and a session refuses work beyond them with a typed error.
type Limits struct {
	BufferBytes uint64 // bytes of owned remote buffers and global windows at once, ≥ 1
	CopyBytes   uint64 // bytes of one COPY_TO, COPY_FROM or STAGE, 1..MaxCopy
	QueuedTasks uint32 // tasks read but not yet run, ≥ 1
	QueuedBytes uint64 // their payload bytes, ≥ 1
	LoadSteps   uint64 // Starlark steps of one module's top-level code, ≥ 1
}

// Link is one link message; only the fields of its Kind are encoded.
type Link struct {
	Kind    LinkKind
	Daemon  uint64 // START: the daemon's id, non-zero
	Slot    uint64 // START: the session's slot, non-zero
	Session uint64 // START: the HELLO header's session id, non-zero
	Worker  uint32 // START: the HELLO header's worker id
	Limits  Limits // START
	Hello   []byte // START: the HELLO payload the daemon checked, ≤ MaxHello

	Req    uint64   // RESOLVE, GRANT: the sender's request number, non-zero
	ID     ExportID // RESOLVE
	Parent uint64   // RESOLVE: the importer's parent id, non-zero

	Err    *ErrorBody // GRANT: refused; nothing else follows
	Offset uint64     // GRANT: the export's range in the object
	NBytes uint64     // GRANT: 1..MaxBufferBytes, offset + nbytes ≤ MaxBufferBytes
	Access Access     // GRANT: non-zero
}

// Encode writes the message.
func (m *Link) Encode(e *Encoder) {
	e.U8(uint8(m.Kind))
	switch m.Kind {
	case LinkStart:
		e.U64(m.Daemon)
		e.U64(m.Slot)
		e.U64(m.Session)
		e.U32(m.Worker)
		l := m.Limits
		e.U64(l.BufferBytes)
		e.U64(l.CopyBytes)
		e.U32(l.QueuedTasks)
		e.U64(l.QueuedBytes)
		e.U64(l.LoadSteps)
		e.Blob(m.Hello)
	case LinkResolve:
		e.U64(m.Req)
		m.ID.Encode(e)
		e.U64(m.Parent)
	case LinkGrant:
		e.U64(m.Req)
		if m.Err != nil {
			e.U8(statusErr)
			m.Err.encode(e)
			return
		}
		e.U8(statusOK)
		e.U64(m.Offset)
		e.U64(m.NBytes)
		e.U8(uint8(m.Access))
	}
}

// DecodeLink reads one link message.
func DecodeLink(b []byte) (Link, error) {
	d := NewDecoder(b)
	m := Link{Kind: LinkKind(d.U8())}
	if d.err == nil && (m.Kind == 0 || m.Kind >= numLinkKinds) {
		d.FailBounds("unknown link message %d", uint8(m.Kind))
	}
	switch m.Kind {
	case LinkStart:
		m.Daemon = nonZero(d, "daemon")
		m.Slot = nonZero(d, "slot")
		m.Session = nonZero(d, "session")
		m.Worker = d.U32()
		m.Limits = decodeLimits(d)
		m.Hello = d.Blob(MaxHello)
	case LinkResolve:
		m.Req = nonZero(d, "request")
		id, err := DecodeExportID(d.take(ExportIDSize))
		if d.err == nil && err != nil {
			d.err = err
		}
		m.ID = id
		m.Parent = nonZero(d, "parent")
	case LinkGrant:
		m.Req = nonZero(d, "request")
		if decodeStatus(d) == statusErr {
			m.Err = decodeErrorBody(d)
			break
		}
		m.Offset = d.U64()
		m.NBytes = decodeSize(d, MaxBufferBytes, "export")
		checkRange(d, m.Offset, m.NBytes)
		m.Access = decodeAccess(d, false)
	}
	if err := d.Finish(); err != nil {
		return Link{}, err
	}
	return m, nil
}

func decodeLimits(d *Decoder) Limits {
	l := Limits{BufferBytes: nonZero(d, "buffer bytes limit"), CopyBytes: decodeSize(d, MaxCopy, "copy limit"),
		QueuedTasks: d.U32(), QueuedBytes: 0, LoadSteps: 0}
	if d.err == nil && l.QueuedTasks == 0 {
		d.FailBounds("queued tasks limit 0")
	}
	l.QueuedBytes = nonZero(d, "queued bytes limit")
	l.LoadSteps = nonZero(d, "load steps limit")
	return l
}

// nonZero reads a u64 that must not be 0.
func nonZero(d *Decoder, what string) uint64 {
	v := d.U64()
	if d.err == nil && v == 0 {
		d.FailBounds("%s 0", what)
	}
	return v
}
