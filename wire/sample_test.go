package wire

import (
	"bytes"
	"testing"

	"simpler/hal/dtype"
)

// A sample is a valid message with its decoder, for round trips, rejection
// tests and fuzz seeds.
type sample struct {
	name   string
	msg    Message
	decode func([]byte) (Message, error)
}

func dec[M any, P interface {
	*M
	Message
}](f func([]byte) (M, error)) func([]byte) (Message, error) {
	return func(b []byte) (Message, error) {
		m, err := f(b)
		if err != nil {
			return nil, err
		}
		return P(&m), nil
	}
}

var (
	decChallenge    = dec(DecodeChallenge)
	decHello        = dec(DecodeHello)
	decHelloReply   = dec(DecodeHelloReply)
	decTask         = dec(DecodeTask)
	decCompletion   = dec(DecodeCompletion)
	decControl      = dec(DecodeControl)
	decControlReply = dec(DecodeControlReply)
	decHealth       = dec(DecodeHealth)
	decHealthReply  = dec(DecodeHealthReply)
	decShutdown     = dec(DecodeShutdown)
	decOutput       = dec(DecodeOutput)
	decJoin         = dec(DecodeJoin)
	decExportID     = dec(DecodeExportID)
	decLink         = dec(DecodeLink)
)

func nonce(b byte) (n [32]byte) {
	for i := range n {
		n[i] = b + byte(i)
	}
	return n
}

func sampleHello() *Hello {
	return &Hello{
		Version:           2,
		Parent:            0xc1a55,
		Platform:          "a2a3sim",
		DeviceIDs:         []int{0, 1, 2, 3},
		NumSubWorkers:     2,
		CommProfile:       "sim",
		GlobalDeviceRanks: []int{4, 5, 6, 7},
		Proof:             Prove([]byte("secret"), nonce(7), 0x1234, 0xc1a55),
	}
}

func sampleHost() Host {
	return Host{Name: "node-7.cluster", Key: nonce(40)}
}

func sampleJoin() *Join {
	return &Join{
		Version:   3,
		Rank:      2,
		Nonce:     nonce(20),
		Proof:     ProveJoin([]byte("secret"), nonce(7), nonce(20), 2),
		Host:      sampleHost(),
		PID:       4242,
		Platform:  "a2a3sim",
		DeviceIDs: []int{0, 1},
	}
}

func sampleBundle() Bundle {
	return Bundle{Root: "main.star", Modules: []Module{
		{Name: "lib/kernels.star", Source: []byte("def k(chip, args):\n    pass\n")},
		{Name: "main.star", Source: []byte("load(\"lib/kernels.star\", \"k\")\n")},
	}}
}

func sampleExportID() ExportID {
	return ExportID{Daemon: 0xd43, Slot: 3, Secret: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}
}

func sampleTask() *Task {
	return &Task{
		Digest: "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		Config: CallConfig{BlockDim: 24, AicpuThreadNum: 4, EnableProfiling: true},
		Tensors: []TensorArg{
			{Tag: TagInput, DType: dtype.Float32, Shape: []int{2, 2}, Inline: []byte{0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64, 0, 0, 128, 64}},
			{Tag: TagOutput, DType: dtype.Float16, Shape: []int{1024, 8}, Remote: &RemoteRef{Owner: 2, Buffer: BufferRef{ID: 9, Generation: 3}, Offset: 4096, Access: AccessWrite}},
			{Tag: TagInOut, DType: dtype.Int64, Shape: nil, Remote: &RemoteRef{Owner: 0, Buffer: BufferRef{ID: 1, Generation: 1}, Offset: 0, Access: AccessReadWrite}},
			{Tag: TagInput, DType: dtype.UInt8, Shape: []int{0, 5}, Inline: []byte{}},
		},
		Scalars: []uint64{0, 1, 1 << 63},
	}
}

