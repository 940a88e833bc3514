package wire

import (
	"strings"
	"testing"
	"time"

	"simpler/hal/dtype"
)

// Samples of the formats that do not cross TCP by themselves: the mailbox
// messages, the global-domain tables and the child's module bundle, each
// with its decoder, for round trips, rejection tests and fuzz seeds.

// hostRefMsg, nodeConfigMsg and callConfigMsg make parts of the mailbox
// messages into messages of their own, so that each is fuzzed directly.
type (
	hostRefMsg    struct{ HostRef }
	nodeConfigMsg struct{ NodeConfig }
	callConfigMsg struct{ CallConfig }
)

func (m *hostRefMsg) Encode(e *Encoder)    { m.HostRef.encode(e) }
func (m *nodeConfigMsg) Encode(e *Encoder) { m.NodeConfig.encode(e) }
func (m *callConfigMsg) Encode(e *Encoder) { m.CallConfig.encode(e) }

// part decodes one part of a message as a whole message.
func part[M any](read func(*Decoder) M) func([]byte) (M, error) {
	return func(b []byte) (M, error) {
		d := NewDecoder(b)
		m := read(d)
		if err := d.Finish(); err != nil {
			var zero M
			return zero, err
		}
		return m, nil
	}
}

var (
	decMailboxInit        = dec(DecodeMailboxInit)
	decMailboxControl     = dec(DecodeMailboxControl)
	decMailboxTask        = dec(DecodeMailboxTask)
	decAddrReply          = dec(DecodeAddrReply)
	decCommAllocReply     = dec(DecodeCommAllocReply)
	decGlobalPrepareReply = dec(DecodeGlobalPrepareReply)
	decPrepareExtra       = dec(DecodePrepareExtra)
	decDescriptorTable    = dec(DecodeDescriptorTable)
	decTopology           = dec(DecodeTopology)
	decReattach           = dec(DecodeReattach)
	decChildBundle        = dec(DecodeChildBundle)
	decHostRef            = dec(part(func(d *Decoder) hostRefMsg { return hostRefMsg{decodeHostRef(d)} }))
	decNodeConfig         = dec(part(func(d *Decoder) nodeConfigMsg { return nodeConfigMsg{decodeNodeConfig(d)} }))
	decCallConfig         = dec(part(func(d *Decoder) callConfigMsg { return callConfigMsg{decodeCallConfig(d)} }))
)

// fakeDescriptor stands in for hal/comm's layout, which is opaque here.
func fakeDescriptor(rank byte) (x Descriptor) {
	copy(x[:], "SMPLGDSC")
	x[8] = rank
	x[DescriptorSize-1] = 0xee
	return x
}

func sampleHostRef() HostRef { return HostRef{Name: "simpler-1-host-1", Size: 4096, Off: 64} }

func sampleNodeConfig() NodeConfig {
	return NodeConfig{Level: 3, Platform: "a2a3sim", DeviceIDs: []int{0, 1, 2, 3}, NumSubWorkers: 2, Mode: "process",
		EnableSDMA: true, HeapRingSize: 64 << 20, TaskWindow: 128, StartupTimeout: 30 * time.Second, CommProfile: "sim",
		GlobalDeviceRanks: []int{4, 5, 6, 7}, OrderHazards: true, Race: true}
}

func sampleMailboxTask() *MailboxTask {
	return &MailboxTask{
		Op:     OpRunChip,
		Digest: "sha256:" + strings.Repeat("ab", 32),
		Config: CallConfig{BlockDim: 24, AicpuThreadNum: 4, EnableProfiling: true},
		Tensors: []MailboxTensor{
			{Tag: TagInput, DType: dtype.Float32, Shape: []int{4, 8}, Host: sampleHostRef()},
			{Tag: TagOutputExisting, DType: dtype.Int64, Shape: []int{16}, Device: true, Addr: 0x1000_0000_0200},
			{Tag: TagNoDep, DType: dtype.Float16, Shape: []int{0, 1 << 40}, Host: HostRef{Name: "simpler-1-host-2", Size: 64, Off: 63}},
			{Tag: TagOutput, DType: dtype.Int32, Shape: []int{4, 2}, Strides: []int{8, 1}, Host: sampleHostRef()},
			{Tag: TagInOut, DType: dtype.UInt8, Host: HostRef{Name: "simpler-1-host-2", Size: 64, Off: 63}},
		},
		Scalars: []uint64{7, 1 << 63},
	}
}

