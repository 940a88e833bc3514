package hal

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

func openSim(t *testing.T, plat string, id int) *simChip {
	t.Helper()
	p, err := Lookup(plat)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.OpenChip(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*simChip)
}

func mustMalloc(t *testing.T, c Chip, n int) uint64 {
	t.Helper()
	p, err := c.Malloc(n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wantErr(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\n want %s", err, want)
	}
}

func TestMallocBasics(t *testing.T) {
	c := openSim(t, "a2a3sim", 0)
	_, err := c.Malloc(0)
	wantErr(t, err, "ValueError: malloc size must be > 0, got 0")
	_, err = c.Malloc(-5)
	wantErr(t, err, "ValueError: malloc size must be > 0, got -5")

	a := mustMalloc(t, c, 100)
	b := mustMalloc(t, c, 513)
	d := mustMalloc(t, c, 1)
	if a != simBase || b != a+512 || d != b+1024 {
		t.Errorf("addresses %#x %#x %#x: want 512-byte rounded bump from %#x", a, b, d, uint64(simBase))
	}
	mem, err := c.Bytes(b, 513)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem, make([]byte, 513)) {
		t.Error("fresh allocation is not zeroed")
	}
	if n, w := c.Live(); n != 3 || w != 0 {
		t.Errorf("Live() = %d, %d; want 3, 0", n, w)
	}
	if err := c.Free(b); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Live(); n != 2 {
		t.Errorf("Live() after free = %d, want 2", n)
	}
	// The bump pointer does not go back: a freed address stays dead.
	if e := mustMalloc(t, c, 512); e == b {
		t.Errorf("freed address %#x reused while bump space remained", b)
	}
}

func TestMallocOutOfMemory(t *testing.T) {
	c := openSim(t, "a2a3sim", 0)
	_, err := c.Malloc(65 << 30)
	wantErr(t, err, "RuntimeError: device 0 out of memory: cannot allocate 69793218560 bytes (0 of 68719476736 bytes in use)")

	c.capacity = 2048 // each 1000-byte request costs 1024
	a := mustMalloc(t, c, 1000)
	mustMalloc(t, c, 1000)
	_, err = c.Malloc(1000)
	wantErr(t, err, "RuntimeError: device 0 out of memory: cannot allocate 1000 bytes (2048 of 2048 bytes in use)")
	if err := c.Free(a); err != nil {
		t.Fatal(err)
	}
	mustMalloc(t, c, 1000)
}

func TestFreeErrors(t *testing.T) {
	c := openSim(t, "a2a3sim", 0)
	a := mustMalloc(t, c, 1000)
	win, err := c.MapWindow(make([]byte, 64), "ring")
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, c.Free(a+8), fmt.Sprintf("ValueError: free: %#x on device 0 is inside the allocation at %#x (1000 bytes); free takes the start address", a+8, a))
	// The alignment padding still belongs to the allocation.
	wantErr(t, c.Free(a+1000), fmt.Sprintf("ValueError: free: %#x on device 0 is inside the allocation at %#x (1000 bytes); free takes the start address", a+1000, a))
	wantErr(t, c.Free(win), fmt.Sprintf("ValueError: free: %#x on device 0 is a communication window; it is released with its domain, not freed", win))
	wantErr(t, c.Free(0xdead), "ValueError: free: 0xdead is not a live allocation on device 0")
	if err := c.Free(a); err != nil {
		t.Fatal(err)
	}
	wantErr(t, c.Free(a), fmt.Sprintf("ValueError: free: %#x on device 0 was already freed", a))
	if err := c.UnmapWindow(win); err != nil {
		t.Fatal(err)
	}
	wantErr(t, c.Free(win), fmt.Sprintf("ValueError: free: %#x on device 0 was a communication window, already unmapped", win))
}

