package starlib

import (
	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/hal/dtype"
	"simpler/starlib/inplace"
)

// runRing is _k_ring in Go (see collwindow.go for the contract and
// collective_kernels.star for the algorithm): the same items in the same
// slots, the same waits, notifies and reductions, step for step.

// ringParams are RING's scalars after device_ctx.
type ringParams struct {
	op            inplace.Op
	rsOnly        bool
	dirs, E, K    int
	segb, outBase int
	items         int // Q of the Starlark body: items per segment
	// in, out are the bytes of the flat input and output, resolved once
	// when the task is accepted (see collseg.go)
	in, out []byte
}

// ringDir is _ring_setup's dict: the state of one direction.
type ringDir struct {
	base, length   int
	v, left, right int
	ready, ack     *Tensor
	// readyAt, ackAt are the own signal words' addresses; rightReady,
	// leftAck the neighbours' words this rank notifies (checked once:
	// see notifyWord)
	readyAt, ackAt      uint64
	rightReady, leftAck uint64
	slot0               int
	acked, seen         int64
	// the views of one step, reused from step to step (collseg.go)
	slot, theirs, mine, res seg
}

// readRing accepts a RING task the Starlark body would run to the end:
// scalars [device_ctx, op, rs_only, directions, seg_elems, slots,
// slot_bytes] in range (reduce-scatter with one direction only), at least
// two ranks, slots of at least a segment, a window of
// ring_window(directions, slots, slot_bytes) or more, and an output as
// large as what the kernel writes.
func readRing(th *starlark.Thread, chip *Chip, args *engine.TaskArgs) (*winTask, *ringParams, bool) {
	sc, ok := windowScalars(args, 7)
	if !ok || sc[1] >= len(directOps) || sc[2] > 1 || sc[3] < 1 || sc[3] > 2 || (sc[2] == 1 && sc[3] != 1) {
		return nil, nil, false
	}
	p := &ringParams{op: inplace.Op(sc[1]), rsOnly: sc[2] == 1, dirs: sc[3], E: sc[4], K: sc[5], segb: sc[6]}
	if p.E < 1 || p.K < minSlots {
		return nil, nil, false
	}
	k, ok := readPair(th, chip, args, args.Scalars[0])
	if !ok || k.n < 2 || p.segb < p.E*k.isz || k.c.v.WindowSize() < kernelLine+p.dirs*p.K*p.segb {
		return nil, nil, false
	}
	want := k.L
	if p.rsOnly {
		start, count := chunk(0, k.L, k.n, k.r)
		p.outBase, want = start, count
	}
	if k.dst.t.Elems() < want || (!p.rsOnly && k.dst.t.Elems() != want) {
		return nil, nil, false
	}
	p.items = 2 * (k.n - 1)
	if p.rsOnly {
		p.items = k.n - 1
	}
	var err error
	if p.in, err = k.src.bytes("copy_"); err != nil {
		return nil, nil, false
	}
	if p.out, err = k.dst.bytes("copy_"); err != nil {
		return nil, nil, false
	}
	return k, p, true
}

// setup is _ring_setup: direction d over elements [base, base+length).
func (k *winTask) ringSetup(d, base, length int, p *ringParams) *ringDir {
	R := &ringDir{base: base, length: length}
	if d == 0 {
		R.v, R.left, R.right = k.r, (k.r-1+k.n)%k.n, (k.r+1)%k.n
	} else {
		R.v, R.left, R.right = k.n-1-k.r, (k.r+1)%k.n, (k.r-1+k.n)%k.n
	}
	R.ready = k.window(k.r, 1, 16*d, dtype.Int64)
	R.ack = k.window(k.r, 1, 16*d+8, dtype.Int64)
	R.readyAt, R.ackAt = R.ready.t.Addr, R.ack.t.Addr
	right, _ := k.c.v.Base(R.right)
	left, _ := k.c.v.Base(R.left)
	R.rightReady, R.leftAck = right+uint64(16*d), left+uint64(16*d+8)
	R.slot0 = kernelLine + d*p.K*p.segb
	k.winSeg(&R.slot, k.r)
	k.winSeg(&R.theirs, R.left)
	R.mine.init(k.src, p.in, k.isz)
	R.res.init(k.dst, p.out, k.isz)
	return R
}

