package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"simpler/hal/dtype"
)

func TestRoundTrips(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			b := Payload(s.msg)
			m, err := s.decode(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(m, s.msg) {
				t.Fatalf("round trip:\n got  %#v\n want %#v", m, s.msg)
			}
			if again := Payload(m); !bytes.Equal(again, b) {
				t.Fatalf("re-encoding differs")
			}
		})
		if c, ok := s.msg.(*Control); ok {
			seen["control/"+c.Cmd.String()] = true
		}
		if r, ok := s.msg.(*ControlReply); ok && r.Err == nil {
			seen["reply/"+r.Cmd.String()] = true
		}
	}
	for c := Command(1); c.Valid(); c++ {
		if !seen["control/"+c.String()] {
			t.Errorf("no sample of command %s", c)
		}
	}
}

// Every proper prefix of a valid encoding is refused as truncated, and any
// extra byte as trailing.
func TestTruncatedAndTrailing(t *testing.T) {
	for _, s := range samples() {
		b := Payload(s.msg)
		for n := 0; n < len(b); n++ {
			if _, err := s.decode(b[:n]); err == nil {
				t.Errorf("%s: prefix of %d/%d bytes decoded", s.name, n, len(b))
			} else if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrBounds) {
				// A cut length prefix may also read as an out-of-bounds field.
				t.Errorf("%s: prefix of %d bytes: %v is neither truncation nor bounds", s.name, n, err)
			}
		}
		if _, err := s.decode(b[:0]); !errors.Is(err, ErrTruncated) {
			t.Errorf("%s: empty payload: %v, want truncated", s.name, err)
		}
		if _, err := s.decode(append(bytes.Clone(b), 0)); !errors.Is(err, ErrTrailing) {
			t.Errorf("%s: trailing byte: %v, want ErrTrailing", s.name, err)
		}
	}
}

