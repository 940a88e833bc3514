package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"simpler/hal/dtype"
)

const (
	p63 = uint64(1) << 63
	top = uint64(math.MaxUint64)
)

func TestMailboxRoundTrips(t *testing.T) {
	ops, steps := map[uint8]bool{}, map[uint8]bool{}
	for _, s := range mailboxSamples() {
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
		switch m := s.msg.(type) {
		case *MailboxInit:
			ops[OpInit] = true
		case *MailboxTask:
			ops[m.Op] = true
		case *MailboxControl:
			ops[m.Op] = true
			if m.Op == OpGlobalRank {
				steps[m.GlobalRank.Step] = true
			}
		}
	}
	for op := OpInit; op <= OpRaceCount; op++ {
		if !ops[op] {
			t.Errorf("no sample of op %d", op)
		}
	}
	for step := RankPrepare; step <= RankRelease; step++ {
		if !steps[step] {
			t.Errorf("no sample of global rank step %d", step)
		}
	}
}

// Every proper prefix of a valid encoding is refused, and any extra byte
// as trailing. (A descriptor table has no end of its own: its blob's
// length says where it ends; TestDescriptorTableBounds.)
func TestMailboxTruncatedAndTrailing(t *testing.T) {
	for _, s := range mailboxSamples() {
		if _, isTable := s.msg.(*DescriptorTable); isTable {
			continue
		}
		b := Payload(s.msg)
		for n := 0; n < len(b); n++ {
			if _, err := s.decode(b[:n]); err == nil {
				t.Errorf("%s: prefix of %d/%d bytes decoded", s.name, n, len(b))
			} else if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrBounds) {
				t.Errorf("%s: prefix of %d bytes: %v is neither truncation nor bounds", s.name, n, err)
			}
		}
		if _, err := s.decode(append(bytes.Clone(b), 0)); !errors.Is(err, ErrTrailing) {
			t.Errorf("%s: trailing byte: %v, want ErrTrailing", s.name, err)
		}
	}
}

// refuse requires decode to refuse b with an error of class that says
// text.
func refuse(t *testing.T, name string, decode func([]byte) (Message, error), b []byte, class error, text string) {
	t.Helper()
	_, err := decode(b)
	if err == nil || !errors.Is(err, class) || !strings.Contains(err.Error(), text) {
		t.Errorf("%s: error %v, want %v saying %q", name, err, class, text)
	}
}

// hostRefBytes encodes a host ref with raw 64-bit size and offset.
func hostRefBytes(e *Encoder, size, off uint64) {
	e.String("simpler-1-host-1")
	e.U64(size)
	e.U64(off)
}

