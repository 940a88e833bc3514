package remote

// A session's tasks: queued within the session's bounds, run on its
// inner worker with their tensors resolved from the session's buffers,
// cancelled on request.

import (
	"fmt"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal/dtype"
	"simpler/hal/shm"
	"simpler/internal/bounds"
	"simpler/wire"
)

// runTasks runs f and every task queued meanwhile, in order.
func (s *session) runTasks(f frame) {
	for {
		s.mu.Lock()
		gone := s.gone
		s.curSeq = f.h.Seq
		if !gone {
			s.taskStop.Reset()
		}
		s.mu.Unlock()
		if !gone { // tasks queued for a parent that went away are not run
			s.task(f)
		}
		f.done()
		s.mu.Lock()
		s.curSeq = 0
		if len(s.queued) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		f = s.queued[0]
		s.queued = s.queued[1:]
		s.queuedBytes -= uint64(len(f.payload))
		s.mu.Unlock()
	}
}

// refuseTask fails a task the queue has no room for, at once.
func (s *session) refuseTask(seq uint64, queued int) {
	fail := &wire.TaskFailure{Kind: string(engine.RuntimeError), Message: fmt.Sprintf(
		"this node has %d tasks (or %d bytes of them) queued, its bound (the daemon's --max-queued-tasks, --max-queued-bytes)", queued, s.limits.QueuedBytes)}
	s.write(wire.TypeCompletion, seq, &wire.Completion{Seq: seq, Err: fail, Race: s.raceCount()})
}

// task runs one orchestration callable on the inner worker.
func (s *session) task(f frame) {
	c := &wire.Completion{Seq: f.h.Seq}
	s.spans.begin()
	err := s.runTask(f.payload)
	c.Took, c.Spans = s.spans.end()
	c.Race = s.raceCount()
	if err != nil {
		fail := &wire.TaskFailure{}
		if te, ok := err.(*engine.TaskError); ok {
			fail.Path, fail.TaskID, fail.Callable = te.Worker, uint64(te.TaskID), te.Callable
			err = te.Err
		}
		body := errBody(err)
		fail.Kind, fail.Message = body.Kind, body.Message
		c.Err = fail
	}
	s.mu.Lock()
	s.inflight--
	s.mu.Unlock()
	s.write(wire.TypeCompletion, f.h.Seq, c)
}

func (s *session) runTask(payload []byte) error {
	t, err := wire.DecodeTask(payload)
	if err != nil {
		return engine.Errorf(engine.ValueError, "TASK: %v", err)
	}
	s.mu.Lock()
	fn := s.callables[t.Digest]
	s.mu.Unlock()
	oc, ok := fn.(engine.OrchCallable)
	if !ok {
		return engine.Errorf(engine.ValueError, "TASK: callable %s is not registered on this node", t.Digest)
	}
	s.spans.named(oc.Name())
	args, scratch, held, err := s.taskArgs(t)
	defer func() {
		for _, seg := range scratch {
			hostmem.Unregister(seg)
			seg.Close()
		}
		for _, b := range held {
			s.letGo(b)
		}
	}()
	if err != nil {
		return err
	}
	cfg := engine.CallConfigOf(t.Config)
	r, err := s.inner.SubmitStoppable(func(o *engine.Orchestrator) (any, error) { return nil, oc.RunOrch(o, args, &cfg) }, &s.taskStop)
	if err != nil {
		return err
	}
	defer s.raceWait(r)()
	return r.Wait(-1)
}

// cancel stops the task of sequence seq: the running one's run is
// cancelled; a queued one is taken out and fails at once.
func (s *session) cancel(seq uint64) error {
	s.mu.Lock()
	if s.curSeq == seq {
		s.mu.Unlock()
		s.taskStop.Stop(fmt.Sprintf("task %d cancelled by the parent", seq))
		return nil
	}
	for i, f := range s.queued {
		if f.h.Seq == seq {
			s.queued = append(s.queued[:i], s.queued[i+1:]...)
			s.queuedBytes -= uint64(len(f.payload))
			s.inflight--
			s.mu.Unlock()
			f.done()
			fail := &wire.TaskFailure{Kind: string(engine.RuntimeError), Message: "cancelled before it ran", NotStarted: true}
			return s.write(wire.TypeCompletion, seq, &wire.Completion{Seq: seq, Err: fail, Race: s.raceCount()})
		}
	}
	s.mu.Unlock()
	return nil // done already: nothing to stop
}

// taskArgs places each tensor in this process: a remote ref resolves to
// the buffer's memory here, held until the task ends (a REMOTE_FREE
// meanwhile does not unmap it under the kernel); inline bytes get scratch
// shared memory.
func (s *session) taskArgs(t wire.Task) (a *engine.TaskArgs, scratch []*shm.Segment, held []*sbuf, err error) {
	a = &engine.TaskArgs{}
	for i, ta := range t.Tensors {
		ten := engine.Tensor{Shape: ta.Shape, DType: dtype.DType(ta.DType)}
		n := ten.NBytes()
		if ta.Remote != nil {
			s.mu.Lock()
			b := s.bufs[ta.Remote.Buffer]
			if b != nil {
				b.pin()
				held = append(held, b)
			}
			s.mu.Unlock()
			if b == nil {
				return nil, scratch, held, engine.Errorf(engine.ValueError, "TASK: tensor %d names buffer %d (generation %d), which this node does not hold", i, ta.Remote.Buffer.ID, ta.Remote.Buffer.Generation)
			}
			if !bounds.Fits(ta.Remote.Offset, uint64(n), uint64(b.len)) {
				return nil, scratch, held, engine.Errorf(engine.ValueError, "TASK: tensor %d (%d bytes at offset %d) overruns its %d-byte buffer", i, n, ta.Remote.Offset, b.len)
			}
			if ta.Remote.Access&^b.access != 0 {
				return nil, scratch, held, engine.Errorf(engine.ValueError, "TASK: tensor %d needs %s access; the buffer here allows %s", i, ta.Remote.Access, b.access)
			}
			ten.Addr = b.seg.Addr() + uint64(b.off) + ta.Remote.Offset
		} else {
			seg, err := shm.Create("inline", max(len(ta.Inline), 1))
			if err != nil {
				return nil, scratch, held, err
			}
			hostmem.Register(seg)
			scratch = append(scratch, seg)
			copy(seg.Mem, ta.Inline)
			ten.Addr = seg.Addr()
		}
		if err := a.AddTensor(ten, engine.Tag(ta.Tag)); err != nil {
			return nil, scratch, held, err
		}
	}
	a.Scalars = t.Scalars
	return a, scratch, held, nil
}