// mutate encodes a valid sample after changing it, and requires the
// decoder to refuse it as out of bounds with a message containing want.
func mutate[M Message](t *testing.T, name string, base M, change func(M), decode func([]byte) (Message, error), want string) {
	t.Helper()
	change(base)
	_, err := decode(Payload(base))
	if err == nil {
		t.Errorf("%s: decoded", name)
		return
	}
	if !errors.Is(err, ErrBounds) && !errors.Is(err, ErrTruncated) {
		t.Errorf("%s: %v: not ErrBounds", name, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s: error %q does not mention %q", name, err, want)
	}
}

func TestHelloBounds(t *testing.T) {
	cases := []struct {
		name   string
		change func(*Hello)
		want   string
	}{
		{"version 0", func(h *Hello) { h.Version = 0 }, "version 0"},
		{"parent 0", func(h *Hello) { h.Parent = 0 }, "parent 0"},
		{"empty platform", func(h *Hello) { h.Platform = "" }, "empty platform"},
		{"platform chars", func(h *Hello) { h.Platform = "a2 a3" }, "platform"},
		{"long platform", func(h *Hello) { h.Platform = strings.Repeat("a", MaxIdent+1) }, "exceeds its bound"},
		{"negative device", func(h *Hello) { h.DeviceIDs[1] = -1 }, "device id"},
		{"big device", func(h *Hello) { h.DeviceIDs[1] = MaxDeviceID + 1 }, "device id"},
		{"too many devices", func(h *Hello) { h.DeviceIDs = make([]int, MaxDevices+1); h.GlobalDeviceRanks = nil }, "count"},
		{"sub workers", func(h *Hello) { h.NumSubWorkers = MaxSubWorkers + 1 }, "exceeds its bound"},
		{"ranks length", func(h *Hello) { h.GlobalDeviceRanks = h.GlobalDeviceRanks[:3] }, "global device ranks"},
	}
	for _, c := range cases {
		mutate(t, c.name, sampleHello(), c.change, decHello, c.want)
	}
	// Every version's HELLO starts with its version.
	if v, ok := PeekHelloVersion(Payload(sampleHello())); !ok || v != 2 {
		t.Errorf("PeekHelloVersion = %d %v", v, ok)
	}
}

func TestBundleBounds(t *testing.T) {
	cases := []struct {
		name   string
		change func(*Bundle)
		want   string
	}{
		{"module order", func(b *Bundle) { b.Modules[0], b.Modules[1] = b.Modules[1], b.Modules[0] }, "sorted"},
		{"module dup", func(b *Bundle) { b.Modules[1].Name = b.Modules[0].Name; b.Root = b.Modules[0].Name }, "sorted"},
		{"empty module name", func(b *Bundle) { b.Modules[0].Name = "" }, "empty module name"},
		{"root missing", func(b *Bundle) { b.Root = "other.star" }, "not in the bundle"},
		{"root without bundle", func(b *Bundle) { b.Modules = nil }, "empty bundle"},
		{"bundle too big", func(b *Bundle) { b.Modules[1].Source = make([]byte, MaxBundle-len(b.Modules[0].Source)+1) }, "exceeds its bound"},
	}
	for _, c := range cases {
		mutate(t, c.name, &Control{Cmd: CmdBundle, Bundle: sampleBundle()}, func(m *Control) { c.change(&m.Bundle) }, decControl, c.want)
	}
}

func TestExportIDAndLinkBounds(t *testing.T) {
	mutate(t, "daemon 0", &Link{Kind: LinkResolve, Req: 1, ID: ExportID{Slot: 1, Secret: [16]byte{1}}, Parent: 1}, func(*Link) {}, decLink, "daemon 0")
	mutate(t, "slot 0", &Link{Kind: LinkResolve, Req: 1, ID: ExportID{Daemon: 1, Secret: [16]byte{1}}, Parent: 1}, func(*Link) {}, decLink, "slot 0")
	mutate(t, "zero secret", &Link{Kind: LinkResolve, Req: 1, ID: ExportID{Daemon: 1, Slot: 1}, Parent: 1}, func(*Link) {}, decLink, "all-zero secret")
	mutate(t, "parent 0", &Link{Kind: LinkResolve, Req: 1, ID: sampleExportID()}, func(*Link) {}, decLink, "parent 0")
	mutate(t, "request 0", &Link{Kind: LinkGrant, NBytes: 1, Access: AccessRead}, func(*Link) {}, decLink, "request 0")
	mutate(t, "grant range", &Link{Kind: LinkGrant, Req: 1, Offset: 1 << 63, NBytes: 1 << 40, Access: AccessRead}, func(*Link) {}, decLink, "ends beyond")
	mutate(t, "grant wraps", &Link{Kind: LinkGrant, Req: 1, Offset: ^uint64(0), NBytes: 2, Access: AccessRead}, func(*Link) {}, decLink, "ends beyond")
	mutate(t, "limits", &Link{Kind: LinkStart, Daemon: 1, Slot: 1, Session: 1, Limits: Limits{BufferBytes: 1, CopyBytes: MaxCopy + 1, QueuedTasks: 1, QueuedBytes: 1, LoadSteps: 1}}, func(*Link) {}, decLink, "copy limit")
	mutate(t, "unknown kind", &Link{Kind: numLinkKinds}, func(*Link) {}, decLink, "unknown link message")
	b := sampleExportID().Bytes()
	b[0] = 2
	if _, err := DecodeExportID(b); !errors.Is(err, ErrBounds) {
		t.Errorf("export id version 2: %v", err)
	}
	if len(sampleExportID().Bytes()) != ExportIDSize || ExportIDSize > MaxExportToken {
		t.Errorf("export id of %d bytes, bound %d", len(sampleExportID().Bytes()), MaxExportToken)
	}
}

func TestHelloReplyBounds(t *testing.T) {
	base := func() *HelloReply {
		return &HelloReply{Session: 1, Worker: 2, Version: 1, Err: &ErrorBody{Kind: "RuntimeError", Message: "no"}}
	}
	mutate(t, "refused without error", base(), func(r *HelloReply) { r.Err = nil }, decHelloReply, "empty error kind")
	mutate(t, "bad kind", base(), func(r *HelloReply) { r.Err.Kind = "Runtime Error" }, decHelloReply, "error kind")
	mutate(t, "long message", base(), func(r *HelloReply) { r.Err.Message = strings.Repeat("x", MaxMessage+1) }, decHelloReply, "exceeds its bound")
	mutate(t, "session 0", base(), func(r *HelloReply) { r.Session = 0 }, decHelloReply, "session 0")
	mutate(t, "version 0", base(), func(r *HelloReply) { r.Version = 0 }, decHelloReply, "version 0")
	b := Payload(&HelloReply{Accepted: true, Session: 1, Version: 1})
	b[0] = 2
	if _, err := DecodeHelloReply(b); !errors.Is(err, ErrBounds) {
		t.Errorf("bool 2: %v", err)
	}
}

func TestJoinBounds(t *testing.T) {
	cases := []struct {
		name   string
		change func(*Join)
		want   string
	}{
		{"version 0", func(j *Join) { j.Version = 0 }, "version 0"},
		{"rank", func(j *Join) { j.Rank = MaxGroupRanks }, "exceeds its bound"},
		{"empty host", func(j *Join) { j.Host.Name = "" }, "empty host name"},
		{"host chars", func(j *Join) { j.Host.Name = "a b" }, "host name"},
		{"host control char", func(j *Join) { j.Host.Name = "a\x7f" }, "host name"},
		{"long host", func(j *Join) { j.Host.Name = strings.Repeat("h", MaxHostName+1) }, "exceeds its bound"},
		{"empty platform", func(j *Join) { j.Platform = "" }, "empty platform"},
		{"platform chars", func(j *Join) { j.Platform = "a2/a3" }, "platform"},
		{"big device", func(j *Join) { j.DeviceIDs[0] = MaxDeviceID + 1 }, "device id"},
		{"too many devices", func(j *Join) { j.DeviceIDs = make([]int, MaxDevices+1) }, "count"},
	}
	for _, c := range cases {
		mutate(t, c.name, sampleJoin(), c.change, decJoin, c.want)
	}
	r := &HelloReply{Accepted: true, Session: 1, Version: 3, CommProfile: "sim", Host: sampleHost()}
	mutate(t, "reply host", r, func(r *HelloReply) { r.Host.Name = "" }, decHelloReply, "empty host name")
}

// A rank's proof covers both nonces and its rank, and is no HELLO proof.
func TestJoinProof(t *testing.T) {
	token, ch, n := []byte("correct horse battery staple"), nonce(1), nonce(2)
	p := ProveJoin(token, ch, n, 3)
	if !VerifyJoin(token, ch, n, 3, p) {
		t.Fatal("VerifyJoin refused a good proof")
	}
	for name, ok := range map[string]bool{
		"wrong token":     VerifyJoin([]byte("wrong"), ch, n, 3, p),
		"other challenge": VerifyJoin(token, nonce(3), n, 3, p),
		"other nonce":     VerifyJoin(token, ch, nonce(3), 3, p),
		"other rank":      VerifyJoin(token, ch, n, 4, p),
		"nonces swapped":  VerifyJoin(token, n, ch, 3, p),
	} {
		if ok {
			t.Errorf("VerifyJoin accepted a proof with the %s", name)
		}
	}
	// Neither proof stands for the other, whatever the ids.
	for s := uint64(0); s < 4; s++ {
		if Prove(token, ch, s, 3) == p || Verify(token, ch, s, 3, p) {
			t.Error("a JOIN proof passes as a HELLO proof")
		}
	}
	j := sampleJoin()
	j.Proof = p
	if bytes.Contains(Payload(j), token) {
		t.Error("the token crossed the wire")
	}
}

func TestTaskBounds(t *testing.T) {
	cases := []struct {
		name   string
		change func(*Task)
		want   string
	}{
		{"digest prefix", func(x *Task) { x.Digest = "md5:abc" }, "digest"},
		{"digest empty", func(x *Task) { x.Digest = "sha256:" }, "digest"},
		{"digest space", func(x *Task) { x.Digest = "sha256:a b" }, "printable"},
		{"digest long", func(x *Task) { x.Digest = "sha256:" + strings.Repeat("a", MaxDigest) }, "exceeds its bound"},
		{"block dim", func(x *Task) { x.Config.BlockDim = MaxBlockDim + 1 }, "exceeds its bound"},
		{"tag", func(x *Task) { x.Tensors[1].Tag = 5 }, "unknown tag"},
		{"dtype 0", func(x *Task) { x.Tensors[1].DType = dtype.Invalid }, "unknown dtype"},
		{"dtype 200", func(x *Task) { x.Tensors[1].DType = 200 }, "unknown dtype"},
		{"dims", func(x *Task) { x.Tensors[1].Shape = make([]int, MaxDims+1) }, "count"},
		{"dim", func(x *Task) { x.Tensors[1].Shape = []int{MaxDim + 1} }, "exceeds its bound"},
		{"tensor bytes", func(x *Task) { x.Tensors[1].Shape = []int{MaxDim, 2} }, "exceeds"},
		{"buffer id 0", func(x *Task) { x.Tensors[1].Remote.Buffer.ID = 0 }, "non-zero"},
		{"generation 0", func(x *Task) { x.Tensors[1].Remote.Buffer.Generation = 0 }, "non-zero"},
		{"access 0", func(x *Task) { x.Tensors[1].Remote.Access = 0 }, "access"},
		{"access bits", func(x *Task) { x.Tensors[1].Remote.Access = 4 | AccessWrite }, "access"},
		{"access vs tag", func(x *Task) { x.Tensors[1].Remote.Access = AccessRead }, "needs write"},
		{"inout needs both", func(x *Task) { x.Tensors[2].Remote.Access = AccessWrite }, "needs readwrite"},
		{"offset", func(x *Task) { x.Tensors[1].Remote.Offset = MaxBufferBytes }, "offset"},
		{"inline output", func(x *Task) { x.Tensors[0].Tag = TagOutput }, "INPUT"},
		{"inline size", func(x *Task) { x.Tensors[0].Inline = x.Tensors[0].Inline[:15] }, "inline bytes"},
		{"inline bound", func(x *Task) {
			x.Tensors[0].Shape = []int{MaxInline + 1}
			x.Tensors[0].DType = dtype.UInt8
			x.Tensors[0].Inline = make([]byte, MaxInline+1)
		}, "exceeds its bound"},
		{"inline total", func(x *Task) {
			x.Tensors = nil
			for range MaxInlineTotal/MaxInline + 1 {
				x.Tensors = append(x.Tensors, TensorArg{Tag: TagInput, DType: dtype.UInt8, Shape: []int{MaxInline}, Inline: make([]byte, MaxInline)})
			}
		}, "inline bytes of the task"},
		{"tensors", func(x *Task) {
			x.Tensors = make([]TensorArg, MaxTensors+1)
			for i := range x.Tensors {
				x.Tensors[i] = TensorArg{DType: dtype.UInt8, Inline: []byte{1}}
			}
		}, "count"},
		{"scalars", func(x *Task) { x.Scalars = make([]uint64, MaxScalars+1) }, "count"},
	}
	for _, c := range cases {
		mutate(t, c.name, sampleTask(), c.change, decTask, c.want)
	}
	// The location byte: 1 remote or 2 inline.
	b := Payload(&Task{Digest: "sha256:x", Tensors: []TensorArg{{DType: dtype.UInt8, Inline: []byte{1}}}})
	i := bytes.LastIndexByte(b[:len(b)-4-4-1], whereInline) // before the blob length, byte, scalar count
	b[i] = 3
	if _, err := DecodeTask(b); !errors.Is(err, ErrBounds) || !strings.Contains(err.Error(), "location") {
		t.Errorf("location 3: %v", err)
	}
}

func TestCompletionBounds(t *testing.T) {
	base := func() *Completion {
		return &Completion{Seq: 1, Err: &TaskFailure{Kind: "ValueError", Message: "m", Path: "p", TaskID: 1, Callable: "c"}}
	}
	mutate(t, "seq 0", base(), func(c *Completion) { c.Seq = 0 }, decCompletion, "sequence 0")
	mutate(t, "kind", base(), func(c *Completion) { c.Err.Kind = "" }, decCompletion, "empty error kind")
	mutate(t, "task id", base(), func(c *Completion) { c.Err.TaskID = MaxTaskID + 1 }, decCompletion, "exceeds its bound")
	mutate(t, "path", base(), func(c *Completion) { c.Err.Path = strings.Repeat("p", MaxName+1) }, decCompletion, "exceeds its bound")
	b := Payload(&Completion{Seq: 1})
	b[8] = 2
	if _, err := DecodeCompletion(b); !errors.Is(err, ErrBounds) || !strings.Contains(err.Error(), "status") {
		t.Errorf("status 2: %v", err)
	}
}

func TestControlBounds(t *testing.T) {
	buf := BufferRef{ID: 1, Generation: 1}
	cases := []struct {
		name string
		c    Control
		want string
	}{
		{"unknown command", Control{Cmd: numCommands}, "unknown command"},
		{"command 0", Control{Cmd: 0}, "unknown command"},
		{"register digest", Control{Cmd: CmdRegister, Digest: "abc", Module: "m", Name: "n"}, "digest"},
		{"register module", Control{Cmd: CmdRegister, Digest: "sha256:a", Name: "n"}, "empty module name"},
		{"register name", Control{Cmd: CmdRegister, Digest: "sha256:a", Module: "m"}, "empty function name"},
		{"malloc 0", Control{Cmd: CmdMalloc}, "allocation of 0"},
		{"malloc huge", Control{Cmd: CmdMalloc, NBytes: MaxBufferBytes + 1}, "allocation"},
		{"free stale", Control{Cmd: CmdFree, Buffer: BufferRef{ID: 1}}, "non-zero"},
		{"copy empty", Control{Cmd: CmdCopyTo, Buffer: buf}, "empty copy"},
		{"copy huge", Control{Cmd: CmdCopyTo, Buffer: buf, Data: make([]byte, MaxCopy+1)}, "exceeds its bound"},
		{"copy range", Control{Cmd: CmdCopyTo, Buffer: buf, Offset: MaxBufferBytes, Data: []byte{1}}, "ends beyond"},
		{"copy-from 0", Control{Cmd: CmdCopyFrom, Buffer: buf}, "copy of 0"},
		{"copy-from huge", Control{Cmd: CmdCopyFrom, Buffer: buf, NBytes: MaxCopy + 1}, "copy of"},
		{"copy-from range", Control{Cmd: CmdCopyFrom, Buffer: buf, Offset: 1 << 63, NBytes: 1}, "ends beyond"},
		{"export access 0", Control{Cmd: CmdExport, Buffer: buf, NBytes: 1}, "access"},
		{"export access bits", Control{Cmd: CmdExport, Buffer: buf, NBytes: 1, Access: 8}, "access"},
		{"export range", Control{Cmd: CmdExport, Buffer: buf, Offset: 1, NBytes: MaxBufferBytes, Access: AccessRead}, "ends beyond"},
		{"import empty token", Control{Cmd: CmdImport, Access: AccessRead}, "empty export token"},
		{"import token size", Control{Cmd: CmdImport, Token: make([]byte, MaxExportToken+1)}, "exceeds its bound"},
		{"import access bits", Control{Cmd: CmdImport, Token: []byte{1}, Access: 4}, "access"},
		{"domain id 0", Control{Cmd: CmdCommit, Domain: Domain{Generation: 1}}, "non-zero"},
		{"domain gen 0", Control{Cmd: CmdAbort, Domain: Domain{ID: 1}}, "non-zero"},
		{"domain size 0", Control{Cmd: CmdCommInit, Domain: Domain{ID: 1, Generation: 1, Ranks: []DomainRank{{}}}}, "domain size 0"},
		{"domain size big", Control{Cmd: CmdCommInit, Domain: Domain{ID: 1, Generation: 1, Size: MaxRanks + 1, Ranks: []DomainRank{{}}}}, "domain size"},
		{"no ranks", Control{Cmd: CmdCommInit, Domain: Domain{ID: 1, Generation: 1, Size: 2}}, "no ranks"},
		{"rank order", Control{Cmd: CmdCommInit, Domain: Domain{ID: 1, Generation: 1, Size: 4, Ranks: []DomainRank{{Rank: 2}, {Rank: 1}}}}, "sorted"},
		{"rank dup", Control{Cmd: CmdCommInit, Domain: Domain{ID: 1, Generation: 1, Size: 4, Ranks: []DomainRank{{Rank: 2}, {Rank: 2, Worker: 1}}}}, "sorted"},
		{"rank size", Control{Cmd: CmdCommInit, Domain: Domain{ID: 1, Generation: 1, Size: 2, Ranks: []DomainRank{{Rank: 2}}}}, "rank 2 of a domain of 2"},
		{"rank worker", Control{Cmd: CmdCommInit, Domain: Domain{ID: 1, Generation: 1, Size: 2, Ranks: []DomainRank{{Worker: MaxDevices}}}}, "local worker"},
		{"window 0", Control{Cmd: CmdPrepare, Domain: Domain{ID: 1, Generation: 1, Size: 1, Ranks: []DomainRank{{}}}}, "window of 0"},
		{"window big", Control{Cmd: CmdPrepare, Domain: Domain{ID: 1, Generation: 1, Size: 1, Ranks: []DomainRank{{}}, WindowSize: MaxWindow + 1}}, "window"},
		{"reattach window 0", Control{Cmd: CmdReattach, Domain: Domain{ID: 1, Generation: 1, Size: 1, Ranks: []DomainRank{{}}}}, "window of 0"},
		{"reattach no ranks", Control{Cmd: CmdReattach, Domain: Domain{ID: 1, Generation: 1, Size: 2, WindowSize: 1}}, "no ranks"},
		{"table big", Control{Cmd: CmdImportTable, Domain: Domain{ID: 1, Generation: 1, Table: make([]byte, MaxDomainTable+1)}}, "exceeds its bound"},
	}
	for _, c := range cases {
		mutate(t, c.name, &c.c, func(*Control) {}, decControl, c.want)
	}
}

func TestControlReplyBounds(t *testing.T) {
	cases := []struct {
		name string
		r    ControlReply
		want string
	}{
		{"seq 0", ControlReply{Cmd: CmdFree}, "sequence 0"},
		{"command", ControlReply{Seq: 1, Cmd: 0}, "unknown command"},
		{"malloc ref", ControlReply{Seq: 1, Cmd: CmdMalloc}, "non-zero"},
		{"copy-from empty", ControlReply{Seq: 1, Cmd: CmdCopyFrom}, "empty copy"},
		{"copy-from huge", ControlReply{Seq: 1, Cmd: CmdCopyFrom, Data: make([]byte, MaxCopy+1)}, "exceeds its bound"},
		{"export empty", ControlReply{Seq: 1, Cmd: CmdExport}, "empty export token"},
		{"export huge", ControlReply{Seq: 1, Cmd: CmdExport, Data: make([]byte, MaxExportToken+1)}, "exceeds its bound"},
		{"prepare huge", ControlReply{Seq: 1, Cmd: CmdPrepare, Data: make([]byte, MaxDomainTable+1)}, "exceeds its bound"},
		{"error kind", ControlReply{Seq: 1, Cmd: CmdFree, Err: &ErrorBody{Kind: "", Message: "x"}}, "empty error kind"},
	}
	for _, c := range cases {
		mutate(t, c.name, &c.r, func(*ControlReply) {}, decControlReply, c.want)
	}
	b := Payload(&ControlReply{Seq: 1, Cmd: CmdFree})
	b[9] = 7
	if _, err := DecodeControlReply(b); !errors.Is(err, ErrBounds) {
		t.Errorf("status 7: %v", err)
	}
}

func TestSmallBounds(t *testing.T) {
	mutate(t, "health reply seq 0", &HealthReply{}, func(*HealthReply) {}, decHealthReply, "sequence 0")
	mutate(t, "spans", &Completion{Seq: 1, Spans: make([]Span, MaxSpans+1)}, func(*Completion) {}, decCompletion, "exceed their bound")
	mutate(t, "span name", &Completion{Seq: 1, Spans: []Span{{Lane: strings.Repeat("l", MaxSpanName+1)}}}, func(*Completion) {}, decCompletion, "exceeds its bound")
	mutate(t, "span time", &Completion{Seq: 1, Spans: []Span{{Dur: -1}}}, func(*Completion) {}, decCompletion, "outside 0..")
	mutate(t, "races", &Completion{Seq: 1}, func(c *Completion) { c.Race = RaceCount{Checked: true, Races: MaxRaces + 1} }, decCompletion, "exceed their bound")
	mutate(t, "races unchecked", &Completion{Seq: 1}, func(c *Completion) { c.Race = RaceCount{Races: 1} }, decCompletion, "does not check")
	mutate(t, "output line", &Output{Stream: StreamStdout, Line: make([]byte, MaxOutputLine+1)}, func(*Output) {}, decOutput, "exceeds its bound")
	mutate(t, "output stream", &Output{Stream: 3}, func(*Output) {}, decOutput, "neither stdout")
	mutate(t, "shutdown reason", &Shutdown{Reason: strings.Repeat("r", MaxReason+1)}, func(*Shutdown) {}, decShutdown, "exceeds its bound")
	if _, err := DecodeChallenge(make([]byte, 31)); !errors.Is(err, ErrTruncated) {
		t.Errorf("short challenge: %v", err)
	}
	if _, err := DecodeChallenge(make([]byte, 33)); !errors.Is(err, ErrTrailing) {
		t.Errorf("long challenge: %v", err)
	}
}

// Each type's payload bound holds its largest valid message: a frame
// header never refuses a message its decoder would accept.
func TestMaximalMessagesFit(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	kind := strings.Repeat("K", MaxIdent)
	digest := DigestPrefix + long(MaxDigest-len(DigestPrefix))
	maxTask := &Task{Digest: digest, Config: CallConfig{MaxBlockDim, MaxBlockDim, true}, Scalars: make([]uint64, MaxScalars)}
	for i := range MaxTensors {
		shape := make([]int, MaxDims)
		for j := range shape {
			shape[j] = 1
		}
		a := TensorArg{Tag: TagInOut, DType: dtype.UInt8, Shape: shape, Remote: &RemoteRef{Owner: 1, Buffer: BufferRef{1, 1}, Access: AccessReadWrite}}
		if i < MaxInlineTotal/MaxInline {
			shape[0] = MaxInline
			a = TensorArg{Tag: TagInput, DType: dtype.UInt8, Shape: shape, Inline: make([]byte, MaxInline)}
		}
		maxTask.Tensors = append(maxTask.Tensors, a)
	}
	hello := &Hello{Version: 1, Parent: 1, Platform: long(MaxIdent), DeviceIDs: make([]int, MaxDevices), NumSubWorkers: MaxSubWorkers,
		CommProfile: long(MaxIdent), GlobalDeviceRanks: make([]int, MaxDevices)}
	var bundle Bundle
	for i := range MaxModules {
		name := long(MaxName-4) + string(rune('A'+i/(26*26)%26)) + string(rune('A'+i/26%26)) + string(rune('A'+i%26)) + "z"
		bundle.Modules = append(bundle.Modules, Module{Name: name})
	}
	bundle.Modules[len(bundle.Modules)-1].Source = make([]byte, MaxBundle)
	bundle.Root = bundle.Modules[0].Name
	ranks := make([]DomainRank, MaxRanks)
	for i := range ranks {
		ranks[i] = DomainRank{Rank: uint32(i)}
	}
	cases := []struct {
		typ Type
		msg Message
		dec func([]byte) (Message, error)
	}{
		{TypeChallenge, &Challenge{}, decChallenge},
		{TypeHello, hello, decHello},
		{TypeHelloReply, &HelloReply{Session: 1, Version: 1, CommProfile: long(MaxIdent), Err: &ErrorBody{kind, long(MaxMessage)}}, decHelloReply},
		{TypeTask, maxTask, decTask},
		{TypeCompletion, &Completion{Seq: 1, Err: &TaskFailure{kind, long(MaxMessage), long(MaxName), MaxTaskID, long(MaxName), true}}, decCompletion},
		{TypeCompletion, &Completion{Seq: 1, Err: &TaskFailure{kind, long(MaxMessage), long(MaxName), MaxTaskID, long(MaxName), true}, Took: MaxSpanNanos, Spans: maxSpans(), Race: RaceCount{true, MaxRaces}}, decCompletion},
		{TypeControl, &Control{Cmd: CmdCopyTo, Buffer: BufferRef{1, 1}, Data: make([]byte, MaxCopy)}, decControl},
		{TypeControl, &Control{Cmd: CmdRegister, Digest: digest, Module: long(MaxName), Name: long(MaxName)}, decControl},
		{TypeControl, &Control{Cmd: CmdBundle, Bundle: bundle}, decControl},
		{TypeControl, &Control{Cmd: CmdPrepare, Domain: Domain{1, 1, MaxRanks, ranks, MaxWindow, make([]byte, MaxDomainTable)}}, decControl},
		{TypeControlReply, &ControlReply{Seq: 1, Cmd: CmdCopyFrom, Data: make([]byte, MaxCopy)}, decControlReply},
		{TypeControlReply, &ControlReply{Seq: 1, Cmd: CmdCopyFrom, Err: &ErrorBody{kind, long(MaxMessage)}}, decControlReply},
		{TypeHealth, &Health{}, decHealth},
		{TypeHealthReply, &HealthReply{Seq: 1}, decHealthReply},
		{TypeShutdown, &Shutdown{Reason: long(MaxReason)}, decShutdown},
		{TypeOutput, &Output{Stream: StreamStderr, Line: make([]byte, MaxOutputLine)}, decOutput},
		{TypeJoin, &Join{Version: 1, Rank: MaxGroupRanks - 1, Host: Host{Name: long(MaxHostName)}, Platform: long(MaxIdent), DeviceIDs: make([]int, MaxDevices)}, decJoin},
		{TypeHelloReply, &HelloReply{Accepted: true, Session: 1, Version: 1, CommProfile: long(MaxIdent), Host: Host{Name: long(MaxHostName)}}, decHelloReply},
	}
	for _, c := range cases {
		b := Payload(c.msg)
		if _, err := c.dec(b); err != nil {
			t.Errorf("%s: maximal message refused: %v", c.typ, err)
		}
		if len(b) > c.typ.MaxPayload() {
			t.Errorf("%s: maximal message of %d bytes exceeds the type's bound %d", c.typ, len(b), c.typ.MaxPayload())
		}
	}
	start := &Link{Kind: LinkStart, Daemon: 1, Slot: 1, Session: 1, Limits: sampleLimits(), Hello: Payload(hello)}
	grant := &Link{Kind: LinkGrant, Req: 1, Err: &ErrorBody{kind, long(MaxMessage)}}
	for _, m := range []*Link{start, grant} {
		if b := Payload(m); len(b) > MaxLink {
			t.Errorf("link message %d of %d bytes exceeds MaxLink %d", m.Kind, len(b), MaxLink)
		}
	}
}

func TestProof(t *testing.T) {
	token, n, session, parent := []byte("correct horse battery staple"), nonce(9), uint64(0xfeedface), uint64(77)
	p := Prove(token, n, session, parent)
	if p != Prove(token, n, session, parent) {
		t.Fatal("Prove is not deterministic")
	}
	if !Verify(token, n, session, parent, p) {
		t.Fatal("Verify refused a good proof")
	}
	if Verify([]byte("wrong"), n, session, parent, p) {
		t.Error("Verify accepted the wrong token")
	}
	if Verify(token, nonce(10), session, parent, p) {
		t.Error("Verify accepted another nonce")
	}
	if Verify(token, n, session+1, parent, p) {
		t.Error("Verify accepted another session")
	}
	if Verify(token, n, session, parent+1, p) {
		t.Error("Verify accepted another parent")
	}
	q := p
	q[31] ^= 1
	if Verify(token, n, session, parent, q) {
		t.Error("Verify accepted a corrupted proof")
	}
	// The token never appears in a HELLO.
	h := sampleHello()
	h.Proof = p
	if bytes.Contains(Payload(h), token) {
		t.Error("the token crossed the wire")
	}
}

func TestErrorText(t *testing.T) {
	f := &TaskFailure{Kind: "ValueError", Message: "boom", Path: "chip_worker 0 (device 0)", TaskID: 3, Callable: "k"}
	if got, want := f.Error(), `ValueError: chip_worker 0 (device 0): task 3 running "k" failed: boom`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := (&TaskFailure{Kind: "KeyError", Message: "x"}).Error(); got != "KeyError: x" {
		t.Errorf("got %q", got)
	}
	if got := (&ErrorBody{Kind: "RuntimeError", Message: "y"}).Error(); got != "RuntimeError: y" {
		t.Errorf("got %q", got)
	}
}

func TestWriteBulkMatchesWriteFrame(t *testing.T) {
	data := bytes.Repeat([]byte{7, 1, 3}, 100000)
	h := Header{Version: ProtocolVersion, Type: TypeControl, Session: 5, Worker: 1, Seq: 9}
	var a, b bytes.Buffer
	if err := WriteFrame(&a, h, Payload(&Control{Cmd: CmdCopyTo, Buffer: BufferRef{ID: 1, Generation: 1}, Offset: 8, Data: data})); err != nil {
		t.Fatal(err)
	}
	if err := WriteBulk(&b, h, &Control{Cmd: CmdCopyTo, Buffer: BufferRef{ID: 1, Generation: 1}, Offset: 8}, data); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("a bulk frame differs from the same frame written whole")
	}
	// WriteMessage is either, by whether it is given bulk data.
	var c, d bytes.Buffer
	WriteMessage(&c, h, &Control{Cmd: CmdCopyTo, Buffer: BufferRef{ID: 1, Generation: 1}, Offset: 8}, data)
	WriteMessage(&d, h, &Control{Cmd: CmdCopyTo, Buffer: BufferRef{ID: 1, Generation: 1}, Offset: 8, Data: data}, nil)
	if !bytes.Equal(c.Bytes(), a.Bytes()) || !bytes.Equal(d.Bytes(), a.Bytes()) {
		t.Fatal("WriteMessage differs from WriteBulk or WriteFrame")
	}
	buf := make([]byte, 0, len(data)+64)
	_, p, err := ReadFrameInto(&b, 0, buf)
	if err != nil || &p[0] != &buf[:1][0] {
		t.Fatalf("ReadFrameInto did not read into the buffer: %v", err)
	}
	if c, err := DecodeControl(p); err != nil || !bytes.Equal(c.Data, data) {
		t.Fatalf("decode: %v", err)
	}
	if err := WriteBulk(&b, h, &Control{Cmd: CmdCopyFrom, Buffer: BufferRef{ID: 1, Generation: 1}, NBytes: 1 << 40}, data); err == nil {
		t.Fatal("a message that does not end with an empty blob was accepted")
	}
}