func TestFreedSetIsBounded(t *testing.T) {
	c := openSim(t, "a2a3sim", 0)
	first := mustMalloc(t, c, 1)
	c.Free(first)
	for i := 0; i < freedKeep; i++ {
		c.Free(mustMalloc(t, c, 1))
	}
	if len(c.freed) != freedKeep {
		t.Errorf("freed set holds %d, want %d", len(c.freed), freedKeep)
	}
	wantErr(t, c.Free(first), fmt.Sprintf("ValueError: free: %#x is not a live allocation on device 0", first))
}

func TestHoleReuse(t *testing.T) {
	c := openSim(t, "a2a3sim", 0)
	c.limit = c.base + 4*512 // room for exactly four blocks
	var p [4]uint64
	for i := range p {
		p[i] = mustMalloc(t, c, 512)
	}
	_, err := c.Malloc(1)
	wantErr(t, err, "RuntimeError: device 0 out of address space: no free range of 512 bytes")
	c.Free(p[2])
	c.Free(p[1])
	// First fit: the lowest hole, even though p[2] was freed first.
	if got := mustMalloc(t, c, 1); got != p[1] {
		t.Errorf("reuse got %#x, want the first hole %#x", got, p[1])
	}
	// A reused start is live again, so it is no longer "already freed".
	wantErr(t, c.Free(p[2]), fmt.Sprintf("ValueError: free: %#x on device 0 was already freed", p[2]))
	if err := c.Free(p[1]); err != nil {
		t.Errorf("freeing the reused address: %v", err)
	}
	// Two adjacent holes merge into room for a larger block.
	if got := mustMalloc(t, c, 1024); got != p[1] {
		t.Errorf("1024-byte block at %#x, want %#x", got, p[1])
	}
	_, err = c.Malloc(1)
	if err == nil {
		t.Error("address space should be full again")
	}
}

func TestCopyBounds(t *testing.T) {
	c := openSim(t, "a5sim", 0)
	a := mustMalloc(t, c, 100)
	mustMalloc(t, c, 100) // a neighbour, so overruns cannot reach "outside"
	src := []byte("hello, device")
	if err := c.CopyIn(a+10, src); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(src))
	if err := c.CopyOut(out, a+10); err != nil || !bytes.Equal(out, src) {
		t.Errorf("CopyOut = %q, %v", out, err)
	}
	// Bytes aliases device memory: writes through it are visible to copies.
	b, err := c.Bytes(a, 100)
	if err != nil {
		t.Fatal(err)
	}
	b[99] = 7
	one := make([]byte, 1)
	if c.CopyOut(one, a+99); one[0] != 7 {
		t.Errorf("write through Bytes not seen: %d", one[0])
	}
	if len(b) != 100 || cap(b) != 100 {
		t.Errorf("Bytes len/cap = %d/%d, want 100/100", len(b), cap(b))
	}
	if err := c.CopyIn(a+100, nil); err != nil {
		t.Errorf("empty copy at the end of an allocation: %v", err)
	}

	over := fmt.Sprintf("overruns the allocation at %#x (100 bytes)", a)
	wantErr(t, c.CopyIn(a+90, make([]byte, 11)), fmt.Sprintf("ValueError: copy of 11 bytes at %#x on device 0 %s", a+90, over))
	wantErr(t, c.CopyOut(make([]byte, 101), a), fmt.Sprintf("ValueError: copy of 101 bytes at %#x on device 0 %s", a, over))
	// The padding past the requested size is not accessible.
	_, err = c.Bytes(a+100, 1)
	wantErr(t, err, fmt.Sprintf("ValueError: access of 1 bytes at %#x on device 0 %s", a+100, over))
	_, err = c.Bytes(a, -1)
	wantErr(t, err, "ValueError: access of -1 bytes: size must be >= 0")
	wantErr(t, c.CopyIn(0x1234, src), "ValueError: copy of 13 bytes at 0x1234 on device 0 is outside any live allocation")
	c.Free(a)
	wantErr(t, c.CopyOut(out, a), fmt.Sprintf("ValueError: copy of 13 bytes at %#x on device 0 is outside any live allocation", a))
}

