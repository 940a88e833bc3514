package hostmem

import (
	"fmt"
	"simpler/internal/leakcheck"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"simpler/hal/shm"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func newSpace(t *testing.T) *Space {
	s := NewSpace()
	t.Cleanup(func() { s.Close() })
	return s
}

func mustAlloc(t *testing.T, s *Space, n int) (uint64, []byte) {
	t.Helper()
	a, m, err := s.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	return a, m
}

func TestSmallAllocs(t *testing.T) {
	s := newSpace(t)
	a, am := mustAlloc(t, s, 10)
	b, bm := mustAlloc(t, s, 100)
	z1, _ := mustAlloc(t, s, 0)
	z2, _ := mustAlloc(t, s, 0)
	if a%64 != 0 || b%64 != 0 || b != a+64 || z1 == z2 {
		t.Errorf("addresses %#x %#x %#x %#x: want 64-byte aligned bump, distinct", a, b, z1, z2)
	}
	if len(am) != 10 || cap(am) != 10 || len(bm) != 100 {
		t.Errorf("slices len/cap %d/%d, %d", len(am), cap(am), len(bm))
	}
	if uint64(uintptr(unsafe.Pointer(&bm[0]))) != b {
		t.Error("address is not the real address of the bytes")
	}
	for _, x := range bm {
		if x != 0 {
			t.Fatal("allocation not zeroed")
		}
	}
	bm[5] = 77
	r, err := Resolve(b+5, 1)
	if err != nil || r[0] != 77 {
		t.Errorf("Resolve = %v, %v", r, err)
	}
	seg, off, ok := Locate(b + 5)
	if !ok || off != 69 || seg.Mem[off] != 77 || len(seg.Mem) != chunkSize {
		t.Errorf("Locate = %v, %d, %v", seg, off, ok)
	}
}

func TestResolveAcrossChunks(t *testing.T) {
	s := newSpace(t)
	const n = 600 << 10 // six fit in a chunk
	var addrs []uint64
	chunks := map[*shm.Segment]bool{}
	for i := 0; i < 15; i++ {
		a, m := mustAlloc(t, s, n)
		m[0], m[n-1] = byte(i), byte(i)
		addrs = append(addrs, a)
		seg, _, _ := Locate(a)
		chunks[seg] = true
	}
	if len(chunks) != 3 {
		t.Errorf("15 allocations of 600 KiB used %d chunks, want 3", len(chunks))
	}
	for i, a := range addrs {
		r, err := Resolve(a, n)
		if err != nil || r[0] != byte(i) || r[n-1] != byte(i) {
			t.Fatalf("Resolve(#%d) = %v", i, err)
		}
	}
	// The last allocation of a chunk sits before its unused tail; a range
	// past the chunk's end is refused with the chunk named.
	seg, off, _ := Locate(addrs[5])
	tail := len(seg.Mem) - off
	_, err := Resolve(addrs[5], tail+1)
	want := fmt.Sprintf("ValueError: host address %#x (%d bytes) overruns the shared buffer at %#x of %d bytes",
		addrs[5], tail+1, seg.Addr(), chunkSize)
	if err == nil || err.Error() != want {
		t.Errorf("Resolve overrun = %v\n want %s", err, want)
	}
}

func TestLargeAllocs(t *testing.T) {
	s := newSpace(t)
	a, m := mustAlloc(t, s, 3<<20)
	seg, off, ok := Locate(a + 100)
	if !ok || off != 100 || len(seg.Mem) != 3<<20 || len(m) != 3<<20 || seg.Addr() != a {
		t.Errorf("large allocation: Locate = %v, %d, %v", seg, off, ok)
	}
	if !strings.HasPrefix(seg.Name, shm.Prefix()+"host-") {
		t.Errorf("segment name %q", seg.Name)
	}
	if _, err := Resolve(a, 3<<20); err != nil {
		t.Error(err)
	}
}

func TestResolveErrors(t *testing.T) {
	local := make([]byte, 8)
	addr := uint64(uintptr(unsafe.Pointer(&local[0])))
	_, err := Resolve(addr, 8)
	want := fmt.Sprintf("ValueError: host address %#x (8 bytes) is not in shared memory", addr)
	if err == nil || err.Error() != want {
		t.Errorf("Resolve(Go memory) = %v", err)
	}
	if _, err := Resolve(0, 1); err == nil {
		t.Error("Resolve(0) succeeded")
	}
	if _, _, ok := Locate(addr); ok {
		t.Error("Locate found Go heap memory")
	}
	s := newSpace(t)
	a, _ := mustAlloc(t, s, 8)
	if _, err := Resolve(a, -1); err == nil || !strings.Contains(err.Error(), "size must be >= 0") {
		t.Errorf("negative size: %v", err)
	}
	if _, _, err := s.Alloc(-1); err == nil {
		t.Error("Alloc(-1) succeeded")
	}
}

func TestRegisterExternal(t *testing.T) {
	seg, err := shm.Create("ring", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	if _, err := Resolve(seg.Addr(), 1); err == nil {
		t.Fatal("unregistered segment resolved")
	}
	Register(seg)
	registry.RLock()
	n := len(registry.entries)
	registry.RUnlock()
	Register(seg) // idempotent
	registry.RLock()
	if len(registry.entries) != n {
		t.Errorf("second Register grew the registry from %d to %d", n, len(registry.entries))
	}
	registry.RUnlock()
	seg.Mem[4095] = 3
	if r, err := Resolve(seg.Addr()+4095, 1); err != nil || r[0] != 3 {
		t.Errorf("Resolve registered = %v, %v", r, err)
	}
	Unregister(seg)
	if _, _, ok := Locate(seg.Addr()); ok {
		t.Error("Locate after Unregister")
	}
}

func TestClose(t *testing.T) {
	s := NewSpace()
	small, _ := mustAlloc(t, s, 1)
	big, _ := mustAlloc(t, s, 2<<20)
	if left, _ := shm.Leftovers(shm.Prefix()); len(left) < 2 {
		t.Errorf("expected two live segments, found %v", left)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for _, a := range []uint64{small, big} {
		if _, err := Resolve(a, 1); err == nil {
			t.Errorf("%#x still resolves after Close", a)
		}
	}
	if left, _ := shm.Leftovers(shm.Prefix()); len(left) != 0 {
		t.Errorf("segments left after Close: %v", left)
	}
	if _, _, err := s.Alloc(8); err == nil || err.Error() != "RuntimeError: host memory space is closed" {
		t.Errorf("Alloc after Close = %v", err)
	}
}

func TestConcurrent(t *testing.T) {
	s := newSpace(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				a, m, err := s.Alloc(1000 + g*100000)
				if err != nil {
					errs <- err
					return
				}
				m[len(m)-1] = byte(g)
				r, err := Resolve(a, len(m))
				if err != nil || r[len(r)-1] != byte(g) {
					errs <- fmt.Errorf("goroutine %d: Resolve = %v", g, err)
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
}

// Freed allocations give their memory back: a large one's segment at
// once, a chunk when all of it is free and it is not the only one.
func TestSpaceFree(t *testing.T) {
	sp := NewSpace()
	defer sp.Close()
	big, _, err := sp.Alloc(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	before := sp.Bytes()
	if err := sp.Free(big); err != nil || sp.Bytes() != before-(2<<20) {
		t.Fatalf("freeing a large allocation: %v, %d bytes left of %d", err, sp.Bytes(), before)
	}
	if err := sp.Free(big); err == nil {
		t.Error("a second free of the same allocation was accepted")
	}
	// 10 000 allocations of 64 KiB, each freed: the space stays small.
	for i := range 10000 {
		a, _, err := sp.Alloc(64 << 10)
		if err != nil {
			t.Fatal(err)
		}
		if err := sp.Free(a); err != nil {
			t.Fatalf("free %d: %v", i, err)
		}
	}
	if n := sp.Bytes(); n > 2*chunkSize {
		t.Errorf("after 10000 freed allocations the space holds %d bytes", n)
	}
	if err := sp.Free(12345); err == nil {
		t.Error("freeing an address of no allocation was accepted")
	}
}
