package comm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"simpler/hal"
	"simpler/hal/shm"
)

// ---- descriptor ----

func sampleDescriptor() Descriptor {
	return Descriptor{
		Profile: ProfileSim, DomainID: 0x0102030405060708, Generation: 0x1112131415161718,
		Rank: 0x21222324, Ranks: 0x31323334, MappingSize: 0x4142434445464748,
		Handle: "simpler-77-gdom-a-b-r3",
	}
}

// A valid descriptor to mutate in the rejection tests.
func validDescriptor() Descriptor {
	return Descriptor{Profile: ProfileSim, DomainID: 9, Generation: 2, Rank: 3, Ranks: 4,
		MappingSize: 8192, Handle: "simpler-77-gdom-9-2-r3"}
}

// The layout is a wire contract: every offset and width is pinned here by
// reading the encoding independently of the decoder.
func TestDescriptorLayout(t *testing.T) {
	if DescriptorSize != 112 || DescriptorHandleMax != 63 || DescriptorVersion != 1 || ProfileSim != 1 {
		t.Fatalf("size %d, handle max %d, version %d, sim %d", DescriptorSize, DescriptorHandleMax, DescriptorVersion, ProfileSim)
	}
	d := sampleDescriptor()
	b := EncodeDescriptor(d)
	if len(b) != 112 {
		t.Fatalf("encoded %d bytes", len(b))
	}
	le := binary.LittleEndian
	fields := []struct {
		name      string
		off, size int
		want      uint64
	}{
		{"version", 8, 4, 1},
		{"profile", 12, 4, 1},
		{"domain id", 16, 8, d.DomainID},
		{"generation", 24, 8, d.Generation},
		{"rank", 32, 4, uint64(d.Rank)},
		{"rank count", 36, 4, uint64(d.Ranks)},
		{"mapping size", 40, 8, d.MappingSize},
	}
	if string(b[0:8]) != "SMPLGDSC" {
		t.Errorf("magic %q", b[0:8])
	}
	end := 8
	for _, f := range fields {
		if f.off != end {
			t.Errorf("%s at %d: the fields before leave a gap or overlap (end %d)", f.name, f.off, end)
		}
		end = f.off + f.size
		var got uint64
		if f.size == 4 {
			got = uint64(le.Uint32(b[f.off:]))
		} else {
			got = le.Uint64(b[f.off:])
		}
		if got != f.want {
			t.Errorf("%s at offset %d: %#x, want %#x", f.name, f.off, got, f.want)
		}
	}
	if end != 48 {
		t.Errorf("handle starts at %d, want 48", end)
	}
	handle := b[48:112]
	if !bytes.HasPrefix(handle, []byte(d.Handle)) || bytes.ContainsFunc(handle[len(d.Handle):], func(r rune) bool { return r != 0 }) {
		t.Errorf("handle field %q", handle)
	}
	// The unexported offsets agree with the pinned ones.
	offs := []int{descOffMagic, descOffVersion, descOffProfile, descOffDomainID, descOffGeneration,
		descOffRank, descOffRanks, descOffMappingSize, descOffHandle, descOffHandle + descHandleLen}
	if !slices.Equal(offs, []int{0, 8, 12, 16, 24, 32, 36, 40, 48, 112}) {
		t.Errorf("offsets %v", offs)
	}
}

func TestDescriptorRoundTrip(t *testing.T) {
	long := "simpler-" + strings.Repeat("x", DescriptorHandleMax-8)
	for _, d := range []Descriptor{
		validDescriptor(),
		{Profile: ProfileSim, DomainID: 0, Generation: 0, Rank: 0, Ranks: 1, MappingSize: 1, Handle: "h"},
		{Profile: ProfileSim, DomainID: ^uint64(0), Generation: ^uint64(0), Rank: 1023, Ranks: 1024,
			MappingSize: ^uint64(0), Handle: long},
	} {
		got, err := DecodeDescriptor(EncodeDescriptor(d))
		if err != nil || got != d {
			t.Errorf("round trip of %v: %v, %v", d, got, err)
		}
	}
}

func TestDescriptorRejects(t *testing.T) {
	le := binary.LittleEndian
	cases := []struct {
		name string
		mut  func([]byte) []byte
		want string
	}{
		{"empty", func(b []byte) []byte { return nil }, "0 bytes, want 112"},
		{"short", func(b []byte) []byte { return b[:111] }, "111 bytes, want 112"},
		{"long", func(b []byte) []byte { return append(b, 0) }, "113 bytes, want 112"},
		{"magic", func(b []byte) []byte { b[3] ^= 1; return b }, "magic"},
		{"version 0", func(b []byte) []byte { le.PutUint32(b[8:], 0); return b }, "version 0, want 1"},
		{"version 2", func(b []byte) []byte { le.PutUint32(b[8:], 2); return b }, "version 2, want 1"},
		{"no profile", func(b []byte) []byte { le.PutUint32(b[12:], 0); return b }, "unknown profile 0"},
		{"fabric profile", func(b []byte) []byte { le.PutUint32(b[12:], 2); return b }, "unknown profile 2"},
		{"no ranks", func(b []byte) []byte { le.PutUint32(b[36:], 0); return b }, "rank count 0"},
		{"too many ranks", func(b []byte) []byte { le.PutUint32(b[36:], 1025); return b }, "rank count 1025"},
		{"rank = count", func(b []byte) []byte { le.PutUint32(b[32:], 4); return b }, "rank 4 out of range for 4 ranks"},
		{"no mapping", func(b []byte) []byte { le.PutUint64(b[40:], 0); return b }, "mapping size 0"},
		{"empty handle", func(b []byte) []byte { clear(b[48:]); return b }, "empty handle"},
		{"unterminated handle", func(b []byte) []byte {
			copy(b[48:], bytes.Repeat([]byte{'x'}, 64))
			return b
		}, "fills its 64 bytes without a NUL"},
		{"garbage after NUL", func(b []byte) []byte { b[111] = 'z'; return b }, "byte 63 of the handle's NUL padding is 0x7a"},
		{"garbage right after NUL", func(b []byte) []byte { b[48+23] = 1; return b }, "byte 23 of the handle's NUL padding is 0x1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := DecodeDescriptor(c.mut(EncodeDescriptor(validDescriptor())))
			if err == nil || !strings.HasPrefix(err.Error(), "ValueError: comm: bad global domain descriptor: ") ||
				!strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
			if d != (Descriptor{}) {
				t.Errorf("a rejected decode returned %v", d)
			}
		})
	}
	for _, h := range []string{strings.Repeat("h", 64), "a\x00b"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("EncodeDescriptor accepted the handle %q", h)
				}
			}()
			d := validDescriptor()
			d.Handle = h
			EncodeDescriptor(d)
		}()
	}
}