func sampleMailboxInit(role uint8) *MailboxInit {
	m := &MailboxInit{Role: role, WorkerID: 1, Prefix: "simpler-1-", Path: "/bin/simpler", Args: []string{"__child"},
		Bundle: Payload(sampleChildBundle())}
	switch role {
	case RoleChip:
		m.Platform, m.Device = "a2a3sim", 3
	case RoleSub:
		m.Platform, m.Device = "a5sim", -1
	case RoleNode:
		m.Node = sampleNodeConfig()
	}
	return m
}

func sampleGlobalRank(step uint8) GlobalRankReq {
	g := GlobalRankReq{Step: step, DomainID: 7, Generation: 1, Rank: 1}
	switch step {
	case RankPrepare:
		g.Prefix, g.Name, g.Ranks, g.WindowSize, g.Timeout = "simpler-1-w2-", "g", 2, 4096, time.Second
	case RankImport:
		g.Table = DescriptorTable{Descriptors: []Descriptor{fakeDescriptor(0), fakeDescriptor(1)}}
	}
	return g
}

func sampleChildBundle() *ChildBundle {
	return &ChildBundle{Root: "/home/u/proj", Modules: []ChildModule{
		{Name: "", Sum: ""},
		{Name: "@simpler//collectives.star", Sum: strings.Repeat("01", 32)},
		{Name: "lib/x.star", Sum: strings.Repeat("ab", 32)},
		{Name: "main.star", Sum: strings.Repeat("ab", 32)},
	}}
}

