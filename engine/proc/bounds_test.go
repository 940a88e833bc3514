package proc

import (
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal/comm"
	"simpler/hal/shm"
	"simpler/internal/futex"
	"simpler/wire"
)

// Offsets, sizes and lengths near 2^63 and 2^64 in what a child or a
// parent reads from the other side of the mailbox: each must be refused,
// never wrap into a small number, turn negative as an int, or index past
// the memory it names. The messages' own bounds are wire's
// (wire/mailbox_test.go); these are this package's checks around them.

const (
	p63 = uint64(1) << 63
	top = uint64(math.MaxUint64)
)

// A child maps an object once; a later reference claiming another size
// would let offsets reach past the mapping.
func TestAttachRefusesASecondSize(t *testing.T) {
	seg := &shm.Segment{Name: "simpler-1-host-9", Mem: make([]byte, 64)}
	c := &child{attached: newMappings()}
	c.attached.byName[seg.Name] = &mapping{seg: seg}
	var held []*mapping
	if addr, err := c.attach(hostRef{Name: seg.Name, Size: 64}, &held); err != nil || addr != seg.Addr() {
		t.Fatalf("attach with its size: %#x, %v", addr, err)
	}
	_, err := c.attach(hostRef{Name: seg.Name, Size: 1 << 40, Off: 1<<40 - 1}, &held)
	wantErrText(t, "a second size", err, "is mapped here with 64 bytes, not 1099511627776")
	_, err = c.hostBytes(hostRef{Name: seg.Name, Size: 64, Off: 60}, 8, &held)
	wantErrText(t, "hostBytes past the end", err, "8 bytes at offset 60 overrun the 64 bytes")
	_, err = c.hostBytes(hostRef{Name: seg.Name, Size: 64, Off: 1}, math.MaxInt, &held) // off+n overflows int
	wantErrText(t, "hostBytes of MaxInt", err, "overrun the 64 bytes")
}

// hostRefOf names a host slice by its object; the slice must lie inside.
func TestHostRefOf(t *testing.T) {
	seg := &shm.Segment{Name: "simpler-1-host-8", Mem: make([]byte, 256)}
	hostmem.Register(seg)
	defer hostmem.Unregister(seg)
	r, err := hostRefOf(seg.Mem[200:256])
	if err != nil || r != (hostRef{Name: seg.Name, Size: 256, Off: 200}) {
		t.Fatalf("hostRefOf = %+v, %v", r, err)
	}
	_, err = hostRefOf(seg.Mem[256:])
	wantErrText(t, "empty", err, "empty copy")
	_, err = hostRefOf(make([]byte, 8))
	wantErrText(t, "Go memory", err, "is not in shared memory")
}

// A malformed request must not act: a malloc with trailing bytes used to
// allocate and then fail, leaving the allocation behind.
func TestControlDecodesBeforeItActs(t *testing.T) {
	chip, err := sim(t).OpenChip(0)
	if err != nil {
		t.Fatal(err)
	}
	defer chip.Close()
	c := &child{chip: chip, role: roleChip, ranks: map[uint64]*comm.Rank{}}
	var e wire.Encoder
	e.U8(opMalloc)
	e.Int(4096)
	e.U8(0) // trailing
	_, err = c.control(e.Bytes())
	if !errors.Is(err, wire.ErrTrailing) {
		t.Errorf("malloc with a trailing byte: %v", err)
	}
	if allocs, _ := chip.Live(); allocs != 0 {
		t.Errorf("%d allocations after a refused malloc", allocs)
	}
	e.Reset()
	e.U8(opMalloc)
	e.U64(top) // a size of 2^64-1, -1 as an int
	_, err = c.control(e.Bytes())
	wantErrText(t, "malloc of 2^64-1", err, "exceeds its bound")
	e.Reset()
	e.U8(opCheck)
	e.U64(0x1000_0000_0000)
	e.U64(p63)
	_, err = c.control(e.Bytes())
	wantErrText(t, "check of 2^63 bytes", err, "exceeds its bound")
}