// Every accepted encoding is canonical: encoding the result gives the
// same bytes back.
func FuzzDecodeDescriptor(f *testing.F) {
	f.Add(EncodeDescriptor(validDescriptor()))
	f.Add(EncodeDescriptor(sampleDescriptor()))
	f.Add(make([]byte, DescriptorSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeDescriptor(b)
		if err != nil {
			return
		}
		if again := EncodeDescriptor(d); !bytes.Equal(again, b) {
			t.Errorf("decoded %v from %x, which encodes to %x", d, b, again)
		}
	})
}

// ---- helpers for global domains ----

var globalSeq atomic.Uint64

// newGlobalReq is a fresh domain; its id has several hex digits, so that
// names are checked with the id in hex.
func newGlobalReq(n, size int) GlobalRequest {
	return GlobalRequest{DomainID: 0xd00d0000 + globalSeq.Add(1), Generation: 1, Name: "gtest",
		Ranks: n, WindowSize: size, Timeout: 20 * time.Second}
}

// globalDomain is a domain whose ranks run in this process, rank r on
// chips[r], grouped into nodes of perNode ranks.
type globalDomain struct {
	req     GlobalRequest
	chips   []hal.Chip
	perNode int
	ranks   []*GlobalRank
	table   []Descriptor
}

// eachNode runs f for every node concurrently, each node handling its
// ranks in order, as a node of the broker's transaction does.
func (d *globalDomain) eachNode(f func(rank int) error) error {
	errs := make([]error, len(d.chips))
	var wg sync.WaitGroup
	for first := 0; first < len(d.chips); first += d.perNode {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := first; r < min(first+d.perNode, len(d.chips)); r++ {
				errs[r] = f(r)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// prepareDomain prepares every rank and gathers the table through the
// wire encoding; the ranks are released at cleanup.
func prepareDomain(t *testing.T, req GlobalRequest, chips []hal.Chip, perNode int) *globalDomain {
	t.Helper()
	d := &globalDomain{req: req, chips: chips, perNode: perNode,
		ranks: make([]*GlobalRank, req.Ranks), table: make([]Descriptor, req.Ranks)}
	t.Cleanup(func() { d.release(t) })
	wire := make([][]byte, req.Ranks)
	err := d.eachNode(func(r int) error {
		g, desc, err := PrepareGlobal(req, r, chips[r])
		d.ranks[r] = g
		if err == nil {
			wire[r] = EncodeDescriptor(desc)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, b := range wire {
		if d.table[r], err = DecodeDescriptor(b); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func (d *globalDomain) importAll(t *testing.T) {
	t.Helper()
	if err := d.eachNode(func(r int) error { return d.ranks[r].Import(d.table) }); err != nil {
		t.Fatal(err)
	}
}

func (d *globalDomain) commitAll(t *testing.T) {
	t.Helper()
	if err := d.eachNode(func(r int) error { return d.ranks[r].Commit() }); err != nil {
		t.Fatal(err)
	}
}

func (d *globalDomain) views(t *testing.T) []*View {
	t.Helper()
	views := make([]*View, len(d.ranks))
	for r, g := range d.ranks {
		v, err := Open(d.chips[r], g.DeviceCtx())
		if err != nil {
			t.Fatal(err)
		}
		views[r] = v
	}
	return views
}

func (d *globalDomain) release(t *testing.T) {
	t.Helper()
	for _, g := range d.ranks {
		if g != nil {
			if err := g.Release(); err != nil {
				t.Error(err)
			}
		}
	}
}

// globalObjects lists what of one generation of a domain exists: names in
// /dev/shm (under this process's prefix) and mappings in the cache.
func globalObjects(req GlobalRequest) []string {
	stem := globalStem(req.DomainID, req.Generation)
	left, _ := shm.Leftovers(shm.Prefix() + stem)
	cacheMu.Lock()
	defer cacheMu.Unlock()
	for k := range cache {
		if strings.Contains(k, stem) {
			left = append(left, "cached "+k)
		}
	}
	return left
}

// wantGone checks that nothing of the domain is left: no name, no cached
// mapping, no region on any chip.
func wantGone(t *testing.T, req GlobalRequest, chips []hal.Chip) {
	t.Helper()
	if left := globalObjects(req); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	for i, c := range chips {
		if a, w := c.Live(); a != 0 || w != 0 {
			t.Errorf("chip %d: %d allocations, %d windows left", i, a, w)
		}
	}
}

type live struct{ allocs, windows int }

func liveOf(c hal.Chip) live {
	a, w := c.Live()
	return live{a, w}
}

// refs is the number of holders of a cached object (0 if not cached).
func refs(name string) int {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if o := cache[name]; o != nil {
		return o.refs
	}
	return 0
}

// atomicLoad64 reads a window word as a kernel would.
func atomicLoad64(t *testing.T, chip hal.Chip, addr uint64) int64 {
	t.Helper()
	b := mustBytes(t, chip, addr, 8)
	return atomic.LoadInt64((*int64)(unsafe.Pointer(&b[0])))
}

// barrierRounds runs rounds of the domain barrier on every view
// concurrently. Before each round a rank publishes the round in its own
// window (word 64); after it, it must see every rank's word at least
// there: the barrier orders the stores, across nodes and processes.
func barrierRounds(t *testing.T, views []*View, chips []hal.Chip, rounds int) {
	t.Helper()
	var wg sync.WaitGroup
	for i, v := range views {
		wg.Add(1)
		go func() {
			defer wg.Done()
			own, _ := v.Base(v.Rank())
			for k := 1; k <= rounds; k++ {
				if err := v.Notify(v.Rank(), own+64, 8, int64(k), "set"); err != nil {
					t.Error(err)
					return
				}
				if err := v.Barrier(20 * time.Second); err != nil {
					t.Error(err)
					return
				}
				for p := range v.Size() {
					base, _ := v.Base(p)
					if got := atomicLoad64(t, chips[i], base+64); got < int64(k) {
						t.Errorf("rank %d after barrier round %d sees rank %d at round %d", v.Rank(), k, p, got)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// ---- the domain across nodes in one process ----

func TestGlobalFourRanksTwoNodes(t *testing.T) {
	clean(t)
	const size = 8192
	chips := openChips(t, 4)
	req := newGlobalReq(4, size)
	req.Name = "g4"
	d := prepareDomain(t, req, chips, 2)
	for r, g := range d.ranks {
		want := Descriptor{Profile: ProfileSim, DomainID: req.DomainID, Generation: 1, Rank: uint32(r), Ranks: 4,
			MappingSize: size, Handle: fmt.Sprintf("%sgdom-%x-1-r%d", shm.Prefix(), req.DomainID, r)}
		if d.table[r] != want || g.Descriptor() != want {
			t.Errorf("rank %d exported %v, want %v", r, d.table[r], want)
		}
		if b := mustBytes(t, chips[r], g.WindowBase(), size); slices.ContainsFunc(b, func(x byte) bool { return x != 0 }) {
			t.Errorf("rank %d's window is not zero", r)
		}
		if g.DeviceCtx() != 0 || g.Imported() || g.Committed() {
			t.Errorf("rank %d after prepare: ctx %#x, imported %v, committed %v", r, g.DeviceCtx(), g.Imported(), g.Committed())
		}
		if err := g.Commit(); err == nil || !strings.Contains(err.Error(), "commit before import") {
			t.Errorf("commit before import: %v", err)
		}
		if bases := g.Bases(); slices.IndexFunc(bases, func(b uint64) bool { return b != 0 }) != r {
			t.Errorf("rank %d after prepare maps %#x", r, bases)
		}
	}
	if got := globalObjects(req); len(got) != 5*2 { // 4 windows and the header, named and cached
		t.Errorf("objects after prepare: %v", got)
	}

	d.importAll(t)
	for r, g := range d.ranks {
		if !g.Imported() || g.DeviceCtx() == 0 || g.Committed() {
			t.Errorf("rank %d after import: imported %v, ctx %#x, committed %v", r, g.Imported(), g.DeviceCtx(), g.Committed())
		}
		if _, err := Open(chips[r], g.DeviceCtx()); err == nil {
			t.Errorf("rank %d: a kernel opened the domain before commit", r)
		}
		if got := liveOf(chips[r]); got != (live{1, 5}) {
			t.Errorf("chip %d after import: %+v, want the context and 4 windows and the header", r, got)
		}
	}
	d.commitAll(t)
	views := d.views(t)
	for r, v := range views {
		if v.Rank() != r || v.Size() != 4 || v.WindowSize() != size || v.AllocationID() != req.DomainID || v.Name() != "g4" {
			t.Errorf("view %d: rank %d size %d window %d id %d name %q", r, v.Rank(), v.Size(), v.WindowSize(), v.AllocationID(), v.Name())
		}
		if !d.ranks[r].Committed() {
			t.Errorf("rank %d not committed", r)
		}
	}

	// Notify/wait across nodes: every rank signals the rank at the same
	// place on the other node, who answers back.
	var wg sync.WaitGroup
	for r, v := range views {
		wg.Add(1)
		go func() {
			defer wg.Done()
			peer := (r + 2) % 4
			pb, _ := v.Base(peer)
			own, _ := v.Base(r)
			if err := v.Notify(peer, pb+8*uint64(r), 8, int64(100+r), "set"); err != nil {
				t.Error(err)
				return
			}
			if got, err := v.Wait(own+8*uint64(peer), 8, int64(100+peer), "==", 20*time.Second); err != nil || got != int64(100+peer) {
				t.Errorf("rank %d waiting for rank %d: %d, %v", r, peer, got, err)
			}
			// And every rank adds into rank 1's counter.
			b1, _ := v.Base(1)
			if err := v.Notify(1, b1+256, 4, 1, "add"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got, err := views[1].Wait(d.ranks[1].WindowBase()+256, 4, 4, "==", 20*time.Second); err != nil {
		t.Errorf("rank 1's counter: %d, %v", got, err)
	}

	// Plain data stored by rank 3 (node B) into rank 0's window (node A),
	// ordered by the barrier of all four.
	if err := chips[3].CopyIn(d.ranks[3].Bases()[0]+4096, []byte("from rank 3")); err != nil {
		t.Fatal(err)
	}
	barrierRounds(t, views, chips, 20)
	if got := string(mustBytes(t, chips[0], d.ranks[0].WindowBase()+4096, 11)); got != "from rank 3" {
		t.Errorf("rank 0's window holds %q", got)
	}

	ctxs := make([]uint64, 4)
	for r, g := range d.ranks {
		ctxs[r] = g.DeviceCtx()
	}
	d.release(t)
	wantGone(t, req, chips)
	for r, g := range d.ranks {
		if _, err := Open(chips[r], ctxs[r]); err == nil {
			t.Errorf("rank %d: the released context still opens", r)
		}
		if err := views[r].Barrier(time.Second); err == nil {
			t.Errorf("rank %d: a view of the released domain still works", r)
		}
		if g.DeviceCtx() != 0 || g.WindowBase() != 0 || g.Imported() || g.Committed() {
			t.Errorf("rank %d after release: ctx %#x base %#x", r, g.DeviceCtx(), g.WindowBase())
		}
	}
}

// A domain of one rank needs nothing but itself.
func TestGlobalSingleRank(t *testing.T) {
	clean(t)
	chips := openChips(t, 1)
	req := newGlobalReq(1, 4096)
	d := prepareDomain(t, req, chips, 1)
	d.importAll(t)
	d.commitAll(t)
	v := d.views(t)[0]
	if err := v.Barrier(time.Second); err != nil {
		t.Error(err)
	}
	if err := v.Notify(0, d.ranks[0].WindowBase(), 8, 5, "set"); err != nil {
		t.Error(err)
	}
	if got, err := v.Wait(d.ranks[0].WindowBase(), 8, 5, "==", time.Second); got != 5 || err != nil {
		t.Errorf("wait: %d, %v", got, err)
	}
	d.release(t)
	wantGone(t, req, chips)
}

// ---- two real processes ----

// globalChildEnv carries the GlobalRequest to the child of
// TestGlobalTwoProcesses; descriptors travel through pipes (fd 3 to the
// parent, fd 4 from it).
const globalChildEnv = "SIMPLER_COMM_GLOBAL_CHILD"

// Two nodes in two processes, each with its own name prefix: the parent
// hosts ranks 0 and 1, the child ranks 2 and 3. They share nothing but the
// request and the descriptor tables they exchange; signals, data and the
// barrier cross the boundary, and once both have released nothing of
// either is left in /dev/shm.
func TestGlobalTwoProcesses(t *testing.T) {
	if spec := os.Getenv(globalChildEnv); spec != "" {
		globalChild(t, spec)
		return
	}
	clean(t)
	const size = 8192
	chips := openChips(t, 2)
	req := newGlobalReq(4, size)
	req.Generation = 7
	spec, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	fromChild, childOut, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	childIn, toChild, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGlobalTwoProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), globalChildEnv+"="+string(spec), "GORACE=atexit_sleep_ms=0")
	cmd.ExtraFiles = []*os.File{childOut, childIn}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Start()
	childOut.Close() // the child's ends: EOF reaches us when it exits
	childIn.Close()
	if err != nil {
		fromChild.Close()
		toChild.Close()
		t.Fatal(err)
	}
	var once sync.Once
	var childErr error
	reap := func() error { once.Do(func() { childErr = cmd.Wait() }); return childErr }
	t.Cleanup(func() { reap() })
	// Registered later, so run first: a failing parent lets the child see
	// EOF instead of blocking.
	t.Cleanup(func() { fromChild.Close(); toChild.Close() })
	fail := func(format string, args ...any) {
		t.Helper()
		fromChild.Close()
		toChild.Close()
		reap()
		t.Fatalf("%s\nchild output:\n%s", fmt.Sprintf(format, args...), out.String())
	}

	// This node: ranks 0 and 1. The table's other half comes from the
	// child.
	d := &globalDomain{req: req, chips: chips, perNode: 2, ranks: make([]*GlobalRank, 2), table: make([]Descriptor, 4)}
	t.Cleanup(func() { d.release(t) })
	table := make([]byte, 4*DescriptorSize)
	for r := range 2 {
		g, desc, err := PrepareGlobal(req, r, chips[r])
		if err != nil {
			fail("prepare: %v", err)
		}
		d.ranks[r] = g
		copy(table[r*DescriptorSize:], EncodeDescriptor(desc))
	}
	if _, err := io.ReadFull(fromChild, table[2*DescriptorSize:]); err != nil {
		fail("reading the child's descriptors: %v", err)
	}
	if _, err := toChild.Write(table); err != nil {
		fail("sending the table: %v", err)
	}
	for r := range 4 {
		if d.table[r], err = DecodeDescriptor(table[r*DescriptorSize : (r+1)*DescriptorSize]); err != nil {
			fail("descriptor %d: %v", r, err)
		}
	}
	childPrefix := "simpler-" + strconv.Itoa(cmd.Process.Pid) + "-"
	if !strings.HasPrefix(d.table[2].Handle, childPrefix) {
		fail("rank 2's window %q is not under the child's prefix %s", d.table[2].Handle, childPrefix)
	}
	for r := range 2 {
		if err := d.ranks[r].Import(d.table); err != nil {
			fail("import: %v", err)
		}
		if err := d.ranks[r].Commit(); err != nil {
			fail("commit: %v", err)
		}
	}
	views := []*View{openGlobalView(t, chips[0], d.ranks[0]), openGlobalView(t, chips[1], d.ranks[1])}
	b2, _ := views[0].Base(2)
	if err := views[0].Notify(2, b2, 8, 7, "set"); err != nil {
		t.Fatal(err)
	}
	if got, err := views[1].Wait(d.ranks[1].WindowBase(), 8, 8, "==", 20*time.Second); err != nil || got != 8 {
		fail("reply from rank 3: %d, %v", got, err)
	}
	b3, _ := views[1].Base(3)
	if err := chips[1].CopyIn(b3+4096, []byte("from node A")); err != nil {
		t.Fatal(err)
	}
	barrierRounds(t, views, chips, 50)
	if got := string(mustBytes(t, chips[0], d.ranks[0].WindowBase()+4096, 11)); got != "from node B" {
		t.Errorf("rank 0's window holds %q", got)
	}
	// Release while the child may still run: it keeps what it mapped.
	d.release(t)
	if err := reap(); err != nil {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	if left, _ := shm.Leftovers(childPrefix); len(left) > 0 {
		t.Errorf("the child left %v", left)
	}
	wantGone(t, req, chips)
}

func openGlobalView(t *testing.T, chip hal.Chip, g *GlobalRank) *View {
	t.Helper()
	v, err := Open(chip, g.DeviceCtx())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// globalChild is the second node of TestGlobalTwoProcesses: ranks 2 and 3.
func globalChild(t *testing.T, spec string) {
	clean(t)
	var req GlobalRequest
	if err := json.Unmarshal([]byte(spec), &req); err != nil {
		t.Fatal(err)
	}
	toParent, fromParent := os.NewFile(3, "to-parent"), os.NewFile(4, "from-parent")
	defer toParent.Close()
	defer fromParent.Close()
	chips := openChips(t, 2)
	ranks := make([]*GlobalRank, 2)
	t.Cleanup(func() {
		for _, g := range ranks {
			if g != nil {
				if err := g.Release(); err != nil {
					t.Error(err)
				}
			}
		}
	})
	var mine []byte
	for i := range 2 {
		g, desc, err := PrepareGlobal(req, 2+i, chips[i])
		if err != nil {
			t.Fatal(err)
		}
		ranks[i] = g
		mine = append(mine, EncodeDescriptor(desc)...)
	}
	if _, err := toParent.Write(mine); err != nil {
		t.Fatal(err)
	}
	wire := make([]byte, 4*DescriptorSize)
	if _, err := io.ReadFull(fromParent, wire); err != nil {
		t.Fatal(err)
	}
	table := make([]Descriptor, 4)
	for r := range table {
		var err error
		if table[r], err = DecodeDescriptor(wire[r*DescriptorSize : (r+1)*DescriptorSize]); err != nil {
			t.Fatal(err)
		}
	}
	views := make([]*View, 2)
	for i, g := range ranks {
		if err := g.Import(table); err != nil {
			t.Fatal(err)
		}
		if err := g.Commit(); err != nil {
			t.Fatal(err)
		}
		views[i] = openGlobalView(t, chips[i], g)
	}
	if _, err := views[0].Wait(ranks[0].WindowBase(), 8, 7, "==", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	b1, _ := views[1].Base(1)
	if err := views[1].Notify(1, b1, 8, 8, "set"); err != nil {
		t.Fatal(err)
	}
	b0, _ := views[0].Base(0)
	if err := chips[0].CopyIn(b0+4096, []byte("from node B")); err != nil {
		t.Fatal(err)
	}
	barrierRounds(t, views, chips, 50)
	if got := string(mustBytes(t, chips[1], ranks[1].WindowBase()+4096, 11)); got != "from node A" {
		t.Errorf("rank 3's window holds %q", got)
	}
}

// ---- import: checks, atomicity, idempotence ----

func TestGlobalImportIsAtomic(t *testing.T) {
	clean(t)
	chips := openChips(t, 4)
	req := newGlobalReq(4, 4096)
	d := prepareDomain(t, req, chips, 2)
	g, chip := d.ranks[1], chips[1]
	before := liveOf(chip)
	hdrName := globalHeaderName(shm.Prefix(), req.DomainID, req.Generation)

	// The third peer mapping fails: the two before it are taken back.
	var calls int
	var mapped []uint64
	testHookGlobalMapPeer = func(rank, peer int) error {
		if rank != 1 {
			return nil
		}
		if calls++; calls == 3 {
			mapped = slices.Clone(g.bases) // g.mu is held by Import: read directly
			return errors.New("injected")
		}
		return nil
	}
	t.Cleanup(func() { testHookGlobalMapPeer = nil })
	err := g.Import(d.table)
	wantErrPrefix(t, err, fmt.Sprintf("RuntimeError: comm: global domain \"gtest\" (id %d, generation 1) rank 1: mapping the window of rank 3: injected", req.DomainID))
	testHookGlobalMapPeer = nil
	if calls != 3 {
		t.Fatalf("%d peer mappings tried, want 3", calls)
	}
	if got := liveOf(chip); got != before {
		t.Errorf("chip after the failed import: %+v, before it %+v", got, before)
	}
	if n := len(slices.DeleteFunc(mapped, func(b uint64) bool { return b == 0 })); n != 3 {
		t.Fatalf("%d windows mapped when the third peer failed, want own and 2 peers", n)
	}
	for j, base := range mapped {
		if j != 1 && base != 0 {
			if _, err := chip.Bytes(base, 1); err == nil {
				t.Errorf("rank %d's window is still mapped at %#x", j, base)
			}
		}
	}
	assertPrepared(t, g, chip)
	// Every other rank's window and the header are held by their owners
	// only: the failed import closed what it opened.
	for j := range 4 {
		if n := refs(d.table[j].Handle); n != 1 {
			t.Errorf("rank %d's window has %d holders, want its owner", j, n)
		}
	}
	if n := refs(hdrName); n != 1 {
		t.Errorf("the header has %d holders", n)
	}

	// A failure while opening: rank 3's window under a name that does not
	// exist (a well-formed one, so the table passes the checks).
	bad := slices.Clone(d.table)
	bad[3].Handle = "simpler-0-" + globalWindowSuffix(req.DomainID, req.Generation, 3)
	err = g.Import(bad)
	if err == nil || !strings.Contains(err.Error(), "the window of rank 3 (simpler-0-gdom-") {
		t.Errorf("import of a missing window: %v", err)
	}
	if got := liveOf(chip); got != before {
		t.Errorf("chip after the failed open: %+v, before it %+v", got, before)
	}
	if n := refs(d.table[0].Handle) + refs(d.table[2].Handle) + refs(hdrName); n != 3 {
		t.Errorf("peers opened before the failure still held: %d holders", n)
	}
	assertPrepared(t, g, chip)

	// The retry with the real table succeeds and maps every peer once.
	if err := g.Import(d.table); err != nil {
		t.Fatal(err)
	}
	if got := liveOf(chip); got != (live{before.allocs + 1, before.windows + 4}) {
		t.Errorf("chip after the import: %+v, before %+v: want the context, 3 peers and the header more", got, before)
	}
	for j := range 4 {
		want := 1
		if j != 1 {
			want = 2
		}
		if n := refs(d.table[j].Handle); n != want {
			t.Errorf("rank %d's window has %d holders, want %d", j, n, want)
		}
	}
	// The other ranks import too; the domain works.
	for r, rk := range d.ranks {
		if r != 1 {
			if err := rk.Import(d.table); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.commitAll(t)
	barrierRounds(t, d.views(t), chips, 3)
	d.release(t)
	wantGone(t, req, chips)
}

// assertPrepared checks that g is as Prepare left it.
func assertPrepared(t *testing.T, g *GlobalRank, chip hal.Chip) {
	t.Helper()
	if g.Imported() || g.DeviceCtx() != 0 {
		t.Errorf("after a failed import: imported %v, ctx %#x", g.Imported(), g.DeviceCtx())
	}
	bases := g.Bases()
	for j, b := range bases {
		if (b != 0) != (j == g.Rank()) {
			t.Errorf("after a failed import the bases are %#x", bases)
			break
		}
	}
	if _, err := chip.Bytes(g.WindowBase(), 1); err != nil {
		t.Errorf("own window: %v", err)
	}
}

func TestGlobalImportChecksTable(t *testing.T) {
	clean(t)
	chips := openChips(t, 3)
	req := newGlobalReq(3, 4096)
	d := prepareDomain(t, req, chips, 3)
	g := d.ranks[1]
	before := liveOf(chips[1])
	id := req.DomainID
	with := func(j int, f func(*Descriptor)) []Descriptor {
		tab := slices.Clone(d.table)
		f(&tab[j])
		return tab
	}
	cases := []struct {
		name  string
		table []Descriptor
		want  string
	}{
		{"short", d.table[:2], "the table has 2 descriptors for 3 ranks"},
		{"long", append(slices.Clone(d.table), d.table[0]), "the table has 4 descriptors for 3 ranks"},
		{"out of order", []Descriptor{d.table[0], d.table[2], d.table[1]}, "descriptor 1 of the table: it is rank 2's; the table must be in rank order"},
		{"other generation", with(2, func(x *Descriptor) { x.Generation = 2 }),
			fmt.Sprintf("descriptor 2 of the table: domain %d generation 2, want domain %d generation 1", id, id)},
		{"other domain", with(0, func(x *Descriptor) { x.DomainID++ }),
			fmt.Sprintf("descriptor 0 of the table: domain %d generation 1, want domain %d generation 1", id+1, id)},
		{"profile", with(0, func(x *Descriptor) { x.Profile = 2 }), "descriptor 0 of the table: profile profile(2), want sim"},
		{"rank count", with(2, func(x *Descriptor) { x.Ranks = 4 }), "descriptor 2 of the table: 4 ranks, want 3"},
		{"mapping size", with(0, func(x *Descriptor) { x.MappingSize = 8192 }), "descriptor 0 of the table: mapping size 8192, want 4096"},
		{"another rank's window", with(2, func(x *Descriptor) { x.Handle = d.table[0].Handle }), "is not the name of rank 2's window of this domain"},
		{"not simpler's", with(0, func(x *Descriptor) { x.Handle = strings.Replace(x.Handle, "simpler-", "other-", 1) }), "is not the name of rank 0's window"},
		{"a path", with(0, func(x *Descriptor) { x.Handle = "simpler-/../" + globalWindowSuffix(id, 1, 0) }), "is not the name of rank 0's window"},
		{"not ours", with(1, func(x *Descriptor) { x.Handle = "simpler-1-" + globalWindowSuffix(id, 1, 1) }),
			"descriptor 1 of the table is {sim domain"},
	}
	for _, c := range cases {
		err := g.Import(c.table)
		if err == nil || !strings.HasPrefix(err.Error(), "ValueError: comm: global domain") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\n  want %q", c.name, err, c.want)
		}
		if got := liveOf(chips[1]); got != before {
			t.Errorf("%s: chip %+v, before %+v", c.name, got, before)
		}
	}
	assertPrepared(t, g, chips[1])
	d.importAll(t)
	d.commitAll(t)
	d.release(t)
	wantGone(t, req, chips)
}

func TestGlobalImportIdempotent(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	req := newGlobalReq(2, 4096)
	d := prepareDomain(t, req, chips, 1)
	d.importAll(t)
	g := d.ranks[0]
	ctx, bases, before := g.DeviceCtx(), g.Bases(), liveOf(chips[0])
	if err := g.Import(slices.Clone(d.table)); err != nil {
		t.Errorf("a second import of the same table: %v", err)
	}
	// A conflicting table, even a well-formed one, is refused.
	other := slices.Clone(d.table)
	other[1].Handle = "simpler-1-" + globalWindowSuffix(req.DomainID, req.Generation, 1)
	err := g.Import(other)
	if err == nil || !strings.Contains(err.Error(), "already imported with a different table (descriptor 1 is {sim") {
		t.Errorf("a conflicting import: %v", err)
	}
	err = g.Import(d.table[:1])
	if err == nil || !strings.Contains(err.Error(), "already imported with a different table (1 descriptors, had 2)") {
		t.Errorf("a conflicting import: %v", err)
	}
	if g.DeviceCtx() != ctx || !slices.Equal(g.Bases(), bases) || liveOf(chips[0]) != before || !g.Imported() {
		t.Errorf("a repeated import changed the rank: ctx %#x→%#x, bases %#x→%#x, chip %+v→%+v",
			ctx, g.DeviceCtx(), bases, g.Bases(), before, liveOf(chips[0]))
	}
	d.commitAll(t)
	if err := g.Commit(); err != nil {
		t.Errorf("a second commit: %v", err)
	}
	if err := g.Import(d.table); err != nil {
		t.Errorf("import after commit of the same table: %v", err)
	}
	views := d.views(t)
	b1, _ := views[0].Base(1)
	if err := views[0].Notify(1, b1, 8, 3, "set"); err != nil {
		t.Fatal(err)
	}
	if got, err := views[1].Wait(d.ranks[1].WindowBase(), 8, 3, "==", 20*time.Second); err != nil {
		t.Errorf("after the repeated imports: %d, %v", got, err)
	}
	d.release(t)
	wantGone(t, req, chips)
}

// Rank 0 gone before a peer imports: the peer waits for the header only
// until its timeout, and is left as prepared.
func TestGlobalImportHeaderTimeout(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	req := newGlobalReq(2, 4096)
	d := prepareDomain(t, req, chips, 1)
	if err := d.ranks[0].Abort(); err != nil {
		t.Fatal(err)
	}
	d.ranks[1].req.Timeout = 50 * time.Millisecond // this node's own bound
	start := time.Now()
	err := d.ranks[1].Import(d.table)
	wantErrPrefix(t, err, fmt.Sprintf("TimeoutError: comm: global domain \"gtest\" (id %d, generation 1) rank 1: waited 50ms for rank 0's header %s",
		req.DomainID, globalHeaderName(shm.Prefix(), req.DomainID, 1)))
	if el := time.Since(start); el < 50*time.Millisecond || el > 10*time.Second {
		t.Errorf("gave up after %v", el)
	}
	assertPrepared(t, d.ranks[1], chips[1])
	if got := liveOf(chips[1]); got != (live{0, 1}) {
		t.Errorf("chip %+v", got)
	}
	d.release(t)
	wantGone(t, req, chips)
}

// ---- invalidate, release, abort ----

func TestGlobalInvalidate(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	req := newGlobalReq(2, 4096)
	d := prepareDomain(t, req, chips, 1)
	d.importAll(t)
	d.commitAll(t)
	views := d.views(t)
	g := d.ranks[1]
	g.Invalidate()
	g.Invalidate()
	if g.Committed() {
		t.Error("committed after invalidate")
	}
	if _, err := Open(chips[1], g.DeviceCtx()); err == nil {
		t.Error("an invalidated context opens")
	}
	wantErr(t, views[1].Barrier(time.Second), "RuntimeError: comm.barrier: domain \"gtest\" rank 1 was released")
	if err := g.Commit(); err == nil || !strings.Contains(err.Error(), "commit after invalidate") {
		t.Errorf("commit after invalidate: %v", err)
	}
	if err := g.Import(d.table); err == nil || !strings.Contains(err.Error(), "import after invalidate") {
		t.Errorf("import after invalidate: %v", err)
	}
	// The other rank is untouched.
	if !d.ranks[0].Committed() {
		t.Error("rank 0 lost its commit")
	}
	if err := views[0].Notify(0, d.ranks[0].WindowBase(), 8, 1, "set"); err != nil {
		t.Error(err)
	}
	d.release(t)
	if err := g.Commit(); err == nil || !strings.Contains(err.Error(), "commit after release") {
		t.Errorf("commit after release: %v", err)
	}
	if err := g.Import(d.table); err == nil || !strings.Contains(err.Error(), "import after release") {
		t.Errorf("import after release: %v", err)
	}
	wantGone(t, req, chips)
}

func TestGlobalAbort(t *testing.T) {
	phases := []struct {
		name string
		// reach brings the domain to the phase; it may leave ranks in
		// different phases, as a transaction that failed midway does.
		reach func(t *testing.T, d *globalDomain)
	}{
		{"after prepare", func(t *testing.T, d *globalDomain) {}},
		{"after partial import", func(t *testing.T, d *globalDomain) {
			for _, g := range d.ranks[:2] {
				if err := g.Import(d.table); err != nil {
					t.Fatal(err)
				}
			}
			// Rank 2 fails midway through its peers.
			testHookGlobalMapPeer = func(rank, peer int) error {
				if rank == 2 && peer == 1 {
					return errors.New("injected")
				}
				return nil
			}
			defer func() { testHookGlobalMapPeer = nil }()
			if err := d.ranks[2].Import(d.table); err == nil {
				t.Fatal("the injected failure did not fail the import")
			}
		}},
		{"after commit", func(t *testing.T, d *globalDomain) {
			d.importAll(t)
			d.commitAll(t)
			views := d.views(t)
			b3, _ := views[0].Base(3)
			if err := views[0].Notify(3, b3, 8, 1, "set"); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, ph := range phases {
		t.Run(ph.name, func(t *testing.T) {
			clean(t)
			chips := openChips(t, 4)
			req := newGlobalReq(4, 4096)
			d := prepareDomain(t, req, chips, 2)
			ph.reach(t, d)
			// Every node aborts, in an order the transaction may pick:
			// rank 0 (the header's creator) first.
			for r, g := range d.ranks {
				if err := g.Abort(); err != nil {
					t.Errorf("abort rank %d: %v", r, err)
				}
				if left := liveOf(chips[r]); left != (live{}) {
					t.Errorf("chip %d after abort: %+v", r, left)
				}
			}
			wantGone(t, req, chips)
			for r, g := range d.ranks {
				if err := g.Release(); err != nil {
					t.Errorf("release after abort of rank %d: %v", r, err)
				}
				if err := g.Abort(); err != nil {
					t.Errorf("a second abort of rank %d: %v", r, err)
				}
			}
			wantGone(t, req, chips)
		})
	}
}

// Ranks released in any order: a peer that still maps rank 0's header
// and windows keeps working after rank 0 has released (and unlinked the
// header's name).
func TestGlobalReleaseOrder(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	req := newGlobalReq(2, 4096)
	d := prepareDomain(t, req, chips, 1)
	d.importAll(t)
	d.commitAll(t)
	views := d.views(t)
	if err := d.ranks[0].Release(); err != nil {
		t.Fatal(err)
	}
	if left, _ := shm.Leftovers(globalHeaderName(shm.Prefix(), req.DomainID, req.Generation)); len(left) != 0 {
		t.Errorf("the header is still named after its creator released: %v", left)
	}
	if err := d.ranks[0].Release(); err != nil {
		t.Errorf("a second release: %v", err)
	}
	v := views[1]
	own := d.ranks[1].WindowBase()
	if err := v.Notify(1, own, 8, 9, "set"); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Wait(own, 8, 9, "==", time.Second); got != 9 || err != nil {
		t.Errorf("rank 1 after rank 0 released: %d, %v", got, err)
	}
	b0, _ := v.Base(0)
	if err := chips[1].CopyIn(b0, []byte("still mapped")); err != nil {
		t.Error(err)
	}
	d.release(t)
	wantGone(t, req, chips)
}

// ---- prepare ----

// fabricOnly is a platform without the sim profile.
type fabricOnly struct{ hal.Platform }

func (fabricOnly) CommProfiles() []string { return []string{"a3-fabric-v1"} }

type onPlatform struct {
	hal.Chip
	p hal.Platform
}

func (c onPlatform) Platform() hal.Platform { return c.p }

func TestPrepareGlobalChecks(t *testing.T) {
	clean(t)
	chips := openChips(t, 1)
	chip := chips[0]
	good := newGlobalReq(2, 4096)
	id := good.DomainID
	cases := []struct {
		name string
		mut  func(*GlobalRequest)
		rank int
		chip hal.Chip
		want string
	}{
		{"no chip", nil, 0, nil, "ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): no chip"},
		{"rank", nil, 2, chip, "IndexError: comm: preparing global domain \"gtest\" (id %d, generation 1): rank 2 out of range for 2 ranks"},
		{"negative rank", nil, -1, chip, "IndexError: comm: preparing global domain \"gtest\" (id %d, generation 1): rank -1 out of range for 2 ranks"},
		{"no ranks", func(q *GlobalRequest) { q.Ranks = 0 }, 0, chip, "ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): 0 ranks; want 1..1024"},
		{"window", func(q *GlobalRequest) { q.WindowSize = 0 }, 0, chip, "ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): window size must be in 1..1099511627776, got 0"},
		{"timeout", func(q *GlobalRequest) { q.Timeout = 0 }, 0, chip, "ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): timeout must be > 0, got 0s"},
		{"prefix", func(q *GlobalRequest) { q.Prefix = "other-" }, 0, chip, "ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): name prefix \"other-\" must start with \"simpler-\" and contain no \"/\""},
		{"long prefix", func(q *GlobalRequest) { q.Prefix = "simpler-" + strings.Repeat("p", 40) + "-" }, 1, chip,
			"ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): the window name \"simpler-ppp"},
		{"profile", nil, 0, onPlatform{chip, fabricOnly{chip.Platform()}},
			"ValueError: comm: preparing global domain \"gtest\" (id %d, generation 1): device 0 is on platform a2a3sim, which has no \"sim\" comm profile"},
	}
	for _, c := range cases {
		q := good
		if c.mut != nil {
			c.mut(&q)
		}
		g, desc, err := PrepareGlobal(q, c.rank, c.chip)
		wantErrPrefix(t, err, fmt.Sprintf(c.want, id))
		if g != nil || desc != (Descriptor{}) {
			t.Errorf("%s: a failed prepare returned %v, %v", c.name, g, desc)
		}
	}
	wantGone(t, good, chips)
}

// Names are exclusive: preparing a rank twice fails and leaves the first
// untouched; other generations and other domains never collide.
func TestPrepareGlobalNames(t *testing.T) {
	clean(t)
	chips := openChips(t, 2)
	req := newGlobalReq(2, 4096)
	d := prepareDomain(t, req, chips, 1)
	for r := range 2 {
		before := liveOf(chips[r])
		_, _, err := PrepareGlobal(req, r, chips[r])
		if err == nil || !strings.Contains(err.Error(), "file exists") {
			t.Errorf("rank %d prepared twice: %v", r, err)
		}
		if got := liveOf(chips[r]); got != before {
			t.Errorf("the failed prepare of rank %d changed the chip: %+v → %+v", r, before, got)
		}
	}
	// The next generation and another domain, concurrently alive.
	next := req
	next.Generation++
	other := newGlobalReq(2, 4096)
	other.Generation = req.Generation
	e := prepareDomain(t, next, chips, 1)
	f := prepareDomain(t, other, chips, 1)
	for _, x := range []*globalDomain{d, e, f} {
		x.importAll(t)
		x.commitAll(t)
	}
	// A signal in one is not seen in the others.
	vd, ve, vf := d.views(t), e.views(t), f.views(t)
	b1, _ := vd[0].Base(1)
	if err := vd[0].Notify(1, b1, 8, 42, "set"); err != nil {
		t.Fatal(err)
	}
	if got, _ := vd[1].Wait(d.ranks[1].WindowBase(), 8, 42, "==", time.Second); got != 42 {
		t.Errorf("domain d: %d", got)
	}
	for _, x := range []struct {
		v *View
		g *GlobalRank
	}{{ve[1], e.ranks[1]}, {vf[1], f.ranks[1]}} {
		if got := atomicLoad64(t, chips[1], x.g.WindowBase()); got != 0 {
			t.Errorf("domain %d generation %d sees %d", x.v.AllocationID(), x.g.req.Generation, got)
		}
	}
	for _, x := range []*globalDomain{d, e, f} {
		x.release(t)
		wantGone(t, x.req, nil)
	}
	wantGone(t, req, chips)
}
