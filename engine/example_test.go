package engine_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/hal"
	"simpler/hal/dtype"
)

// vectorAdd is a chip kernel: out = a + b, element by element, for float32
// vectors. A kernel is identified by its digest, which must be the same
// wherever the same code is loaded (a process-mode child, a remote node);
// an embedder that only runs in thread mode can pick any unique string.
type vectorAdd struct{}

func (vectorAdd) Name() string   { return "vector_add" }
func (vectorAdd) Digest() string { return "sha256:example-vector-add-v1" }

// RunChip runs on one chip: the tensors' addresses are in the chip's
// device memory, which the chip hands out as bytes to read and write.
func (vectorAdd) RunChip(c *engine.ChipCtx, args *engine.TaskArgs) error {
	var mem [3][]byte
	for i := range mem {
		t := args.Tensors[i]
		b, err := c.Chip.Bytes(t.Addr, t.NBytes())
		if err != nil {
			return err
		}
		mem[i] = b
	}
	for off := 0; off+4 <= len(mem[2]); off += 4 {
		sum := getF32(mem[0][off:]) + getF32(mem[1][off:])
		binary.LittleEndian.PutUint32(mem[2][off:], math.Float32bits(sum))
	}
	return nil
}

func getF32(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }

// Embedding the engine in a Go program: a level-3 node of two simulated
// chips adds two vectors on each chip. The steps are those of a Starlark
// script: make the worker, register the kernel, Init, make host buffers,
// submit an orchestration that adds one task per chip, wait for the run,
// read the results, Close.
func Example_vectorAdd() {
	platform, err := hal.Lookup("a2a3sim")
	if err != nil {
		fmt.Println(err)
		return
	}
	w, err := engine.NewWorker(engine.Config{Level: 3, Platform: platform, DeviceIDs: []int{0, 1}, Mode: "thread"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	add, err := w.Registry().Register(vectorAdd{}, nil) // nil: every chip may run it
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := w.Init(); err != nil {
		fmt.Println(err)
		return
	}

	// Host buffers are shared memory the chips' tasks read and write. One
	// per chip holds a, b and out, 8 float32 each.
	const n = 8
	vec := func(buf *engine.HostBuffer, i int) engine.Tensor {
		return engine.Tensor{Addr: buf.Addr() + uint64(i*n*4), Shape: []int{n}, DType: dtype.Float32}
	}
	var bufs []*engine.HostBuffer
	for chip := range 2 {
		buf, err := w.HostBuffers().Create(3 * n * 4)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer w.HostBuffers().Free(buf)
		mem, err := hostmem.Resolve(buf.Addr(), buf.NBytes)
		if err != nil {
			fmt.Println(err)
			return
		}
		for i := range n {
			binary.LittleEndian.PutUint32(mem[4*i:], math.Float32bits(float32(i)))
			binary.LittleEndian.PutUint32(mem[4*(n+i):], math.Float32bits(10*float32(chip+1)))
		}
		bufs = append(bufs, buf)
	}

	// The orchestration builds the task graph: one task per chip, its
	// tensors tagged so the engine knows what each task reads and writes.
	run, err := w.Submit(func(o *engine.Orchestrator) (any, error) {
		for chip, buf := range bufs {
			args := &engine.TaskArgs{}
			for i, tag := range []engine.Tag{engine.Input, engine.Input, engine.OutputExisting} {
				if err := args.AddTensor(vec(buf, i), tag); err != nil {
					return nil, err
				}
			}
			if _, err := o.SubmitNext(add, args, nil, chip); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := run.Wait(10 * time.Second); err != nil {
		fmt.Println(err)
		return
	}

	for chip, buf := range bufs {
		out, err := hostmem.Resolve(vec(buf, 2).Addr, n*4)
		if err != nil {
			fmt.Println(err)
			return
		}
		var sums []float32
		for i := range n {
			sums = append(sums, getF32(out[4*i:]))
		}
		fmt.Println("chip", chip, sums)
	}
	// Output:
	// chip 0 [10 11 12 13 14 15 16 17]
	// chip 1 [20 21 22 23 24 25 26 27]
}
