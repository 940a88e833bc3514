package remote

// A session's control commands: buffers and copies, the code bundle,
// registrations and global-domain steps, each answered on its sequence
// number.

import (
	"simpler/engine"
	"simpler/wire"
)

// control runs one command and replies with the request's sequence. A
// COPY_FROM's reply carries the buffer's memory in place, held until the
// reply is written.
func (s *session) control(f frame) {
	r := &wire.ControlReply{Seq: f.h.Seq}
	if f.copied {
		r.Cmd = wire.CmdCopyTo
		s.write(wire.TypeControlReply, f.h.Seq, r)
		return
	}
	var held *sbuf
	c, err := wire.DecodeControl(f.payload)
	switch {
	case err != nil:
		r.Cmd = wire.CmdRegister // a reply needs a valid command; the error says what went wrong
		err = engine.Errorf(engine.ValueError, "CONTROL: %v", err)
	case c.Cmd == wire.CmdCopyTo || c.Cmd == wire.CmdCopyFrom:
		r.Cmd = c.Cmd
		held, err = s.copy(c, r)
	default:
		r.Cmd = c.Cmd
		err = s.command(c, r)
	}
	if err != nil {
		r.Err = errBody(err)
		r.Buffer, r.Data = wire.BufferRef{}, nil
	}
	// A write that fails ends the session (writeBulk): there is nothing
	// more to do with its error here.
	if held != nil {
		data := r.Data
		r.Data = nil
		s.writeBulk(wire.TypeControlReply, f.h.Seq, r, data)
		s.letGo(held)
		return
	}
	s.write(wire.TypeControlReply, f.h.Seq, r)
}

func (s *session) command(c wire.Control, r *wire.ControlReply) error {
	switch c.Cmd {
	case wire.CmdCancel:
		return s.cancel(c.TaskSeq)
	case wire.CmdBundle:
		return s.bundle(c.Bundle)
	case wire.CmdRegister:
		return s.register(c)
	case wire.CmdUnregister:
		return s.unregister(c)
	case wire.CmdMalloc:
		return s.malloc(c.NBytes, r)
	case wire.CmdFree, wire.CmdReleaseImport:
		return s.drop(c.Buffer, c.Cmd == wire.CmdFree)
	case wire.CmdExport:
		return s.export(c, r)
	case wire.CmdImport:
		return s.importExport(c, r)
	}
	return s.global(c, r)
}

// bundle loads the parent's code, once.
func (s *session) bundle(b wire.Bundle) error {
	s.mu.Lock()
	had := s.resolve != nil
	s.mu.Unlock()
	if had {
		return engine.Errorf(engine.ValueError, "BUNDLE: this node already has its code")
	}
	r, err := s.newResolver(b, s.limits.LoadSteps)
	if err != nil {
		return err
	}
	s.forwardPrints(r) // before any of its code runs
	s.raceResolver(r)
	s.mu.Lock()
	s.resolve = r
	s.mu.Unlock()
	return nil
}

func (s *session) register(c wire.Control) error {
	s.mu.Lock()
	res := s.resolve
	s.mu.Unlock()
	if res == nil {
		return engine.Errorf(engine.RuntimeError, "REGISTER: this node has no code yet (the parent sends BUNDLE first)")
	}
	fn, err := res.Resolve(c.Digest, c.Module, c.Name)
	if err != nil {
		return err
	}
	if _, err := s.inner.Registry().Register(fn, nil); err != nil {
		return err
	}
	s.mu.Lock()
	s.callables[c.Digest] = fn
	s.mu.Unlock()
	return nil
}

func (s *session) unregister(c wire.Control) error {
	h, ok := s.inner.Registry().Lookup(c.Digest)
	if !ok {
		return engine.Errorf(engine.ValueError, "UNREGISTER: %s is not registered on this node", c.Digest)
	}
	if err := s.inner.Registry().Unregister(h); err != nil {
		return err
	}
	if _, still := s.inner.Registry().Lookup(c.Digest); !still {
		s.mu.Lock()
		delete(s.callables, c.Digest)
		s.mu.Unlock()
	}
	return nil
}

// global runs a global-domain command on the inner worker; the windows
// of PREPARE (and of REATTACH, which takes pooled ones back) count against
// the session's memory bounds until the domain is released or aborted.
func (s *session) global(c wire.Control, r *wire.ControlReply) error {
	id := c.Domain.ID
	if c.Cmd == wire.CmdPrepare || c.Cmd == wire.CmdReattach {
		need := c.Domain.WindowSize * uint64(len(c.Domain.Ranks)) // both bounded by the decoder: no overflow
		s.mu.Lock()
		_, had := s.windows[id]
		var err error
		if !had { // a repeated PREPARE counts its windows once
			err = s.mem.reserve(need, "PREPARE")
		}
		s.mu.Unlock()
		if err != nil {
			return err
		}
		if err := s.inner.Command(c, r); err != nil {
			if !had {
				s.release(need)
			}
			return err
		}
		s.mu.Lock()
		s.windows[id] = need
		s.mu.Unlock()
		if !had {
			s.raceOutside(1)
		}
		return nil
	}
	err := s.inner.Command(c, r)
	if err == nil && (c.Cmd == wire.CmdAbort || c.Cmd == wire.CmdReleaseDomain) {
		s.mu.Lock()
		_, had := s.windows[id]
		s.mem.release(s.windows[id])
		delete(s.windows, id)
		s.mu.Unlock()
		if had {
			s.raceOutside(-1)
		}
	}
	return err
}
