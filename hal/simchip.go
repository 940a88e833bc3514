package hal

import (
	"fmt"
	"sort"
	"sync"

	"simpler/internal/bounds"
	"simpler/kind"
)

// Simulated address spaces. Each chip owns a disjoint 1 TiB range for its
// allocations, so a pointer handed to the wrong chip never resolves there
// (and the error can say whose it is). 1 TiB leaves room for a5's 128 GiB
// and for a long run of bump allocations before holes must be reused.
// Communication windows are not in it: they have one address per window
// in the platform's shared range, resolved only on the chips that map
// them (simshared.go).
const (
	simBase  = 0x1000_0000_0000
	simShift = 40
	simAlign = 512 // allocation granularity, as on the device
	// freedKeep bounds the memory spent remembering freed starts; older
	// ones degrade from "already freed" to "not a live allocation".
	freedKeep = 4096
)

// region is one live allocation or window. Its addresses are
// [start, start+span); only the first size bytes (len(mem)) are accessible,
// so an overrun into the alignment padding is caught as it would not be on
// hardware.
type region struct {
	start  uint64
	span   uint64
	size   uint64
	mem    []byte
	window bool
	label  string
}

func (r *region) String() string {
	if r.window {
		return fmt.Sprintf("the window %q at %#x (%d bytes)", r.label, r.start, r.size)
	}
	return fmt.Sprintf("the allocation at %#x (%d bytes)", r.start, r.size)
}

// freedRec is a freed start: seq tells it from a later free of the same
// start in the eviction order.
type freedRec struct {
	seq uint64
}

type freedKey struct{ start, seq uint64 }

// simChip is a simulated device. The region table is guarded by mu; the
// bytes of a region are not, exactly as real device memory is not: kernels
// and copies touching the same bytes concurrently are the caller's race.
type simChip struct {
	plat     *simPlatform
	id       int
	base     uint64 // address space is [base, limit)
	limit    uint64
	capacity int64 // bytes of allocations allowed live at once

	mu      sync.RWMutex
	regions []region // sorted by start, non-overlapping spans
	next    uint64   // bump pointer; only ever grows
	used    int64
	allocs  int
	windows int
	freed   map[uint64]freedRec // freed starts not reused since
	order   []freedKey          // freed, oldest first, for eviction
	seq     uint64
	closed  bool
	mapped  map[uint64]mapping // the shared windows this chip maps, by start (simshared.go)
}

func newSimChip(p *simPlatform, id int) *simChip {
	base := uint64(simBase) + uint64(id)<<simShift
	return &simChip{
		plat: p, id: id,
		base: base, limit: base + 1<<simShift, next: base,
		capacity: p.arch.DeviceMemory,
		freed:    map[uint64]freedRec{},
	}
}

func (c *simChip) DeviceID() int      { return c.id }
func (c *simChip) Platform() Platform { return c.plat }

func (c *simChip) errClosed() error {
	return kind.Errorf(kind.RuntimeError, "device %d is closed", c.id)
}

// whose adds a hint when ptr belongs to another simulated chip's space.
func (c *simChip) whose(ptr uint64) string {
	if ptr >= simBase && ptr < simBase+uint64(c.plat.arch.MaxChips)<<simShift {
		if other := int((ptr - simBase) >> simShift); other != c.id {
			return fmt.Sprintf(" (it is an address on device %d)", other)
		}
	}
	return c.sharedHint(ptr)
}

func roundUp(n uint64) uint64 { return (n + simAlign - 1) &^ (simAlign - 1) }

// find returns the index of the region whose span contains addr, or -1.
func (c *simChip) find(addr uint64) int {
	i := sort.Search(len(c.regions), func(i int) bool { return c.regions[i].start > addr }) - 1
	if i >= 0 && addr-c.regions[i].start < c.regions[i].span {
		return i
	}
	return -1
}

// place reserves span bytes of address space: from the bump pointer while
// it lasts (so fresh addresses are never recycled early, which keeps
// use-after-free visible), then first-fit in the holes between regions.
func (c *simChip) place(span uint64) (uint64, bool) {
	if c.limit-c.next >= span {
		a := c.next
		c.next += span
		return a, true
	}
	cursor := c.base
	for _, r := range c.regions {
		if r.start-cursor >= span {
			break
		}
		cursor = r.start + r.span
	}
	if c.limit-cursor < span {
		return 0, false
	}
	// The range is reused: starts freed inside it are live again.
	for k := range c.freed {
		if k >= cursor && k < cursor+span {
			delete(c.freed, k)
		}
	}
	return cursor, true
}

func (c *simChip) insert(r region) {
	i := sort.Search(len(c.regions), func(i int) bool { return c.regions[i].start > r.start })
	c.regions = append(c.regions, region{})
	copy(c.regions[i+1:], c.regions[i:])
	c.regions[i] = r
}

func (c *simChip) remove(i int) {
	c.remember(c.regions[i].start)
	c.regions = append(c.regions[:i], c.regions[i+1:]...)
}

