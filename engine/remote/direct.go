package remote

import (
	"simpler/engine"
	"simpler/internal/fault"
	"simpler/wire"
)

// Direct is the remote-buffer calls that are direct control, as seen from
// one place: inside the orchestration function of a run before its first
// submit, or outside any run (engine.Worker.DirectIn says which). Each
// passes the engine's gate before it sends anything.
type Direct struct {
	gate engine.DirectControl
	b    *buffers
}

// DirectIn is the remote-buffer calls of d's Worker, from where d is.
func DirectIn(d engine.DirectControl) Direct {
	return Direct{gate: d, b: buffersOf(d.Worker())}
}

// Malloc allocates nbytes on remote node worker and returns the owner
// handle.
func (d Direct) Malloc(worker, nbytes int) (*engine.RemoteBuffer, error) {
	const op = "remote_malloc"
	if nbytes <= 0 || nbytes > wire.MaxBufferBytes {
		return nil, engine.Errorf(engine.ValueError, "%s: nbytes must be in 1..%d, got %d", op, wire.MaxBufferBytes, nbytes)
	}
	if err := d.gate.Gate(op); err != nil {
		return nil, err
	}
	n, err := d.b.node(op, worker)
	if err != nil {
		return nil, err
	}
	r, err := n.Control(&wire.Control{Cmd: wire.CmdMalloc, NBytes: uint64(nbytes)})
	if err != nil {
		return nil, engine.Wrap(err, op)
	}
	h := &engine.RemoteBuffer{Worker: worker, Owner: worker, BufferID: r.Buffer.ID, Gen: r.Buffer.Generation,
		NBytes: nbytes, Access: engine.AccessRW, Ledger: d.b}
	d.b.mu.Lock()
	d.b.reg.add(h)
	d.b.mu.Unlock()
	return h, nil
}

// CopyTo copies src into owner buffer h at offset.
func (d Direct) CopyTo(h *engine.RemoteBuffer, src []byte, offset int) error {
	const op = "remote_copy_to"
	if err := ownerHandle(op, h, offset, len(src)); err != nil {
		return err
	}
	if err := d.gate.Gate(op); err != nil {
		return err
	}
	node, err := d.b.node(op, h.Owner)
	if err != nil {
		return err
	}
	for done := 0; done < len(src); {
		n := min(len(src)-done, wire.MaxCopy)
		_, release, err := node.ControlData(&wire.Control{Cmd: wire.CmdCopyTo, Buffer: ref(h), Offset: uint64(offset + done)}, src[done:done+n], nil)
		release()
		if err != nil {
			return engine.Wrap(err, op)
		}
		done += n
	}
	return nil
}

// CopyFrom copies owner buffer h at offset into dst.
func (d Direct) CopyFrom(h *engine.RemoteBuffer, dst []byte, offset int) error {
	const op = "remote_copy_from"
	if err := ownerHandle(op, h, offset, len(dst)); err != nil {
		return err
	}
	if err := d.gate.Gate(op); err != nil {
		return err
	}
	return d.b.copyFrom(op, h, dst, offset)
}

// copyFrom reads owner buffer h at offset into dst, a bounded copy at a
// time.
func (b *buffers) copyFrom(op string, h *engine.RemoteBuffer, dst []byte, offset int) error {
	n, err := b.node(op, h.Owner)
	if err != nil {
		return err
	}
	for done := 0; done < len(dst); {
		k := min(len(dst)-done, wire.MaxCopy)
		sink := dst[done : done+k]
		r, release, err := n.ControlData(&wire.Control{Cmd: wire.CmdCopyFrom, Buffer: ref(h), Offset: uint64(offset + done), NBytes: uint64(k)}, nil, sink)
		if err == nil && len(r.Data) != k {
			err = engine.Errorf(engine.RuntimeError, "asked for %d bytes, got %d", k, len(r.Data))
		}
		if err == nil && &r.Data[0] != &sink[0] {
			copy(sink, r.Data)
		}
		release()
		if err != nil {
			return engine.Wrap(err, op)
		}
		done += k
	}
	return nil
}

// Export describes a range of an owner buffer for import on other nodes.
// Its token is opaque: no transport key reaches a script.
type Export struct {
	owner  *engine.RemoteBuffer
	offset int
	nbytes int
	access engine.Access
	token  []byte
}

// Owner is the exported owner handle; Range the offset and length, and
// Access what an import may do.
func (e *Export) Owner() *engine.RemoteBuffer { return e.owner }
func (e *Export) Range() (int, int)           { return e.offset, e.nbytes }
func (e *Export) Access() engine.Access       { return e.access }

// Export exports [offset, offset+nbytes) of owner handle h.
func (d Direct) Export(h *engine.RemoteBuffer, offset, nbytes int, access engine.Access) (*Export, error) {
	const op = "remote_export"
	if err := ownerHandle(op, h, offset, nbytes); err != nil {
		return nil, err
	}
	if access&^h.Access != 0 {
		return nil, engine.Errorf(engine.ValueError, "%s: %s access of a %s handle", op, access, h.Access)
	}
	if err := d.gate.Gate(op); err != nil {
		return nil, err
	}
	n, err := d.b.node(op, h.Owner)
	if err != nil {
		return nil, err
	}
	r, err := n.Control(&wire.Control{Cmd: wire.CmdExport, Buffer: ref(h), Offset: uint64(offset), NBytes: uint64(nbytes), Access: wire.Access(access)})
	if err != nil {
		return nil, engine.Wrap(err, op)
	}
	return &Export{owner: h, offset: offset, nbytes: nbytes, access: access, token: r.Data}, nil
}

// Import makes export e usable on node worker; access 0 means as
// exported.
func (d Direct) Import(e *Export, worker int, access engine.Access) (*engine.RemoteBuffer, error) {
	const op = "remote_import"
	if e.owner.Released() {
		return nil, engine.UsedAfterRelease(op, "the exported buffer")
	}
	if access == 0 {
		access = e.access
	}
	if access&^e.access != 0 {
		return nil, engine.Errorf(engine.ValueError, "%s: %s access of a %s export", op, access, e.access)
	}
	if err := d.gate.Gate(op); err != nil {
		return nil, err
	}
	n, err := d.b.node(op, worker)
	if err != nil {
		return nil, err
	}
	if err := fault.Hit("remote.import", worker); err != nil {
		return nil, engine.Wrap(err, op)
	}
	r, err := n.Control(&wire.Control{Cmd: wire.CmdImport, Token: e.token, Access: wire.Access(access)})
	if err != nil {
		return nil, engine.Wrap(err, op)
	}
	h := &engine.RemoteBuffer{Worker: worker, Owner: e.owner.Owner, BufferID: e.owner.BufferID, Gen: e.owner.Gen,
		ImportID: r.Buffer.ID, NBytes: e.nbytes, Offset: e.offset, Access: access, Source: e.owner, Ledger: d.b}
	d.b.mu.Lock()
	d.b.reg.add(h)
	d.b.mu.Unlock()
	return h, nil
}