// Offsets and sizes near 2^63 and 2^64 must be refused, never wrap into
// a small number or turn negative as an int.
func TestHostRefBounds(t *testing.T) {
	cases := []struct {
		size, off uint64
		want      string
	}{
		{64, 64, "is not inside"},
		{64, 1 << 40, "is not inside"},
		{64, p63, "exceeds its bound"}, // int(2^63) would be negative
		{64, top, "exceeds its bound"}, // int(2^64-1) is -1
		{p63, 0, "exceeds its bound"},  // so is a size
		{top, 10, "exceeds its bound"},
		{0, 0, "is not inside"},  // an empty object holds no offset
		{1 << 40, 1<<40 - 1, ""}, // the last byte of the largest object
		{64, 63, ""},
	}
	for _, c := range cases {
		var e Encoder
		hostRefBytes(&e, c.size, c.off)
		name := fmt.Sprintf("size %#x off %#x", c.size, c.off)
		if c.want == "" {
			if m, err := decHostRef(e.Bytes()); err != nil || uint64(m.(*hostRefMsg).Off) != c.off {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		refuse(t, name, decHostRef, e.Bytes(), ErrBounds, c.want)
	}
	var e Encoder
	e.String("")
	e.Int(64)
	e.Int(0)
	refuse(t, "no name", decHostRef, e.Bytes(), ErrBounds, "is not inside")
}

// A copy names n bytes at an offset of an object: all n must lie inside,
// checked without forming off+n.
func TestMailboxCopyBounds(t *testing.T) {
	cases := []struct {
		size, off, n uint64
		want         string
	}{
		{4096, 0, 4096, ""},
		{4096, 4095, 1, ""},
		{4096, 4095, 2, "a copy of 2 bytes"},
		{4096, 1, 1 << 40, "a copy of"},
		{4096, 0, 0, "a copy of 0 bytes"},
		{4096, 16, top - 15, "exceeds its bound"}, // off+n wraps to 0
		{4096, 16, p63, "exceeds its bound"},
		{1 << 40, 1<<40 - 1, 1 << 40, "a copy of"},
	}
	for _, c := range cases {
		var e Encoder
		e.U8(OpCopyIn)
		e.U64(0x1000_0000_0000)
		hostRefBytes(&e, c.size, c.off)
		e.U64(c.n)
		name := fmt.Sprintf("size %d off %d n %d", c.size, c.off, c.n)
		if c.want == "" {
			if _, err := DecodeMailboxControl(e.Bytes()); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		refuse(t, name, decMailboxControl, e.Bytes(), ErrBounds, c.want)
	}
}

func TestMailboxControlBounds(t *testing.T) {
	base := func() *MailboxControl {
		return &MailboxControl{Op: OpRegister, Digest: "sha256:ab", Module: "main.star", Name: "k"}
	}
	cases := []struct {
		name   string
		change func(*MailboxControl)
		want   string
	}{
		{"digest", func(c *MailboxControl) { c.Digest = "k" }, "digest"},
		{"module", func(c *MailboxControl) { c.Module = "" }, "empty module name"},
		{"function", func(c *MailboxControl) { c.Name = "" }, "empty function name"},
		{"op 0", func(c *MailboxControl) { c.Op = 0 }, "unknown control op 0"},
		{"init", func(c *MailboxControl) { c.Op = OpInit }, "unknown control op 1"},
		{"a task op", func(c *MailboxControl) { c.Op = OpRunChip }, "unknown control op 3"},
		{"malloc", func(c *MailboxControl) { *c = MailboxControl{Op: OpMalloc, Size: MaxBufferBytes + 1} }, "exceeds its bound"},
		{"check", func(c *MailboxControl) { *c = MailboxControl{Op: OpCheck, Size: MaxBufferBytes + 1} }, "exceeds its bound"},
		{"comm ranks", func(c *MailboxControl) {
			*c = MailboxControl{Op: OpCommAlloc, Comm: CommAlloc{Ranks: MaxCommRanks + 1}}
		}, "exceeds its bound"},
		{"comm rank", func(c *MailboxControl) { *c = MailboxControl{Op: OpCommAlloc, Comm: CommAlloc{Rank: MaxCommRanks + 1}} }, "exceeds its bound"},
		{"global command", func(c *MailboxControl) { *c = MailboxControl{Op: OpGlobal, Global: Control{Cmd: numCommands}} }, "global-domain command: unknown command"},
		{"global domain", func(c *MailboxControl) { *c = MailboxControl{Op: OpGlobal, Global: Control{Cmd: CmdCommit}} }, "global-domain command: domain id 0"},
		{"rank step", func(c *MailboxControl) { *c = MailboxControl{Op: OpGlobalRank, GlobalRank: GlobalRankReq{Step: 9}} }, "unknown global rank step 9"},
		{"rank", func(c *MailboxControl) {
			*c = MailboxControl{Op: OpGlobalRank, GlobalRank: GlobalRankReq{Step: RankCommit, Rank: MaxRanks}}
		}, "exceeds its bound"},
		{"prepare ranks", func(c *MailboxControl) {
			*c = MailboxControl{Op: OpGlobalRank, GlobalRank: GlobalRankReq{Step: RankPrepare, Ranks: MaxRanks + 1}}
		}, "exceeds its bound"},
		{"import table", func(c *MailboxControl) {
			g := sampleGlobalRank(RankImport)
			g.Table.Descriptors = make([]Descriptor, MaxRanks+1)
			*c = MailboxControl{Op: OpGlobalRank, GlobalRank: g}
		}, "descriptor table: a descriptor table of 4097 descriptors exceeds the bound 4096"},
	}
	for _, c := range cases {
		mutate(t, c.name, base(), c.change, decMailboxControl, c.want)
	}
	// A table blob that is not whole descriptors.
	b := Payload(&MailboxControl{Op: OpGlobalRank, GlobalRank: sampleGlobalRank(RankImport)})
	cut := bytes.Clone(b[:len(b)-1])
	cut[len(cut)-2*DescriptorSize+1-4]-- // the blob's length, one byte shorter
	refuse(t, "partial descriptor", decMailboxControl, cut, ErrTruncated, "is not whole descriptors")
}

// taskBytes is a task request of one INPUT int8 tensor with a raw shape
// and host ref.
func taskBytes(shape []uint64, size, off uint64) []byte {
	var e Encoder
	e.U8(OpRunChip)
	e.String("sha256:00")
	(&CallConfig{}).encode(&e)
	e.U32(1)
	e.U8(uint8(TagInput))
	e.U8(uint8(dtype.Int8))
	e.U32(uint32(len(shape)))
	for _, d := range shape {
		e.U64(d)
	}
	e.U32(0) // row-major: no strides
	e.U8(whereHost)
	hostRefBytes(&e, size, off)
	e.U32(0)
	e.U64(0) // no race log
	return e.Bytes()
}

func TestMailboxTaskBounds(t *testing.T) {
	cases := []struct {
		name   string
		change func(*MailboxTask)
		want   string
	}{
		{"op", func(x *MailboxTask) { x.Op = OpMalloc }, "unknown task op 5"},
		{"digest", func(x *MailboxTask) { x.Digest = "md5:abc" }, "digest"},
		{"block dim", func(x *MailboxTask) { x.Config.BlockDim = MaxBlockDim + 1 }, "exceeds its bound"},
		{"aicpu threads", func(x *MailboxTask) { x.Config.AicpuThreadNum = MaxBlockDim + 1 }, "exceeds its bound"},
		{"tag", func(x *MailboxTask) { x.Tensors[1].Tag = 5 }, "unknown tag"},
		{"dtype 0", func(x *MailboxTask) { x.Tensors[1].DType = dtype.Invalid }, "unknown dtype"},
		{"dims", func(x *MailboxTask) { x.Tensors[1].Shape = make([]int, MaxDims+1) }, "count"},
		{"dim", func(x *MailboxTask) { x.Tensors[1].Shape = []int{MaxDim + 1} }, "exceeds its bound"},
		{"tensor bytes", func(x *MailboxTask) { x.Tensors[1].Shape = []int{MaxDim, 2} }, "exceeds"},
		{"overrun", func(x *MailboxTask) { x.Tensors[0].Shape = []int{4, 1009} }, "overrun the 4096 bytes"},
		{"strides for other dims", func(x *MailboxTask) { x.Tensors[3].Strides = []int{1} }, "1 strides for 2 dimensions"},
		{"stride", func(x *MailboxTask) { x.Tensors[3].Strides = []int{MaxDim + 1, 1} }, "exceeds its bound"},
		{"strided reach", func(x *MailboxTask) { x.Tensors[3].Strides = []int{MaxDim, 1} }, "reaches more than"},
		{"strided overrun", func(x *MailboxTask) { x.Tensors[3].Strides = []int{400, 1} }, "overrun the 4096 bytes"},
		{"tensors", func(x *MailboxTask) { x.Tensors = make([]MailboxTensor, MaxTensors+1) }, "count"},
		{"scalars", func(x *MailboxTask) { x.Scalars = make([]uint64, MaxScalars+1) }, "count"},
	}
	for _, c := range cases {
		mutate(t, c.name, sampleMailboxTask(), c.change, decMailboxTask, c.want)
	}
	raw := []struct {
		name      string
		shape     []uint64
		size, off uint64
		want      string
	}{
		{"fits", []uint64{16}, 4096, 4080, ""},
		{"empty at the last byte", []uint64{0}, 4096, 4095, ""},
		{"overruns its object", []uint64{17}, 4096, 4080, "overrun"},
		{"2^32 x 2^32 bytes, 0 in int arithmetic", []uint64{1 << 32, 1 << 32}, 4096, 0, "exceeds"},
		{"2^40 cubed", []uint64{1 << 40, 1 << 40, 1 << 40}, 4096, 0, "exceeds"},
		{"a dimension of 2^63", []uint64{p63}, 4096, 0, "exceeds its bound"},
		{"a dimension of 2^64-1", []uint64{top}, 4096, 0, "exceeds its bound"},
		{"an offset of 2^64-1", []uint64{1}, 4096, top, "exceeds its bound"},
	}
	for _, c := range raw {
		b := taskBytes(c.shape, c.size, c.off)
		if c.want == "" {
			if _, err := DecodeMailboxTask(b); err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		refuse(t, c.name, decMailboxTask, b, ErrBounds, c.want)
	}
}

// The location byte's values are shared: a mailbox task carries device
// and host tensors, a TASK remote and inline ones, and neither takes the
// other's.
func TestTensorLocations(t *testing.T) {
	b := taskBytes([]uint64{1}, 64, 0)
	i := len(b) - 8 - 4 - 8 - 8 - (4 + len("simpler-1-host-1")) - 1 // before the host ref, the scalar count and the race flag
	if b[i] != whereHost {
		t.Fatalf("byte %d is %d, not the location", i, b[i])
	}
	for _, where := range []uint8{0, whereRemote, whereInline, 5} {
		b[i] = where
		refuse(t, fmt.Sprintf("mailbox location %d", where), decMailboxTask, b, ErrBounds, "unknown location")
	}
	task := Payload(&Task{Digest: "sha256:x", Tensors: []TensorArg{{DType: dtype.UInt8, Inline: []byte{1}}}})
	j := bytes.LastIndexByte(task[:len(task)-4-4-1], whereInline)
	for _, where := range []uint8{whereDevice, whereHost} {
		task[j] = where
		refuse(t, fmt.Sprintf("TASK location %d", where), decTask, task, ErrBounds, "unknown location")
	}
}

// A count the message cannot hold is refused as truncation before
// anything is allocated for it.
func TestMailboxCountsAreCheckedAgainstTheBytesLeft(t *testing.T) {
	var e Encoder
	e.U8(OpRunSub)
	e.String("sha256:00")
	(&CallConfig{}).encode(&e)
	e.U32(MaxTensors) // tensors, and nothing after
	refuse(t, "tensors", decMailboxTask, e.Bytes(), ErrTruncated, "elements")
	e.Reset()
	e.Int(3)
	e.String("a2a3sim")
	e.U32(MaxDevices) // device ids, and nothing after
	refuse(t, "device ids", decNodeConfig, e.Bytes(), ErrTruncated, "elements")
	e.Reset()
	e.String("dom")
	e.U32(MaxBuffers)
	refuse(t, "buffers", decPrepareExtra, e.Bytes(), ErrTruncated, "elements")
	e.Reset()
	(&Topology{Cluster: 1}).Encode(&e)
	b := bytes.Clone(e.Bytes())
	b[len(b)-4] = 0xff // the device ranks' count
	refuse(t, "device ranks", decTopology, b, ErrTruncated, "elements")
	e.Reset()
	e.String("/root")
	e.U32(MaxModules)
	refuse(t, "modules", decChildBundle, e.Bytes(), ErrTruncated, "elements")
}

func TestMailboxInitBounds(t *testing.T) {
	cases := []struct {
		name   string
		role   uint8
		change func(*MailboxInit)
		want   string
	}{
		{"role 0", RoleChip, func(m *MailboxInit) { m.Role = 0 }, "unknown role 0"},
		{"role 4", RoleChip, func(m *MailboxInit) { m.Role = 4 }, "unknown role 4"},
		{"worker", RoleChip, func(m *MailboxInit) { m.WorkerID = MaxWorkerID + 1 }, "exceeds its bound"},
		{"args", RoleSub, func(m *MailboxInit) { m.Args = make([]string, MaxLauncherArgs+1) }, "count 65 exceeds its bound 64"},
		{"long arg", RoleSub, func(m *MailboxInit) { m.Args[0] = strings.Repeat("a", MaxName+1) }, "exceeds its bound"},
		{"empty platform", RoleChip, func(m *MailboxInit) { m.Platform = "" }, "empty platform"},
		{"platform chars", RoleChip, func(m *MailboxInit) { m.Platform = "a2a3 sim" }, "platform"},
		{"device -2", RoleChip, func(m *MailboxInit) { m.Device = -2 }, "device -2"},
		{"device", RoleChip, func(m *MailboxInit) { m.Device = MaxDeviceID + 1 }, "device"},
		{"level", RoleNode, func(m *MailboxInit) { m.Node.Level = MaxLevel + 1 }, "exceeds its bound"},
		{"node platform", RoleNode, func(m *MailboxInit) { m.Node.Platform = "" }, "empty platform"},
		{"node device", RoleNode, func(m *MailboxInit) { m.Node.DeviceIDs[0] = MaxDeviceID + 1 }, "device id"},
		{"sub workers", RoleNode, func(m *MailboxInit) { m.Node.NumSubWorkers = MaxSubWorkers + 1 }, "exceeds its bound"},
		{"mode", RoleNode, func(m *MailboxInit) { m.Node.Mode = "pro cess" }, "mode"},
		{"heap", RoleNode, func(m *MailboxInit) { m.Node.HeapRingSize = MaxBufferBytes + 1 }, "exceeds its bound"},
		{"window", RoleNode, func(m *MailboxInit) { m.Node.TaskWindow = MaxTaskWindow + 1 }, "exceeds its bound"},
		{"comm profile", RoleNode, func(m *MailboxInit) { m.Node.CommProfile = strings.Repeat("s", MaxIdent+1) }, "exceeds its bound"},
		{"global rank", RoleNode, func(m *MailboxInit) { m.Node.GlobalDeviceRanks[0] = MaxDeviceID + 1 }, "global device rank"},
	}
	for _, c := range cases {
		mutate(t, c.name, sampleMailboxInit(c.role), c.change, decMailboxInit, c.want)
	}
	m := sampleMailboxInit(RoleSub)
	m.Args = make([]string, MaxLauncherArgs)
	if _, err := DecodeMailboxInit(Payload(m)); err != nil {
		t.Errorf("%d args: %v", MaxLauncherArgs, err)
	}
	b := Payload(sampleMailboxInit(RoleChip))
	b[0] = OpRegister
	refuse(t, "a first op other than init", decMailboxInit, b, ErrBounds, "first message is op 2, want init")
}

func TestDescriptorTableBounds(t *testing.T) {
	for _, n := range []int{0, 1, MaxRanks} {
		b := make([]byte, n*DescriptorSize)
		if tab, err := DecodeDescriptorTable(b); err != nil || len(tab.Descriptors) != n {
			t.Errorf("%d descriptors: %d, %v", n, len(tab.Descriptors), err)
		}
	}
	refuse(t, "MaxRanks+1", decDescriptorTable, make([]byte, (MaxRanks+1)*DescriptorSize), ErrBounds, "exceeds the bound 4096")
	refuse(t, "a partial descriptor", decDescriptorTable, make([]byte, DescriptorSize+1), ErrTruncated, "is not whole descriptors")
	refuse(t, "less than one", decDescriptorTable, make([]byte, DescriptorSize-1), ErrTruncated, "is not whole descriptors")
}

func TestPrepareExtraBounds(t *testing.T) {
	base := func() *PrepareExtra {
		return &PrepareExtra{Name: "d", Buffers: []BufferSpec{{Name: "x", Count: 1, NBytes: 4}}}
	}
	mutate(t, "count", base(), func(p *PrepareExtra) { p.Buffers[0].Count = MaxBufferBytes + 1 }, decPrepareExtra, "exceeds its bound")
	mutate(t, "nbytes", base(), func(p *PrepareExtra) { p.Buffers[0].NBytes = MaxBufferBytes + 1 }, decPrepareExtra, "exceeds its bound")
	mutate(t, "buffers", base(), func(p *PrepareExtra) { p.Buffers = make([]BufferSpec, MaxBuffers+1) }, decPrepareExtra, "count")
	mutate(t, "ranks", &Topology{}, func(p *Topology) { p.DeviceRanks = make([]uint32, MaxRanks+1) }, decTopology, "count")
	mutate(t, "reattach descriptors", &Reattach{}, func(p *Reattach) { p.Descriptors.Descriptors = make([]Descriptor, MaxRanks+1) }, decReattach, "exceeds the bound")
	mutate(t, "reattach buffers", &Reattach{}, func(p *Reattach) { p.Extra.Buffers = make([]BufferSpec, MaxBuffers+1) }, decReattach, "buffer layout")
	mutate(t, "reattach ranks", &Reattach{}, func(p *Reattach) { p.Topology.DeviceRanks = make([]uint32, MaxRanks+1) }, decReattach, "topology")
}

func TestChildBundleBounds(t *testing.T) {
	cases := []struct {
		name   string
		change func(*ChildBundle)
		want   string
	}{
		{"unsorted", func(b *ChildBundle) { b.Modules[2], b.Modules[3] = b.Modules[3], b.Modules[2] }, "names must ascend"},
		{"repeated", func(b *ChildBundle) { b.Modules[3].Name = b.Modules[2].Name }, "names must ascend"},
		{"two empty names", func(b *ChildBundle) { b.Modules[1].Name = "" }, "names must ascend"},
		{"short sum", func(b *ChildBundle) { b.Modules[1].Sum = "abc" }, "hex digits"},
		{"long sum", func(b *ChildBundle) { b.Modules[1].Sum += "0" }, "exceeds its bound"},
		{"upper-case sum", func(b *ChildBundle) { b.Modules[1].Sum = strings.Repeat("AB", 32) }, "lowercase hex"},
		{"long root", func(b *ChildBundle) { b.Root = strings.Repeat("r", MaxName+1) }, "exceeds its bound"},
		{"long name", func(b *ChildBundle) { b.Modules[3].Name = strings.Repeat("m", MaxName+1) }, "exceeds its bound"},
		{"modules", func(b *ChildBundle) { b.Modules = make([]ChildModule, MaxModules+1) }, "count"},
	}
	for _, c := range cases {
		mutate(t, c.name, sampleChildBundle(), c.change, decChildBundle, c.want)
	}
}

// The largest valid bundle is MaxChildBundle bytes, the bound of an init
// request's bundle.
func TestMaximalChildBundleFits(t *testing.T) {
	b := &ChildBundle{Root: strings.Repeat("r", MaxName)}
	for i := range MaxModules {
		name := fmt.Sprintf("%04d", i) + strings.Repeat("m", MaxName-4)
		b.Modules = append(b.Modules, ChildModule{Name: name, Sum: strings.Repeat("f", ChildSumSize)})
	}
	p := Payload(b)
	if len(p) != MaxChildBundle {
		t.Fatalf("the largest bundle is %d bytes, MaxChildBundle %d", len(p), MaxChildBundle)
	}
	if _, err := DecodeChildBundle(p); err != nil {
		t.Fatal(err)
	}
	m := sampleMailboxInit(RoleChip)
	m.Bundle = p
	if _, err := DecodeMailboxInit(Payload(m)); err != nil {
		t.Fatalf("an init with the largest bundle: %v", err)
	}
}