func (c *simChip) remember(start uint64) {
	c.seq++
	c.freed[start] = freedRec{c.seq}
	c.order = append(c.order, freedKey{start, c.seq})
	if len(c.order) > freedKeep {
		old := c.order[0]
		c.order = c.order[1:]
		if rec, ok := c.freed[old.start]; ok && rec.seq == old.seq {
			delete(c.freed, old.start)
		}
	}
}

func (c *simChip) Malloc(size int) (uint64, error) {
	c.mu.RLock()
	closed := c.closed
	c.mu.RUnlock()
	if closed {
		return 0, c.errClosed()
	}
	if size <= 0 {
		return 0, kind.Errorf(kind.ValueError, "malloc size must be > 0, got %d", size)
	}
	span := roundUp(uint64(size))
	oom := func(used int64) error {
		return kind.Errorf(kind.RuntimeError, "device %d out of memory: cannot allocate %d bytes (%d of %d bytes in use)",
			c.id, size, used, c.capacity)
	}
	c.mu.RLock()
	used := c.used
	c.mu.RUnlock()
	if int64(size) > c.capacity || used+int64(span) > c.capacity {
		return 0, oom(used) // before make: never touch the Go heap for a hopeless request
	}
	mem := make([]byte, size) // zeroed; done outside the lock
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, c.errClosed()
	}
	if c.used+int64(span) > c.capacity {
		return 0, oom(c.used)
	}
	addr, ok := c.place(span)
	if !ok {
		return 0, kind.Errorf(kind.RuntimeError, "device %d out of address space: no free range of %d bytes", c.id, span)
	}
	c.insert(region{start: addr, span: span, size: uint64(size), mem: mem})
	c.used += int64(span)
	c.allocs++
	return addr, nil
}

func (c *simChip) Free(ptr uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.errClosed()
	}
	if inShared(ptr) {
		return c.freeShared(ptr)
	}
	if i := c.find(ptr); i >= 0 {
		r := &c.regions[i] // an allocation: windows are in the shared range
		if r.start != ptr {
			return kind.Errorf(kind.ValueError, "free: %#x on device %d is inside %s; free takes the start address", ptr, c.id, r)
		}
		c.used -= int64(r.span)
		c.allocs--
		c.remove(i)
		return nil
	}
	if _, ok := c.freed[ptr]; ok {
		return kind.Errorf(kind.ValueError, "free: %#x on device %d was already freed", ptr, c.id)
	}
	return kind.Errorf(kind.ValueError, "free: %#x is not a live allocation on device %d%s", ptr, c.id, c.whose(ptr))
}

// access returns the bytes of [ptr, ptr+n) if they lie in one live region.
// op names the operation in errors.
func (c *simChip) access(op string, ptr uint64, n int) ([]byte, error) {
	if n < 0 {
		return nil, kind.Errorf(kind.ValueError, "%s of %d bytes: size must be >= 0", op, n)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, c.errClosed()
	}
	if inShared(ptr) {
		return c.accessShared(op, ptr, n)
	}
	i := c.find(ptr)
	if i < 0 {
		return nil, kind.Errorf(kind.ValueError, "%s of %d bytes at %#x on device %d is outside any live allocation%s",
			op, n, ptr, c.id, c.whose(ptr))
	}
	r := &c.regions[i]
	off := ptr - r.start // find saw r.start <= ptr
	if !bounds.Fits(off, uint64(n), r.size) {
		return nil, kind.Errorf(kind.ValueError, "%s of %d bytes at %#x on device %d overruns %s", op, n, ptr, c.id, r)
	}
	return r.mem[off : off+uint64(n) : off+uint64(n)], nil
}

func (c *simChip) CopyIn(dst uint64, src []byte) error {
	b, err := c.access("copy", dst, len(src))
	if err == nil {
		copy(b, src)
	}
	return err
}

func (c *simChip) CopyOut(dst []byte, src uint64) error {
	b, err := c.access("copy", src, len(dst))
	if err == nil {
		copy(dst, b)
	}
	return err
}

func (c *simChip) Bytes(ptr uint64, size int) ([]byte, error) {
	return c.access("access", ptr, size)
}

func (c *simChip) MapWindow(mem []byte, label string) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, c.errClosed()
	}
	if len(mem) == 0 {
		return 0, kind.Errorf(kind.ValueError, "cannot map the empty window %q on device %d", label, c.id)
	}
	return c.mapShared(mem, label)
}

func (c *simChip) UnmapWindow(ptr uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.errClosed()
	}
	if inShared(ptr) {
		return c.unmapShared(ptr)
	}
	if i := c.find(ptr); i >= 0 { // an allocation: windows are in the shared range
		return kind.Errorf(kind.ValueError, "unmap: %#x on device %d is in %s, not a window; allocations are freed with free", ptr, c.id, &c.regions[i])
	}
	return kind.Errorf(kind.ValueError, "unmap: %#x is not a mapped window on device %d%s", ptr, c.id, c.whose(ptr))
}

func (c *simChip) Live() (allocs, windows int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.allocs, c.windows
}

// Close drops every region; the Go memory goes with them. A second Close is
// a no-op, every other call after it fails.
func (c *simChip) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.dropShared()
		c.regions, c.freed, c.order = nil, nil, nil
		c.used, c.allocs, c.windows = 0, 0, 0
	}
	return nil
}
