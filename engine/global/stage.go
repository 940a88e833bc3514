package global

// Staging: the broker's copies into and out of a member's window of a
// live global domain, bounded and checked against its buffer layout.

import (
	"simpler/engine"
	"simpler/internal/bounds"
	"simpler/wire"
)

// member checks that rank r can be staged and returns its node.
func (d *Domain) member(op string, rank int) (int, error) {
	if rank < 0 || rank >= len(d.spec.Members) {
		return 0, engine.Errorf(engine.IndexError, "%s: rank %d out of range (domain %q has ranks 0..%d)", op, rank, d.spec.Name, len(d.spec.Members)-1)
	}
	return d.spec.Members[rank][0], nil
}

// MaxCopy bounds one staging copy.
const MaxCopy = 8 << 20

// stagingRange checks that the handle is not released and that
// [offset, offset+n) lies inside buffer (or the window).
func (d *Domain) stagingRange(op, buffer string, offset, n int) (int, error) {
	if err := d.usable(op); err != nil {
		return 0, err
	}
	base, limit := 0, d.spec.WindowSize
	if buffer != "" {
		o, size, err := d.bufferRange(buffer)
		if err != nil {
			return 0, engine.Wrap(err, op)
		}
		base, limit = o, size
	}
	if n <= 0 || n > MaxCopy {
		return 0, engine.Errorf(engine.ValueError, "%s: %d bytes; a staging copy moves 1..%d", op, n, MaxCopy)
	}
	if !bounds.FitsInt(offset, n, limit) {
		return 0, engine.Errorf(engine.ValueError, "%s: %d bytes at offset %d overrun the %d-byte %s", op, n, offset, limit, map[bool]string{true: "buffer " + buffer, false: "window"}[buffer != ""])
	}
	return base + offset, nil
}

// CopyToGlobal stages data into member rank's window, on whichever node
// hosts it.
func (d *Domain) CopyToGlobal(rank int, data []byte, buffer string, offset int) error {
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
	return engine.Wrap(err, op)
}

// CopyFromGlobal reads nbytes out of member rank's window.
func (d *Domain) CopyFromGlobal(rank, nbytes int, buffer string, offset int) ([]byte, error) {
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
		return nil, engine.Wrap(err, op)
	}
	if len(r.Data) != nbytes {
		return nil, engine.Errorf(engine.RuntimeError, "%s: asked node %d for %d bytes, got %d", op, node, nbytes, len(r.Data))
	}
	return r.Data, nil
}
