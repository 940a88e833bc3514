package remote

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"simpler/engine"
	"simpler/engine/global"
	"simpler/wire"
)

// FuzzSessionFrames feeds a remote session the byte stream a parent
// could send after the handshake: every frame is read (a large COPY_TO
// straight into its buffer, through readBulk) and executed on a real
// level-3 node, the way the session's reader would. Whatever the bytes, it
// must not panic, and what they make is bounded by the session's limits and
// freed after each input.
func FuzzSessionFrames(f *testing.F) {
	for _, seed := range sessionSeeds() {
		f.Add(seed)
	}
	var once sync.Once
	var s *session
	f.Cleanup(func() {
		if s != nil {
			s.close()
		}
	})
	f.Fuzz(func(t *testing.T, stream []byte) {
		once.Do(func() { s = fuzzSession(t) })
		s.in = bytes.NewReader(stream)
		for {
			fr, err := s.readFrame()
			if err != nil {
				break
			}
			switch fr.h.Type {
			case wire.TypeControl:
				s.control(fr)
			case wire.TypeTask:
				s.task(fr)
			}
			fr.done()
		}
		s.reset()
	})
}

// fuzzSession is a session on a one-chip node whose replies are discarded
// and whose daemon refuses every import: small limits, and a bulk
// threshold low enough for fuzz inputs to reach readBulk.
func fuzzSession(t *testing.T) *session {
	l, theirs, err := linkPair()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := fileLink(theirs)
	if err != nil {
		t.Fatal(err)
	}
	go refuseImports(peer)
	start := wire.Link{Kind: wire.LinkStart, Daemon: 1, Slot: 1, Session: 1,
		Limits: wire.Limits{BufferBytes: 1 << 20, CopyBytes: 1 << 16, QueuedTasks: 4, QueuedBytes: 1 << 16, LoadSteps: 1000}}
	s := newSession(discardConn{}, l, start, func(wire.Bundle, uint64) (engine.Resolver, error) { return sessionResolver{}, nil }, nil)
	s.bigFrame = 64
	if err := s.accept(wire.Hello{Version: wire.ProtocolVersion, Parent: 1, Platform: "a2a3sim", DeviceIDs: []int{0}, CommProfile: "sim"}); err != nil {
		t.Fatal(err)
	}
	return s
}

// refuseImports answers every resolve with a refusal, until the link closes.
func refuseImports(l *link) {
	defer l.close()
	buf, oob := linkBuffers()
	for {
		m, fd, err := l.recv(buf, oob)
		closeFD(fd)
		if err != nil {
			return
		}
		if m.Kind == wire.LinkResolve {
			l.send(grantError(m.Req, engine.Errorf(engine.ValueError, "IMPORT: no such export")), -1)
		}
	}
}

// reset frees what one input made: buffers, exports, global domains.
func (s *session) reset() {
	s.mu.Lock()
	refs := make([]wire.BufferRef, 0, len(s.bufs))
	owned := map[wire.BufferRef]bool{}
	for ref, b := range s.bufs {
		refs = append(refs, ref)
		owned[ref] = b.owned
	}
	s.mu.Unlock()
	for _, ref := range refs {
		s.drop(ref, owned[ref])
	}
	global.ReleaseHosted(s.inner)
	s.mu.Lock()
	s.mem.held, s.windows, s.exports, s.resolve = 0, map[uint64]uint64{}, map[[16]byte]export{}, nil
	s.mu.Unlock()
}

// sessionSeeds are streams of valid frames: commands of every kind and a
// task, plus a COPY_TO above the bulk threshold.
func sessionSeeds() [][]byte {
	buf := wire.BufferRef{ID: 1, Generation: 1}
	cmds := []*wire.Control{
		{Cmd: wire.CmdBundle},
		{Cmd: wire.CmdMalloc, NBytes: 4096},
		{Cmd: wire.CmdCopyTo, Buffer: buf, Offset: 8, Data: []byte("hello")},
		{Cmd: wire.CmdCopyTo, Buffer: buf, Offset: 0, Data: make([]byte, 200)},
		{Cmd: wire.CmdCopyFrom, Buffer: buf, Offset: 8, NBytes: 5},
		{Cmd: wire.CmdExport, Buffer: buf, Offset: 0, NBytes: 64, Access: wire.AccessRead},
		{Cmd: wire.CmdImport, Token: wire.ExportID{Daemon: 1, Slot: 1, Secret: [16]byte{1}}.Bytes()},
		{Cmd: wire.CmdRegister, Digest: procKernel{"add1"}.Digest(), Module: "m", Name: "add1"},
		{Cmd: wire.CmdPrepare, Domain: wire.Domain{ID: 1, Generation: 1, Size: 1, Ranks: []wire.DomainRank{{}}, WindowSize: 4096}},
		{Cmd: wire.CmdFree, Buffer: buf},
	}
	var all bytes.Buffer
	var seeds [][]byte
	for i, c := range cmds {
		var one bytes.Buffer
		for _, w := range []*bytes.Buffer{&one, &all} {
			wire.WriteFrame(w, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeControl, Session: 1, Seq: uint64(i + 1)}, wire.Payload(c))
		}
		seeds = append(seeds, one.Bytes())
	}
	task := &wire.Task{Digest: procKernel{"add1"}.Digest(), Tensors: []wire.TensorArg{{Tag: wire.TagInOut, DType: 7, Shape: []int{1},
		Remote: &wire.RemoteRef{Buffer: buf, Access: wire.AccessReadWrite}}}}
	wire.WriteFrame(&all, wire.Header{Version: wire.ProtocolVersion, Type: wire.TypeTask, Session: 1, Seq: 99}, wire.Payload(task))
	return append(seeds, all.Bytes())
}

// discardConn is a connection whose writes go nowhere.
type discardConn struct{}

func (discardConn) Read([]byte) (int, error)         { return 0, net.ErrClosed }
func (discardConn) Write(b []byte) (int, error)      { return len(b), nil }
func (discardConn) Close() error                     { return nil }
func (discardConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (discardConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (discardConn) SetDeadline(time.Time) error      { return nil }
func (discardConn) SetReadDeadline(time.Time) error  { return nil }
func (discardConn) SetWriteDeadline(time.Time) error { return nil }