// mailboxSamples lists valid messages of every format here, every op and
// every global rank step among them.
func mailboxSamples() []sample {
	ref := sampleHostRef()
	dom := Domain{ID: 1, Generation: 2}
	s := []sample{
		{"init/chip", sampleMailboxInit(RoleChip), decMailboxInit},
		{"init/sub", sampleMailboxInit(RoleSub), decMailboxInit},
		{"init/node", sampleMailboxInit(RoleNode), decMailboxInit},
		{"init/minimal-node", &MailboxInit{Role: RoleNode, Node: NodeConfig{Level: 3, Platform: "a5sim"}}, decMailboxInit},
		{"task/chip", sampleMailboxTask(), decMailboxTask},
		{"task/sub", &MailboxTask{Op: OpRunSub, Digest: "sha256:00", Scalars: []uint64{1}, RaceTag: 1<<62 | 3<<48}, decMailboxTask},
		{"task/orch", &MailboxTask{Op: OpRunOrch, Digest: "sha256:00", Config: CallConfig{BlockDim: 1, AicpuThreadNum: 1}}, decMailboxTask},
		{"control/shutdown", &MailboxControl{Op: OpShutdown}, decMailboxControl},
		{"control/register", &MailboxControl{Op: OpRegister, Digest: "sha256:ab", Module: "main.star", Name: "k"}, decMailboxControl},
		{"control/malloc", &MailboxControl{Op: OpMalloc, Size: 4096}, decMailboxControl},
		{"control/malloc-0", &MailboxControl{Op: OpMalloc}, decMailboxControl},
		{"control/free", &MailboxControl{Op: OpFree, Ptr: 0x1000_0000_0000}, decMailboxControl},
		{"control/check", &MailboxControl{Op: OpCheck, Ptr: 0x1000_0000_0000, Size: 16}, decMailboxControl},
		{"control/copy-in", &MailboxControl{Op: OpCopyIn, Ptr: 0x1000_0000_0000, Host: ref, Size: 4096 - 64}, decMailboxControl},
		{"control/copy-out", &MailboxControl{Op: OpCopyOut, Ptr: 0x1000_0000_0200, Host: ref, Size: 1}, decMailboxControl},
		{"control/comm-alloc", &MailboxControl{Op: OpCommAlloc, Comm: CommAlloc{Namespace: "w", AllocationID: 7, Name: "d", Ranks: 4, WindowSize: 1 << 20, Timeout: time.Second, Rank: 3, Key: "00112233445566778899aabbccddeeff"}}, decMailboxControl},
		{"control/comm-release", &MailboxControl{Op: OpCommRelease, Ptr: 7}, decMailboxControl},
		{"control/global-commit", &MailboxControl{Op: OpGlobal, Global: Control{Cmd: CmdCommit, Domain: dom}}, decMailboxControl},
		{"control/global-stage-from", &MailboxControl{Op: OpGlobal, Global: Control{Cmd: CmdStageFrom, Domain: dom, Rank: 1, Offset: 64, NBytes: 8}}, decMailboxControl},
		{"reply/addr", &AddrReply{Addr: 0x1000_0000_0000}, decAddrReply},
		{"reply/comm-alloc", &CommAllocReply{DeviceCtx: 1 << 44, WindowBase: 1<<44 + 4096, WindowSize: 4096}, decCommAllocReply},
		{"reply/global-prepare", &GlobalPrepareReply{Descriptor: fakeDescriptor(1), WindowBase: 1 << 44}, decGlobalPrepareReply},
		{"prepare-extra", &PrepareExtra{Name: "dom", Buffers: []BufferSpec{{Name: "x", DType: dtype.Float32, Count: 1024, NBytes: 4096}, {}}}, decPrepareExtra},
		{"prepare-extra/empty", &PrepareExtra{}, decPrepareExtra},
		{"descriptors", &DescriptorTable{Descriptors: []Descriptor{fakeDescriptor(0), fakeDescriptor(1)}}, decDescriptorTable},
		{"topology", &Topology{Cluster: 7, NodeRank: 1, Nodes: 2, Hash: "sha256:x", DeviceRanks: []uint32{2, 3}}, decTopology},
		{"topology/zero", &Topology{}, decTopology},
		{"reattach", &Reattach{Topology: Topology{Cluster: 7, NodeRank: 1, Nodes: 2, Hash: "sha256:x", DeviceRanks: []uint32{2, 3}},
			Extra:       PrepareExtra{Name: "dom", Buffers: []BufferSpec{{Name: "x", DType: dtype.Float32, Count: 1024, NBytes: 4096}}},
			Descriptors: DescriptorTable{Descriptors: []Descriptor{fakeDescriptor(0), fakeDescriptor(1)}}}, decReattach},
		{"reattach/zero", &Reattach{}, decReattach},
		{"bundle", sampleChildBundle(), decChildBundle},
		{"bundle/empty", &ChildBundle{}, decChildBundle},
		{"host-ref", &hostRefMsg{ref}, decHostRef},
		{"host-ref/largest", &hostRefMsg{HostRef{Name: "simpler-9-hostbuf-3", Size: MaxBufferBytes, Off: MaxBufferBytes - 1}}, decHostRef},
		{"node-config", &nodeConfigMsg{sampleNodeConfig()}, decNodeConfig},
		{"call-config", &callConfigMsg{CallConfig{BlockDim: MaxBlockDim, EnableProfiling: true}}, decCallConfig},
		{"control/cancel", &MailboxControl{Op: OpCancel, Task: 7, Reason: "run 3 cancelled"}, decMailboxControl},
		{"control/ping", &MailboxControl{Op: OpPing}, decMailboxControl},
		{"control/race-count", &MailboxControl{Op: OpRaceCount}, decMailboxControl},
	}
	for step := RankPrepare; step <= RankRelease; step++ {
		g := sampleGlobalRank(step)
		s = append(s, sample{"control/global-rank-" + string('0'+rune(step)), &MailboxControl{Op: OpGlobalRank, GlobalRank: g}, decMailboxControl})
	}
	return s
}

// seedFrom adds the samples the decoder accepts as fuzz seeds; there must
// be one, or the canonical check would go unexercised.
func seedFrom(f *testing.F, decode func([]byte) (Message, error)) {
	f.Helper()
	n := 0
	for _, s := range mailboxSamples() {
		if _, err := decode(Payload(s.msg)); err == nil {
			f.Add(Payload(s.msg))
			n++
		}
	}
	if n == 0 {
		f.Fatal("no sample decodes")
	}
}