func TestWindows(t *testing.T) {
	c := openSim(t, "a2a3sim", 3)
	a := mustMalloc(t, c, 10)
	shared := make([]byte, 1000)
	w, err := c.MapWindow(shared, "hccl")
	if err != nil {
		t.Fatal(err)
	}
	if w%simAlign != 0 || w == a {
		t.Errorf("window at %#x: want a fresh 512-aligned address", w)
	}
	if n, nw := c.Live(); n != 1 || nw != 1 {
		t.Errorf("Live() = %d, %d; want 1, 1", n, nw)
	}
	// The window is the caller's memory, not a copy of it.
	if err := c.CopyIn(w+5, []byte{42}); err != nil || shared[5] != 42 {
		t.Errorf("CopyIn into window: err %v, shared[5] = %d", err, shared[5])
	}
	shared[999] = 9
	if b, err := c.Bytes(w+999, 1); err != nil || b[0] != 9 {
		t.Errorf("Bytes of window = %v, %v", b, err)
	}
	wantErr(t, c.CopyIn(w+999, []byte{1, 2}),
		fmt.Sprintf(`ValueError: copy of 2 bytes at %#x on device 3 overruns the window "hccl" at %#x (1000 bytes)`, w+999, w))

	_, err = c.MapWindow(nil, "empty")
	wantErr(t, err, `ValueError: cannot map the empty window "empty" on device 3`)
	wantErr(t, c.UnmapWindow(w+1), fmt.Sprintf(`ValueError: unmap: %#x on device 3 is inside the window "hccl" at %#x (1000 bytes); unmap takes the start address`, w+1, w))
	wantErr(t, c.UnmapWindow(a), fmt.Sprintf("ValueError: unmap: %#x on device 3 is in the allocation at %#x (10 bytes), not a window; allocations are freed with free", a, a))
	wantErr(t, c.UnmapWindow(7), "ValueError: unmap: 0x7 is not a mapped window on device 3")
	if err := c.UnmapWindow(w); err != nil {
		t.Fatal(err)
	}
	wantErr(t, c.UnmapWindow(w), fmt.Sprintf("ValueError: unmap: window %#x on device 3 was already unmapped", w))
	if _, err := c.Bytes(w, 1); err == nil {
		t.Error("unmapped window still accessible")
	}
	if n, nw := c.Live(); n != 1 || nw != 0 {
		t.Errorf("Live() = %d, %d; want 1, 0", n, nw)
	}
}

func TestChipsAreDisjoint(t *testing.T) {
	c0 := openSim(t, "a2a3sim", 0)
	c1 := openSim(t, "a2a3sim", 1)
	c15 := openSim(t, "a5sim", 15)
	if c0.limit > c1.base || c1.limit > c15.base {
		t.Fatalf("spaces overlap: [%#x,%#x) [%#x,%#x) [%#x,...)", c0.base, c0.limit, c1.base, c1.limit, c15.base)
	}
	if span := c0.limit - c0.base; span < uint64(A5.DeviceMemory)*2 {
		t.Errorf("address space of %d bytes is too small for a5", span)
	}
	p0, p1 := mustMalloc(t, c0, 64), mustMalloc(t, c1, 64)
	if p0 == p1 {
		t.Fatalf("both chips returned %#x", p0)
	}
	wantErr(t, c0.CopyIn(p1, []byte{1}),
		fmt.Sprintf("ValueError: copy of 1 bytes at %#x on device 0 is outside any live allocation (it is an address on device 1)", p1))
	wantErr(t, c1.Free(p0), fmt.Sprintf("ValueError: free: %#x is not a live allocation on device 1 (it is an address on device 0)", p0))
}

