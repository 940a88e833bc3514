package remote

import (
	"crypto/rand"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal/shm"
	"simpler/internal/bounds"
	"simpler/wire"
)

// A session's remote buffers: owned memory it allocated, and imports of
// other buffers' exports. An export is a capability the owner records: the
// id it hands out is 128 random bits in its table, and an import, in this
// session or another of the same daemon, resolves it only by asking the
// owner through the daemon (the link), which answers with the memory
// itself as a descriptor. No name, size or range is ever taken from the
// parent.
//
// Memory is counted while it is mapped, by every mapping: an owned buffer
// counts its bytes against its session, and an import counts the whole
// object it maps against the importing session (an import of a session's
// own export counts twice), until each is unmapped. Freeing a buffer that
// an import still maps returns the owner's bytes, while the importer's
// keep counting the memory that stays. A buffer a reply or a task is still
// reading when it is freed leaves its table at once and is unmapped, and
// its bytes returned, when the last of them lets go (sbuf.retire).

// account is the memory one session holds mapped: within its own bound
// and, through its entry in the daemon's ledger, the daemon's bound over
// every session. The caller holds the session's mu.
type account struct {
	held   uint64
	bound  uint64      // the daemon's --max-buffer-bytes
	daemon ledgerEntry // its l is nil for a session run without a daemon (the fuzzer)
}

// reserve counts n more bytes, or refuses with a RuntimeError naming the
// bound it would pass.
func (a *account) reserve(n uint64, op string) error {
	if n > a.bound || a.held > a.bound-n {
		return engine.Errorf(engine.RuntimeError, "%s: %d bytes more would bring this session's memory to %d bytes, beyond its bound of %d (the daemon's --max-buffer-bytes)",
			op, n, a.held+n, a.bound)
	}
	if a.daemon.l != nil {
		if total, ok := a.daemon.reserve(n); !ok {
			return engine.Errorf(engine.RuntimeError, "%s: %d bytes more would bring the memory of the daemon's sessions to %d bytes, beyond their bound of %d (the daemon's --max-total-bytes)",
				op, n, total, a.daemon.l.bound())
		}
	}
	a.held += n
	return nil
}

// release returns n bytes reserved before.
func (a *account) release(n uint64) {
	a.held -= n
	if a.daemon.l != nil {
		a.daemon.release(n)
	}
}

// malloc allocates an owned buffer within the session's memory bounds.
func (s *session) malloc(n uint64, r *wire.ControlReply) error {
	s.mu.Lock()
	err := s.mem.reserve(n, "REMOTE_MALLOC")
	s.mu.Unlock()
	if err != nil {
		return err
	}
	// n ≤ wire.MaxBufferBytes. The name carries random bits (hal/shm):
	// nobody can take it first, and it never leaves this session.
	seg, err := shm.Create("rbuf", int(n))
	if err != nil {
		s.release(n)
		return engine.Errorf(engine.RuntimeError, "REMOTE_MALLOC of %d bytes: %v", n, err)
	}
	hostmem.Register(seg)
	b := &sbuf{seg: seg, len: int(n), access: wire.AccessReadWrite, owned: true, charge: n}
	r.Buffer = s.add(b)
	s.raceNameBuffer(b, r.Buffer, false)
	return nil
}

func (s *session) release(n uint64) {
	s.mu.Lock()
	s.mem.release(n)
	s.mu.Unlock()
}

// copy runs COPY_TO or COPY_FROM on an owned buffer. A COPY_FROM's data
// is the buffer's memory itself, sent in place (see control): the buffer
// comes back held, and the caller lets it go once the reply is written,
// so a REMOTE_FREE meanwhile cannot unmap what is being sent.
func (s *session) copy(c wire.Control, r *wire.ControlReply) (*sbuf, error) {
	b, err := s.hold(c.Buffer, true)
	if err != nil {
		return nil, err
	}
	n := c.NBytes
	if c.Cmd == wire.CmdCopyTo {
		n = uint64(len(c.Data))
	}
	if err := s.checkCopy(c.Cmd, c.Offset, n, b.len); err != nil {
		s.letGo(b)
		return nil, err
	}
	if c.Cmd == wire.CmdCopyTo {
		copy(b.bytes()[c.Offset:], c.Data)
		s.letGo(b)
		return nil, nil
	}
	r.Data = b.bytes()[c.Offset : c.Offset+n]
	return b, nil
}

// checkCopy applies the copy bound and the buffer's bounds.
func (s *session) checkCopy(cmd wire.Command, off, n uint64, size int) error {
	if n > s.limits.CopyBytes {
		return engine.Errorf(engine.ValueError, "%s of %d bytes: this node copies at most %d bytes at a time (the daemon's --max-copy-bytes)", cmd, n, s.limits.CopyBytes)
	}
	if !bounds.Fits(off, n, uint64(size)) {
		return engine.RangeError(cmd.String(), off, n, uint64(size))
	}
	return nil
}