func TestDecodeReplyRefusesUnknownKinds(t *testing.T) {
	var e wire.Encoder
	e.U8(statusErr)
	e.String("Oops")
	e.String("msg")
	_, err := decodeReply(e.Bytes())
	wantErrText(t, "an unknown kind", err, `unknown error kind "Oops"`)
	if _, ok := err.(*engine.Error); ok {
		t.Errorf("a malformed reply decoded as the child's error: %v", err)
	}
	_, err = decodeReply(encodeError(engine.Errorf(engine.KeyError, "k")))
	if e, ok := err.(*engine.Error); !ok || e.Kind != engine.KeyError || e.Msg != "k" {
		t.Errorf("a KeyError reply decoded as %#v", err)
	}
}

// A node's platform must be named by its own name: an alias hal.Lookup
// also takes would not re-encode to the same bytes.
func TestConfigOfRefusesAnAlias(t *testing.T) {
	n := nodeConfig(sampleConfigs(t)[0])
	if c, err := configOf(n); err != nil || c.Platform.Name() != "a2a3sim" {
		t.Fatalf("a2a3sim: %v", err)
	}
	n.Platform = "sim"
	_, err := configOf(n)
	wantErrText(t, "the alias sim", err, `platform "sim" is named "a2a3sim"`)
}

func TestLaneBytes(t *testing.T) {
	area := make([]byte, 16)
	for _, n := range []uint32{0, 16} {
		if b, err := laneBytes(area, n, "a request"); err != nil || len(b) != int(n) {
			t.Errorf("length %d: %d bytes, %v", n, len(b), err)
		}
	}
	for _, n := range []uint32{17, 1 << 31, math.MaxUint32} {
		_, err := laneBytes(area, n, "a request")
		wantErrText(t, "a length beyond the area", err, "exceeds the mailbox's 16")
	}
}

// A child that writes a reply length beyond the reply area fails the call;
// the parent used to slice past the area and panic.
func TestParentRefusesAnOversizeReplyLength(t *testing.T) {
	parent, err := newMailbox()
	if err != nil {
		t.Fatal(err)
	}
	defer parent.seg.Close()
	kid, err := openMailbox(parent.seg.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer kid.seg.Close()
	done := make(chan error, 1)
	go func() {
		l := kid.lanes[laneControl]
		req, live, err := l.next(func() bool { return false })
		if err == nil && (!live || len(req) != 1) {
			err = errors.New("the child did not get the request")
		}
		atomic.StoreUint32(l.respLen, math.MaxUint32)
		futex.Signal(l.respSeq, l.respSleep)
		done <- err
	}()
	_, err = parent.lanes[laneControl].call([]byte{opShutdown}, time.Now().Add(20*time.Second), func() error { return nil })
	wantErrText(t, "reply length 2^32-1", err, "the child's reply of 4294967295 bytes exceeds the mailbox's 1048576")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A STAGE_FROM for a process-mode node is split into mailbox-sized pieces
// by its size, which as an int may be negative.
func TestProcGlobalRefusesHugeStageFrom(t *testing.T) {
	p := &process{name: "node"}
	for _, n := range []uint64{top, p63, wire.MaxStage + 1} {
		_, err := p.global(&wire.Control{Cmd: wire.CmdStageFrom, Domain: wire.Domain{ID: 1, Generation: 1}, NBytes: n})
		wantErrText(t, "STAGE_FROM", err, "exceeds the bound 8388608")
	}
}

// A child refuses an IMPORT table with a bad descriptor before it looks
// for the rank. (The conversions themselves are engine's, tested there.)
func TestChildRefusesABadImportTable(t *testing.T) {
	c := &child{granks: map[grankKey]*comm.GlobalRank{}}
	ds := []comm.Descriptor{globalRankDescriptor(0), globalRankDescriptor(1)}
	g := wire.GlobalRankReq{Step: grImport, DomainID: 7, Generation: 1, Rank: 1, Table: engine.WireDescriptors(ds)}
	g.Table.Descriptors[1][0] ^= 0xff
	_, err := c.globalRank(&g)
	if err == nil || !strings.Contains(err.Error(), "descriptor 1") {
		t.Errorf("a bad descriptor: %v, want it refused before the rank is looked for", err)
	}
}

func globalRankDescriptor(rank uint32) comm.Descriptor {
	return comm.Descriptor{Profile: comm.ProfileSim, DomainID: 7, Generation: 1, Rank: rank, Ranks: 2,
		MappingSize: 4096, Handle: "simpler-1-w2-gdom-7-1-0123456789abcdef0123456789abcdef-r" + string('0'+rune(rank)),
		Secret: comm.Secret{0: 7, 15: byte(rank + 1)}}
}