func TestClose(t *testing.T) {
	c := openSim(t, "a2a3sim", 0)
	a := mustMalloc(t, c, 10)
	w, _ := c.MapWindow(make([]byte, 8), "w")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n, nw := c.Live(); n != 0 || nw != 0 {
		t.Errorf("Live() after Close = %d, %d", n, nw)
	}
	const closed = "RuntimeError: device 0 is closed"
	_, err := c.Malloc(10)
	wantErr(t, err, closed)
	wantErr(t, c.Free(a), closed)
	wantErr(t, c.CopyIn(a, []byte{1}), closed)
	wantErr(t, c.CopyOut(make([]byte, 1), a), closed)
	_, err = c.Bytes(a, 1)
	wantErr(t, err, closed)
	_, err = c.MapWindow(make([]byte, 8), "w")
	wantErr(t, err, closed)
	wantErr(t, c.UnmapWindow(w), closed)
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestConcurrentUse(t *testing.T) {
	c := openSim(t, "a2a3sim", 0)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				p, err := c.Malloc(64 + i)
				if err != nil {
					errs <- err
					return
				}
				want := bytes.Repeat([]byte{byte(g)}, 64)
				got := make([]byte, 64)
				if err := c.CopyIn(p, want); err != nil {
					errs <- err
					return
				}
				if err := c.CopyOut(got, p); err != nil || !bytes.Equal(got, want) {
					errs <- fmt.Errorf("goroutine %d read back %v, %v", g, got[:4], err)
					return
				}
				if err := c.Free(p); err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n, _ := c.Live(); n != 0 {
		t.Errorf("Live() = %d after all frees", n)
	}
	if !strings.HasPrefix(fmt.Sprintf("%#x", c.next), "0x1000") {
		t.Errorf("bump pointer %#x left chip 0's space", c.next)
	}
}

// A window has one slot in the platform's shared range, seen by each
// device id at its own offset, and resolves only on the chips that map
// it: a chip that is not a member of the window's domain (it never
// mapped the window) is refused even at the exact address its own view
// would give, as is a chip whose mapping is gone while another's stays;
// and one chip's address of the window never resolves on another id.
func TestSharedWindowResolvesOnlyOnMembers(t *testing.T) {
	// a and twin are both device 0 (of two nodes, say); b is device 1.
	a, twin, b := openSim(t, "a2a3sim", 0), openSim(t, "a2a3sim", 0), openSim(t, "a2a3sim", 1)
	mem := make([]byte, 4096)
	wa, err := a.MapWindow(mem, "dom rank 0")
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, twin.CopyIn(wa, []byte{1}), fmt.Sprintf(
		"ValueError: copy of 1 bytes at %#x on device 0 is outside any live allocation", wa))
	if mem[0] != 0 {
		t.Error("a non-member chip wrote into the window")
	}
	wt, err := twin.MapWindow(mem, "dom rank 0")
	if err != nil {
		t.Fatal(err)
	}
	if wt != wa {
		t.Errorf("one window at %#x and %#x on two devices 0: want one address", wa, wt)
	}
	wb, err := b.MapWindow(mem, "dom rank 0")
	if err != nil {
		t.Fatal(err)
	}
	mem[100] = 7
	for _, c := range []struct {
		chip *simChip
		addr uint64
	}{{a, wa}, {twin, wt}, {b, wb}} {
		if got, err := c.chip.Bytes(c.addr+100, 1); err != nil || got[0] != 7 {
			t.Errorf("member device %d reads %v, %v", c.chip.id, got, err)
		}
	}
	wantErr(t, b.CopyIn(wa, []byte{1}), fmt.Sprintf(
		"ValueError: copy of 1 bytes at %#x on device 1 is outside any live allocation (it is an address on device 0)", wa))
	if err := a.UnmapWindow(wa); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Bytes(wa, 1); err == nil {
		t.Error("the window still resolves on the chip that unmapped it")
	}
	wantErr(t, a.UnmapWindow(wa), fmt.Sprintf("ValueError: unmap: window %#x on device 0 was already unmapped", wa))
	if _, err := twin.Bytes(wt, 1); err != nil {
		t.Errorf("the other member lost the window: %v", err)
	}
	if _, nw := a.Live(); nw != 0 {
		t.Errorf("device 0 still counts %d windows", nw)
	}
	// Closed chips let go of their mappings.
	if err := twin.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, canon := alias(wa); a.plat.shared.find(canon) != nil {
		t.Error("the window outlived every mapping")
	}
	// Separate windows never share an address, even of equal size.
	w1, _ := a.MapWindow(make([]byte, 64), "x")
	w2, _ := a.MapWindow(make([]byte, 64), "y")
	if w1 == w2 || !inShared(w1) || !inShared(w2) {
		t.Errorf("two windows at %#x and %#x", w1, w2)
	}
}