// runRing is _k_ring.
func runRing(th *starlark.Thread, chip *Chip, args *engine.TaskArgs) (bool, error) {
	k, p, ok := readRing(th, chip, args)
	if !ok {
		return false, nil
	}
	k.start()
	var rings []*ringDir
	if p.dirs == 1 {
		rings = []*ringDir{k.ringSetup(0, 0, k.L, p)}
	} else {
		half := (k.L + 1) / 2
		rings = []*ringDir{k.ringSetup(0, 0, half, p), k.ringSetup(1, half, k.L-half, p)}
	}
	G := 1
	for _, R := range rings {
		G = max(G, ceilDiv(ceilDiv(R.length, k.n), p.E))
	}
	for g := range G {
		for q := 0; q <= p.items; q++ {
			for _, R := range rings {
				if err := k.ringStep(p, R, g, q); err != nil {
					return true, err
				}
			}
		}
	}
	return true, nil
}

// ringStep is one pass of the innermost loop of _k_ring: item k = g*Q+q
// of direction R.
func (k *winTask) ringStep(p *ringParams, R *ringDir, g, q int) error {
	item := g*p.items + q
	c := ((R.v-1-q)%k.n + k.n) % k.n
	start, count := chunk(R.base, R.length, k.n, c)
	off := g * p.E
	count = max(0, min(p.E, count-off))
	start += off
	var slot *seg
	if q < p.items {
		// produce item k into slot k % K (its data is stored below, with
		// the consume it depends on, when q > 0)
		if need := int64(item - p.K + 1); need > R.acked {
			got, err := k.c.waitWord(k.th, R.ackAt, 8, need, ">=", kernelTimeout, k.stop)
			if err != nil {
				return err
			}
			R.acked = got
		}
		if count > 0 {
			slot = R.slot.at(R.slot0+(item%p.K)*p.segb, count)
			if q == 0 {
				k.segCopy(slot, R.mine.at(start*k.isz, count))
			}
		}
	}
	if q > 0 {
		if err := k.ringConsume(p, R, item, q, start, count, slot); err != nil {
			return err
		}
	}
	if q < p.items {
		return k.c.notifyWord(k.th, R.right, R.rightReady, 8, int64(item+1), "set")
	}
	return nil
}

// ringConsume consumes the left rank's item k-1 (each source read once,
// each destination written once) and acknowledges it.
func (k *winTask) ringConsume(p *ringParams, R *ringDir, item, q, start, count int, slot *seg) error {
	if int64(item) > R.seen {
		got, err := k.c.waitWord(k.th, R.readyAt, 8, int64(item), ">=", kernelTimeout, k.stop)
		if err != nil {
			return err
		}
		R.seen = got
	}
	if count > 0 {
		if err := k.ringMove(p, R, item, q, start, count, slot); err != nil {
			return err
		}
	}
	return k.c.notifyWord(k.th, R.left, R.leftAck, 8, int64(item), "set")
}

// ringMove is the data of a consume: the left rank's item k-1 (theirs),
// with the own input's chunk (mine), into the slot and/or the output
// (res), as the Starlark body's views: theirs and mine are made first,
// res where it is used.
func (k *winTask) ringMove(p *ringParams, R *ringDir, item, q, start, count int, slot *seg) error {
	theirs := R.theirs.at(R.slot0+((item-1)%p.K)*p.segb, count)
	mine := R.mine.at(start*k.isz, count)
	res := &R.res
	if q >= k.n-1 {
		res.at((start-p.outBase)*k.isz, count)
	}
	switch {
	case q < k.n-1:
		return k.segReduce(p.op, []*seg{slot}, []*seg{mine, theirs})
	case q == p.items && p.rsOnly:
		return k.segReduce(p.op, []*seg{res}, []*seg{mine, theirs})
	case q == p.items:
		k.segCopy(res, theirs)
		return nil
	case q == k.n-1:
		return k.segReduce(p.op, []*seg{slot, res}, []*seg{mine, theirs})
	}
	return k.segReduce(inplace.Sum, []*seg{slot, res}, []*seg{theirs})
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