// export records a range of an owned buffer and returns its id. The
// buffer is checked and the export recorded under one lock, so a free
// meanwhile leaves no export behind.
func (s *session) export(c wire.Control, r *wire.ControlReply) error {
	id := wire.ExportID{Daemon: s.daemon, Slot: s.slot}
	for id.Secret == ([16]byte{}) {
		if _, err := rand.Read(id.Secret[:]); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.bufs[c.Buffer]
	if b == nil || !b.owned {
		return engine.Errorf(engine.ValueError, "buffer %d (generation %d) is not an owned buffer of this node", c.Buffer.ID, c.Buffer.Generation)
	}
	if c.NBytes == 0 || !bounds.Fits(c.Offset, c.NBytes, uint64(b.len)) {
		return engine.RangeError("EXPORT", c.Offset, c.NBytes, uint64(b.len))
	}
	if len(s.exports) >= maxExports {
		return engine.Errorf(engine.RuntimeError, "EXPORT: this node holds %d exports, its bound", len(s.exports))
	}
	s.exports[id.Secret] = export{ref: c.Buffer, off: c.Offset, n: c.NBytes, access: c.Access}
	r.Data = id.Bytes()
	return nil
}

// importTimeout bounds an import's round trip through the daemon.
const importTimeout = 10 * time.Second

// importExport maps an export, named by its id, as an imported buffer.
func (s *session) importExport(c wire.Control, r *wire.ControlReply) error {
	id, err := wire.DecodeExportID(c.Token)
	if err != nil {
		return engine.Errorf(engine.ValueError, "IMPORT: a malformed export id: %v", err)
	}
	g, err := s.resolveExport(id)
	if err != nil {
		return err
	}
	defer unix.Close(g.fd)
	if c.Access != 0 && c.Access&^g.m.Access != 0 {
		return engine.Errorf(engine.ValueError, "IMPORT: %s access asked of an export that allows %s", c.Access, g.m.Access)
	}
	// The whole object is mapped, so the whole object is counted, before
	// it is mapped.
	var st unix.Stat_t
	if err := unix.Fstat(g.fd, &st); err != nil || st.Size <= 0 {
		return engine.Errorf(engine.RuntimeError, "IMPORT: the exported memory has no size (%v)", err)
	}
	size := uint64(st.Size)
	s.mu.Lock()
	err = s.mem.reserve(size, "IMPORT")
	s.mu.Unlock()
	if err != nil {
		return err
	}
	seg, err := s.mapImport(g, id, size)
	if err != nil {
		s.release(size)
		return err
	}
	access := g.m.Access
	if c.Access != 0 {
		access = c.Access
	}
	hostmem.Register(seg)
	b := &sbuf{seg: seg, off: int(g.m.Offset), len: int(g.m.NBytes), access: access, charge: size}
	r.Buffer = s.add(b)
	s.raceNameBuffer(b, r.Buffer, true)
	return nil
}

// mapImport maps a grant's memory, which must be size bytes and hold the
// export's range.
func (s *session) mapImport(g grant, id wire.ExportID, size uint64) (*shm.Segment, error) {
	seg, err := shm.OpenFD(g.fd, fmt.Sprintf("export of session %d", id.Slot))
	if err != nil {
		return nil, engine.Errorf(engine.RuntimeError, "IMPORT: %v", err)
	}
	if uint64(len(seg.Mem)) != size || !bounds.Fits(g.m.Offset, g.m.NBytes, size) {
		seg.Close()
		return nil, engine.Errorf(engine.RuntimeError, "IMPORT: the export's range does not fit its memory")
	}
	return seg, nil
}

// grant is the owner's answer to a resolve: the export's range and access,
// and its memory as a descriptor the receiver closes.
type grant struct {
	m   wire.Link
	fd  int
	err error
}

// resolveExport asks the export's owner, through the daemon, for it.
func (s *session) resolveExport(id wire.ExportID) (grant, error) {
	ch := make(chan grant, 1)
	s.mu.Lock()
	s.linkSeq++
	req := s.linkSeq
	s.grants[req] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.grants, req)
		s.mu.Unlock()
	}()
	if err := s.link.send(&wire.Link{Kind: wire.LinkResolve, Req: req, ID: id, Parent: s.parent}, -1); err != nil {
		return grant{}, engine.Errorf(engine.RuntimeError, "IMPORT: the daemon is gone: %v", err)
	}
	select {
	case g := <-ch:
		if g.err != nil {
			closeFD(g.fd)
			return grant{}, g.err
		}
		return g, nil
	case <-time.After(importTimeout):
		return grant{}, engine.Errorf(engine.TimeoutError, "IMPORT: no answer from the exporting session within %v", importTimeout)
	}
}

// serveLink reads the daemon's messages: grants for this session's
// imports, and resolves of its own exports asked by other sessions (or
// itself). It runs until the link closes; then the daemon is gone.
func (s *session) serveLink() {
	defer close(s.linkDone)
	buf, oob := linkBuffers()
	for {
		m, fd, err := s.link.recv(buf, oob)
		if err != nil {
			s.failGrants(engine.Errorf(engine.RuntimeError, "IMPORT: the link to the daemon closed: %v", err))
			return
		}
		switch m.Kind {
		case wire.LinkResolve:
			closeFD(fd)
			s.answerResolve(m)
		case wire.LinkGrant:
			s.deliverGrant(m, fd)
		default:
			closeFD(fd)
		}
	}
}