// A small window lingers after its last unmap: mapping the same memory
// again finds it at its old address, while to every check it is unmapped
// in between, and no other memory is given its slot.
func TestSmallWindowLingers(t *testing.T) {
	c := openSim(t, "a2a3sim", 0)
	mem := make([]byte, 4096)
	w, err := c.MapWindow(mem, "host tensor")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.UnmapWindow(w); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Bytes(w, 1); err == nil {
		t.Error("a lingering window is accessible")
	}
	wantErr(t, c.UnmapWindow(w), fmt.Sprintf("ValueError: unmap: window %#x on device 0 was already unmapped", w))
	wantErr(t, c.Free(w), fmt.Sprintf("ValueError: free: %#x on device 0 was a communication window, already unmapped", w))
	if _, canon := alias(w); c.plat.shared.find(canon) != nil {
		t.Error("a lingering window is live")
	}
	other, err := c.MapWindow(make([]byte, 4096), "other")
	if err != nil {
		t.Fatal(err)
	}
	if other == w {
		t.Errorf("other memory was given the lingering slot %#x", w)
	}
	again, err := c.MapWindow(mem, "hccl")
	if err != nil {
		t.Fatal(err)
	}
	if again != w {
		t.Errorf("the same memory mapped again at %#x, was %#x", again, w)
	}
	wantErr(t, c.CopyIn(again+4095, []byte{1, 2}), fmt.Sprintf(
		`ValueError: copy of 2 bytes at %#x on device 0 overruns the window "hccl" at %#x (4096 bytes)`, again+4095, again))
	mem[7] = 3
	if b, err := c.Bytes(again+7, 1); err != nil || b[0] != 3 {
		t.Errorf("the revived window reads %v, %v", b, err)
	}
	if _, nw := c.Live(); nw != 2 {
		t.Errorf("device 0 counts %d windows, want 2", nw)
	}
	// Past lingerPerShard in one shard the oldest is freed for good.
	for _, p := range []uint64{again, other} {
		if err := c.UnmapWindow(p); err != nil {
			t.Fatal(err)
		}
	}
	sh := &c.plat.shared.shards[(uintptr(unsafe.Pointer(&mem[0]))>>12)%shards]
	if n := len(sh.linger); n < 1 || n > lingerPerShard {
		t.Errorf("%d windows linger in the shard", n)
	}
	for range 2 * lingerPerShard * shards {
		b := make([]byte, 4096)
		p, err := c.MapWindow(b, "churn")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.UnmapWindow(p); err != nil {
			t.Fatal(err)
		}
	}
	for i := range c.plat.shared.shards {
		if n := len(c.plat.shared.shards[i].linger); n > lingerPerShard {
			t.Fatalf("shard %d holds %d lingering windows, the bound is %d", i, n, lingerPerShard)
		}
	}
	// Large windows do not linger.
	big := make([]byte, 2*lingerSpan)
	p, err := c.MapWindow(big, "big")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.UnmapWindow(p); err != nil {
		t.Fatal(err)
	}
	bsh := &c.plat.shared.shards[(uintptr(unsafe.Pointer(&big[0]))>>12)%shards]
	for _, x := range bsh.linger {
		if x.size == uint64(len(big)) {
			t.Error("a large window lingers")
		}
	}
}
