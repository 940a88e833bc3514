package comm

import (
	"encoding/binary"
	"math"
	"time"
)

// A sum allreduce of float32 values with the ring algorithm, written in
// Go over a domain's views: the reference the scale tests check a global
// domain with, and the floor the bench prints beside the collectives
// library's ring run from a script.

// RingWindow is the window RingSum needs: an 8-byte arrival counter, then
// one slot per step of chunk floats, so a sender never overwrites what
// its receiver has not read.
func RingWindow(n, chunk int) int { return 8 + 2*(n-1)*4*max(chunk, 1) }

// RingSum is rank r's part of the ring allreduce of acc over n ranks, in
// chunks of chunk floats: n-1 reduce-scatter steps, then n-1 allgather
// steps, each a store into the next rank's window (found in mem, the
// chip's memory, at v's bases) and a notify, as a kernel does. Each wait
// for the previous rank is bounded by timeout.
func RingSum(mem interface {
	Bytes(addr uint64, n int) ([]byte, error)
}, v *View, r, n, chunk int, acc []float32, timeout time.Duration) error {
	next := (r + 1) % n
	own, _ := v.Base(r)
	peer, _ := v.Base(next)
	mod := func(i int) int { return ((i % n) + n) % n }
	for s := 0; s < 2*(n-1); s++ {
		send, recv := mod(r-s), mod(r-s-1) // reduce-scatter
		if s >= n-1 {
			send, recv = mod(r+1-(s-n+1)), mod(r-(s-n+1)) // allgather
		}
		slot := uint64(8 + s*4*chunk)
		out, err := mem.Bytes(peer+slot, 4*chunk)
		if err != nil {
			return err
		}
		for i := 0; i < chunk; i++ {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(acc[send*chunk+i]))
		}
		if err := v.Notify(next, peer, 8, 1, "add"); err != nil {
			return err
		}
		if _, err := v.Wait(own, 8, int64(s+1), ">=", timeout); err != nil {
			return err
		}
		in, err := mem.Bytes(own+slot, 4*chunk)
		if err != nil {
			return err
		}
		for i := 0; i < chunk; i++ {
			x := math.Float32frombits(binary.LittleEndian.Uint32(in[4*i:]))
			if s < n-1 {
				acc[recv*chunk+i] += x
			} else {
				acc[recv*chunk+i] = x
			}
		}
	}
	return nil
}