func (s *session) deliverGrant(m wire.Link, fd int) {
	g := grant{m: m, fd: fd}
	if m.Err != nil {
		g.err = &engine.Error{Kind: engine.Kind(m.Err.Kind), Msg: m.Err.Message}
	} else if fd < 0 {
		g.err = engine.Errorf(engine.RuntimeError, "IMPORT: the grant carries no memory")
	}
	s.mu.Lock()
	ch := s.grants[m.Req]
	delete(s.grants, m.Req)
	s.mu.Unlock()
	if ch == nil {
		closeFD(fd) // a grant that came too late
		return
	}
	ch <- g
}

func (s *session) failGrants(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for req, ch := range s.grants {
		ch <- grant{fd: -1, err: err}
		delete(s.grants, req)
	}
}

// answerResolve grants an export of this session's to the importer the
// daemon asks for: only by its id, only to a session of the same parent,
// only while its buffer is live.
func (s *session) answerResolve(m wire.Link) {
	reply := func(err error) { s.link.send(grantError(m.Req, err), -1) }
	s.mu.Lock()
	e, ok := s.exports[m.ID.Secret]
	b := s.bufs[e.ref]
	s.mu.Unlock()
	switch {
	case m.ID.Daemon != s.daemon || m.ID.Slot != s.slot || !ok || b == nil:
		reply(engine.Errorf(engine.ValueError, "IMPORT: no such export (a forged id, or its buffer was freed)"))
		return
	case m.Parent != s.parent:
		reply(engine.Errorf(engine.ValueError, "IMPORT: the export belongs to another parent's session"))
		return
	}
	fd, err := b.seg.Reopen()
	if err != nil {
		reply(engine.Errorf(engine.RuntimeError, "IMPORT: the exported buffer is gone: %v", err))
		return
	}
	defer unix.Close(fd)
	s.link.send(&wire.Link{Kind: wire.LinkGrant, Req: m.Req, Offset: e.off, NBytes: e.n, Access: e.access}, fd)
}

func (s *session) add(b *sbuf) wire.BufferRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bufSeq++
	ref := wire.BufferRef{ID: s.bufSeq, Generation: 1}
	s.bufs[ref] = b
	return ref
}

// hold looks up a buffer of the session's table and holds it: it stays
// mapped, even if freed meanwhile, until letGo.
func (s *session) hold(ref wire.BufferRef, owned bool) (*sbuf, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.bufs[ref]
	if b == nil || b.owned != owned {
		return nil, engine.Errorf(engine.ValueError, "buffer %d (generation %d) is not an owned buffer of this node", ref.ID, ref.Generation)
	}
	b.pin()
	return b, nil
}

// letGo ends a hold; the last one on a freed buffer unmaps it.
func (s *session) letGo(b *sbuf) {
	s.mu.Lock()
	last := b.unpin()
	if last {
		delete(s.retired, b)
	}
	s.mu.Unlock()
	if last {
		s.unmap(b)
	}
}

// unmap closes a buffer's mapping and only then returns its bytes: memory
// is counted while it is mapped.
func (s *session) unmap(b *sbuf) error {
	s.raceForgetBuffer(b)
	hostmem.Unregister(b.seg)
	err := b.seg.Close()
	s.release(b.charge)
	return err
}

// drop frees an owned buffer (its exports with it) or releases an import.
// It leaves the table at once; it is unmapped now, or by the last hold
// on it.
func (s *session) drop(ref wire.BufferRef, owned bool) error {
	s.mu.Lock()
	b := s.bufs[ref]
	if b == nil || b.owned != owned {
		s.mu.Unlock()
		what := "an imported buffer"
		if owned {
			what = "an owned buffer"
		}
		return engine.Errorf(engine.ValueError, "buffer %d (generation %d) is not %s of this node", ref.ID, ref.Generation, what)
	}
	delete(s.bufs, ref)
	if owned {
		for k, e := range s.exports {
			if e.ref == ref {
				delete(s.exports, k)
			}
		}
	}
	now := b.retire()
	if !now {
		s.retired[b] = true
	}
	s.mu.Unlock()
	if !now {
		return nil
	}
	return s.unmap(b)
}

// The life of a mapping, as a plain state machine the caller steps under
// the session's mu: live in the table and held by nobody; held by replies
// and tasks (pins); retired from the table while still held; unmapped
// once retired and no longer held. Each step says whether it is time to
// unmap.

// pin holds b for a reply or a task.
func (b *sbuf) pin() { b.pins++ }

// unpin ends a hold and reports whether b is now to be unmapped.
func (b *sbuf) unpin() bool {
	b.pins--
	return b.retired && b.pins == 0
}

// retire takes b out of use and reports whether it is to be unmapped now
// (nobody holds it).
func (b *sbuf) retire() bool {
	b.retired = true
	return b.pins == 0
}