// samples lists valid messages of every type, with every command.
func samples() []sample {
	buf := BufferRef{ID: 42, Generation: 7}
	dom := Domain{ID: 5, Generation: 2}
	full := Domain{ID: 5, Generation: 2, Size: 4, Ranks: []DomainRank{{Rank: 1, Worker: 0}, {Rank: 3, Worker: 1}}, WindowSize: 1 << 20, Table: []byte("layout")}
	s := []sample{
		{"challenge", &Challenge{Nonce: nonce(1)}, decChallenge},
		{"hello", sampleHello(), decHello},
		{"hello/minimal", &Hello{Version: 3, Parent: 1, Platform: "a5", DeviceIDs: []int{0}}, decHello},
		{"hello-reply/accepted", &HelloReply{Accepted: true, Session: 0x1234, Worker: 1, Version: 1, CommProfile: "sim", Host: sampleHost()}, decHelloReply},
		{"hello-reply/refused", &HelloReply{Session: 0x1234, Worker: 1, Version: 1, CommProfile: "a3-fabric-v1", Err: &ErrorBody{Kind: "RuntimeError", Message: "bad proof"}}, decHelloReply},
		{"task", sampleTask(), decTask},
		{"task/empty", &Task{Digest: "sha256:go-noop"}, decTask},
		{"completion/ok", &Completion{Seq: 3}, decCompletion},
		{"completion/spans", &Completion{Seq: 4, Took: 5000, Spans: []Span{{Lane: "chip_worker 0 (device 0)", Callable: "add", Start: 100, Dur: 2000}}}, decCompletion},
		{"completion/err", &Completion{Seq: 4, Err: &TaskFailure{Kind: "ValueError", Message: "boom", Path: "chip_worker 0 (device 0)", TaskID: 2, Callable: "k"}}, decCompletion},
		{"completion/race", &Completion{Seq: 6, Race: RaceCount{Checked: true, Races: 2}}, decCompletion},
		{"completion/race-clean", &Completion{Seq: 7, Race: RaceCount{Checked: true}}, decCompletion},
		{"completion/err-no-task", &Completion{Seq: 5, Err: &TaskFailure{Kind: "KeyError", Message: "unknown digest"}}, decCompletion},
		{"control/register", &Control{Cmd: CmdRegister, Digest: "sha256:abc", Module: "main.star", Name: "k"}, decControl},
		{"control/unregister", &Control{Cmd: CmdUnregister, Digest: "sha256:abc"}, decControl},
		{"control/malloc", &Control{Cmd: CmdMalloc, NBytes: 1 << 30}, decControl},
		{"control/free", &Control{Cmd: CmdFree, Buffer: buf}, decControl},
		{"control/copy-to", &Control{Cmd: CmdCopyTo, Buffer: buf, Offset: 16, Data: []byte("hello")}, decControl},
		{"control/copy-from", &Control{Cmd: CmdCopyFrom, Buffer: buf, Offset: 16, NBytes: 5}, decControl},
		{"control/export", &Control{Cmd: CmdExport, Buffer: buf, Offset: 0, NBytes: 4096, Access: AccessRead}, decControl},
		{"control/import", &Control{Cmd: CmdImport, Token: sampleExportID().Bytes(), Access: 0}, decControl},
		{"control/bundle", &Control{Cmd: CmdBundle, Bundle: sampleBundle()}, decControl},
		{"control/bundle-empty", &Control{Cmd: CmdBundle}, decControl},
		{"control/cancel", &Control{Cmd: CmdCancel, TaskSeq: 17}, decControl},
		{"control/import-rw", &Control{Cmd: CmdImport, Token: []byte("opaque-token"), Access: AccessReadWrite}, decControl},
		{"control/release-import", &Control{Cmd: CmdReleaseImport, Buffer: buf}, decControl},
		{"control/comm-init", &Control{Cmd: CmdCommInit, Domain: Domain{ID: 5, Generation: 2, Size: 4, Ranks: []DomainRank{{Rank: 0, Worker: 1}}, Table: []byte("topology")}}, decControl},
		{"control/prepare", &Control{Cmd: CmdPrepare, Domain: full}, decControl},
		{"control/reattach", &Control{Cmd: CmdReattach, Domain: full}, decControl},
		{"control/import-table", &Control{Cmd: CmdImportTable, Domain: Domain{ID: 5, Generation: 2, Table: []byte("descriptors")}}, decControl},
		{"control/commit", &Control{Cmd: CmdCommit, Domain: dom}, decControl},
		{"control/abort", &Control{Cmd: CmdAbort, Domain: dom}, decControl},
		{"control/release-domain", &Control{Cmd: CmdReleaseDomain, Domain: dom}, decControl},
		{"control/stage-to", &Control{Cmd: CmdStageTo, Domain: dom, Rank: 3, Offset: 64, Data: []byte("window bytes")}, decControl},
		{"control/stage-from", &Control{Cmd: CmdStageFrom, Domain: dom, Rank: 0, Offset: 0, NBytes: 4096}, decControl},
		{"control-reply/malloc", &ControlReply{Seq: 8, Cmd: CmdMalloc, Buffer: buf}, decControlReply},
		{"control-reply/import", &ControlReply{Seq: 9, Cmd: CmdImport, Buffer: buf}, decControlReply},
		{"control-reply/copy-from", &ControlReply{Seq: 10, Cmd: CmdCopyFrom, Data: []byte("hello")}, decControlReply},
		{"control-reply/export", &ControlReply{Seq: 11, Cmd: CmdExport, Data: []byte("opaque-token")}, decControlReply},
		{"control-reply/prepare", &ControlReply{Seq: 12, Cmd: CmdPrepare, Data: []byte("descriptors")}, decControlReply},
		{"control-reply/stage-from", &ControlReply{Seq: 16, Cmd: CmdStageFrom, Data: []byte("window bytes")}, decControlReply},
		{"control-reply/free", &ControlReply{Seq: 13, Cmd: CmdFree}, decControlReply},
		{"control-reply/err", &ControlReply{Seq: 14, Cmd: CmdCopyTo, Err: &ErrorBody{Kind: "ValueError", Message: "copy overruns the buffer"}}, decControlReply},
		{"health", &Health{Timestamp: 1700000000123456789}, decHealth},
		{"health/negative", &Health{Timestamp: -1}, decHealth},
		{"health-reply", &HealthReply{Seq: 15, Timestamp: 1700000000123456789, InFlight: 3}, decHealthReply},
		{"shutdown", &Shutdown{Reason: "close()"}, decShutdown},
		{"output", &Output{Stream: StreamStdout, Line: []byte("hello from the node")}, decOutput},
		{"output/stderr", &Output{Stream: StreamStderr, Line: []byte(`a \x1b escape`)}, decOutput},
		{"shutdown/empty", &Shutdown{}, decShutdown},
		{"join", sampleJoin(), decJoin},
		{"join/minimal", &Join{Version: 1, Host: Host{Name: "h"}, Platform: "a5sim"}, decJoin},
		{"export-id", func() *ExportID { x := sampleExportID(); return &x }(), decExportID},
		{"link/start", &Link{Kind: LinkStart, Daemon: 5, Slot: 7, Session: 0x1234, Worker: 2, Limits: sampleLimits(), Hello: Payload(sampleHello())}, decLink},
		{"link/resolve", &Link{Kind: LinkResolve, Req: 9, ID: sampleExportID(), Parent: 0xc1a55}, decLink},
		{"link/grant", &Link{Kind: LinkGrant, Req: 9, Offset: 4096, NBytes: 8192, Access: AccessRead}, decLink},
		{"link/grant-refused", &Link{Kind: LinkGrant, Req: 9, Err: &ErrorBody{Kind: "ValueError", Message: "no such export"}}, decLink},
	}
	return s
}

func sampleLimits() Limits {
	return Limits{BufferBytes: 1 << 30, CopyBytes: MaxCopy, QueuedTasks: 64, QueuedBytes: 256 << 20, LoadSteps: 1e7}
}

// seed adds the valid encodings the decoder accepts as fuzz seeds.
func seed(f *testing.F, decode func([]byte) (Message, error)) {
	f.Helper()
	for _, s := range samples() {
		if _, err := decode(Payload(s.msg)); err == nil {
			f.Add(Payload(s.msg))
		}
	}
}

// canonical is the fuzz property: decode never panics, and whatever
// decodes re-encodes to the same bytes.
func canonical(t *testing.T, b []byte, decode func([]byte) (Message, error)) {
	m, err := decode(b)
	if err != nil {
		return
	}
	if got := Payload(m); !bytes.Equal(got, b) {
		t.Fatalf("not canonical:\n in  %x\n out %x\n msg %#v", b, got, m)
	}
}
