package engine

// Staging: the broker's copies into and out of a member's window of a
// live global domain, bounded and checked against its buffer layout.

import (
	"simpler/internal/bounds"
	"simpler/wire"
)

// GlobalDomainByID returns a live brokered domain (for staging).
func (w *Worker) GlobalDomainByID(id uint64) (*GlobalDomain, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d, ok := w.gdomains[id]
	if ok && d.pending {
		return nil, false
	}
	return d, ok
}

// member checks that rank r can be staged and returns its node.
func (d *GlobalDomain) member(op string, rank int) (int, error) {
	if rank < 0 || rank >= len(d.spec.Members) {
		return 0, Errorf(IndexError, "%s: rank %d out of range (domain %q has ranks 0..%d)", op, rank, d.spec.Name, len(d.spec.Members)-1)
	}
	return d.spec.Members[rank][0], nil
}

// MaxGlobalCopy bounds one staging copy.
const MaxGlobalCopy = 8 << 20

// stagingRange checks that the handle is not released and that
// [offset, offset+n) lies inside buffer (or the window).
func (d *GlobalDomain) stagingRange(op, buffer string, offset, n int) (int, error) {
	if err := d.usable(op); err != nil {
		return 0, err
	}
	base, limit := 0, d.spec.WindowSize
	if buffer != "" {
		o, size, err := d.bufferRange(buffer)
		if err != nil {
			return 0, Wrap(err, op)
		}
		base, limit = o, size
	}
	if n <= 0 || n > MaxGlobalCopy {
		return 0, Errorf(ValueError, "%s: %d bytes; a staging copy moves 1..%d", op, n, MaxGlobalCopy)
	}
	if !bounds.FitsInt(offset, n, limit) {
		return 0, Errorf(ValueError, "%s: %d bytes at offset %d overrun the %d-byte %s", op, n, offset, limit, map[bool]string{true: "buffer " + buffer, false: "window"}[buffer != ""])
	}
	return base + offset, nil
}

// CopyToGlobal stages data into member rank's window, on whichever node
// hosts it.
func (d *GlobalDomain) CopyToGlobal(rank int, data []byte, buffer string, offset int) error {
	const op = "copy_to_global_domain"
	at, err := d.stagingRange(op, buffer, offset, len(data))
	if err != nil {
		return err
	}
	node, err := d.member(op, rank)
	if err != nil {
		return err
	}
	_, err = d.nodeCmd(node, &wire.Control{Cmd: wire.CmdStageTo, Domain: wire.Domain{ID: d.id, Generation: d.gen}, Rank: uint32(rank), Offset: uint64(at), Data: data})
	return Wrap(err, op)
}

// CopyFromGlobal reads nbytes out of member rank's window.
func (d *GlobalDomain) CopyFromGlobal(rank, nbytes int, buffer string, offset int) ([]byte, error) {
	const op = "copy_from_global_domain"
	at, err := d.stagingRange(op, buffer, offset, nbytes)
	if err != nil {
		return nil, err
	}
	node, err := d.member(op, rank)
	if err != nil {
		return nil, err
	}
	r, err := d.nodeCmd(node, &wire.Control{Cmd: wire.CmdStageFrom, Domain: wire.Domain{ID: d.id, Generation: d.gen}, Rank: uint32(rank), Offset: uint64(at), NBytes: uint64(nbytes)})
	if err != nil {
		return nil, Wrap(err, op)
	}
	if len(r.Data) != nbytes {
		return nil, Errorf(RuntimeError, "%s: asked node %d for %d bytes, got %d", op, node, nbytes, len(r.Data))
	}
	return r.Data, nil
}
