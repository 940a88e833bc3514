package shm

import (
	"errors"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Under a deterministic schedule (--seed) a process maps its objects where
// a counter says, not where the kernel's randomised choice puts them: a
// replay maps every object where the first run did, so the addresses a
// script prints (a host tensor's, in an error) repeat too.

// placeBase is where deterministic placement starts: far from the Go
// heap's arenas and below where the kernel puts mappings it chooses.
const placeBase = 0x5e0000000000

// placeAlign keeps each object at a 2 MiB boundary, with room after it.
const placeAlign = 2 << 20

var placeNext atomic.Uintptr // 0: the kernel chooses

// PlaceDeterministically makes every later mapping of this process go
// where the counter says. It is for a process that runs one scheduled
// script; it cannot be undone.
func PlaceDeterministically() { placeNext.CompareAndSwap(0, placeBase) }

// mapObject maps size bytes of fd, shared, where placement says;
// placed tells unmapObject how it was mapped.
func mapObject(fd, size int) (mem []byte, placed bool, err error) {
	if placeNext.Load() == 0 {
		mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		return mem, false, err
	}
	span := (uintptr(size) + 2*placeAlign - 1) &^ (placeAlign - 1)
	for try := 0; try < 64; try++ {
		at := placeNext.Add(span) - span
		// A hint address, never dereferenced before the kernel maps it.
		p, err := unix.MmapPtr(fd, 0, unsafe.Add(nil, at), uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED_NOREPLACE)
		if errors.Is(err, unix.EEXIST) {
			continue // something is there already: the next slot
		}
		if err != nil {
			return nil, false, err
		}
		return unsafe.Slice((*byte)(p), size), true, nil
	}
	return nil, false, errors.New("no free address for a deterministic mapping")
}

func unmapObject(mem []byte, placed bool) error {
	if !placed {
		return unix.Munmap(mem)
	}
	return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(mem)), uintptr(len(mem)))
}