func TestBulkPrefixes(t *testing.T) {
	data := []byte{1, 2, 3, 4, 5}
	p := Payload(&Control{Cmd: CmdCopyTo, Buffer: BufferRef{ID: 3, Generation: 2}, Offset: 7, Data: data})
	buf, off, n, ok := DecodeCopyToPrefix(p[:CopyToPrefixSize], len(p))
	if !ok || buf != (BufferRef{ID: 3, Generation: 2}) || off != 7 || n != len(data) {
		t.Fatalf("COPY_TO prefix: %v %d %d %v", buf, off, n, ok)
	}
	if _, _, _, ok := DecodeCopyToPrefix(p[:CopyToPrefixSize], len(p)+1); ok {
		t.Error("a prefix whose length disagrees with the frame was accepted")
	}
	r := Payload(&ControlReply{Seq: 11, Cmd: CmdCopyFrom, Data: data})
	seq, n, ok := DecodeCopyFromReplyPrefix(r[:CopyFromReplyPrefixSize], len(r))
	if !ok || seq != 11 || n != len(data) {
		t.Fatalf("COPY_FROM reply prefix: %d %d %v", seq, n, ok)
	}
	e := Payload(&ControlReply{Seq: 11, Cmd: CmdCopyFrom, Err: &ErrorBody{Kind: "ValueError", Message: "no"}})
	if _, _, ok := DecodeCopyFromReplyPrefix(e[:CopyFromReplyPrefixSize], len(e)); ok {
		t.Error("an error reply was taken for data")
	}
}

// maxSpans is MaxSpans spans with maximal names.
func maxSpans() []Span {
	s := make([]Span, MaxSpans)
	for i := range s {
		s[i] = Span{Lane: strings.Repeat("l", MaxSpanName), Callable: strings.Repeat("c", MaxSpanName), Start: MaxSpanNanos, Dur: MaxSpanNanos}
	}
	return s
}

// A node process's OpRaceCount reply: what Encode wrote reads back, and
// a count from a node that does not check, or a trailing byte, is refused.
func TestRaceCountReply(t *testing.T) {
	var e Encoder
	RaceCount{Checked: true, Races: 7}.Encode(&e)
	if r, err := DecodeRaceCount(NewDecoder(e.Bytes())); err != nil || r != (RaceCount{true, 7}) {
		t.Errorf("round trip: %+v, %v", r, err)
	}
	var bad Encoder
	RaceCount{Races: 1}.Encode(&bad)
	if _, err := DecodeRaceCount(NewDecoder(bad.Bytes())); !errors.Is(err, ErrBounds) {
		t.Errorf("unchecked with races: %v", err)
	}
	if _, err := DecodeRaceCount(NewDecoder(append(e.Bytes(), 0))); err == nil {
		t.Errorf("trailing byte accepted")
	}
}
