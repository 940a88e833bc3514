package global

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"simpler/engine"
	"simpler/hal/comm"
	"simpler/internal/enginetest"
)

// podNodes is a level-4 worker over nodes local level-3 nodes of chips
// chips each, in thread mode.
func podNodes(t *testing.T, nodes, chips int) *engine.Worker {
	t.Helper()
	ids := make([]int, chips)
	for i := range ids {
		ids[i] = i
	}
	cfgs := make([]engine.Config, nodes)
	for n := range cfgs {
		cfgs[n].DeviceIDs = ids
	}
	return enginetest.Up(t, l4Tree(t, cfgs))
}

// ringAllreduce sums each rank's vals over the domain with the ring
// algorithm (n-1 reduce-scatter steps, then n-1 allgather steps), every
// rank on its own goroutine, each step a store into the next rank's
// window and a notify, as a kernel does.
func ringAllreduce(ranks []Opened, vals [][]float32) error {
	n := len(ranks)
	chunk := len(vals[0]) / n
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = comm.RingSum(ranks[r].Chip, ranks[r].View, r, n, chunk, vals[r], 20*time.Second)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// A 256-rank global domain (16 nodes of 16 chips, beyond upstream's 64)
// is allocated, carries a ring allreduce of 4 KiB per rank across every
// node's windows, and is released with nothing left on any node; twice,
// so the second domain runs over the pooled windows, zeroed.
func TestGlobalDomain256Ranks(t *testing.T) {
	const nodes, chips, count = 16, 16, 1024
	n := nodes * chips
	w := podNodes(t, nodes, chips)
	spec := Spec{Name: "pod", WindowSize: comm.RingWindow(n, count/n)}
	for r := 0; r < n; r++ {
		spec.Members = append(spec.Members, [2]int{r / chips, r % chips})
	}
	for round := 0; round < 2; round++ {
		mustRun(t, w, func(o *engine.Orchestrator) error {
			d, err := Allocate(o, spec)
			if err != nil {
				return err
			}
			ranks, err := OpenLocal(w, d.ID(), n)
			if err != nil {
				return err
			}
			for r, rk := range ranks {
				if word, _ := rk.Chip.Bytes(rk.Rank.WindowBase, 8); binary.LittleEndian.Uint64(word) != 0 {
					t.Errorf("round %d: rank %d's window is not zeroed", round, r)
				}
			}
			vals := make([][]float32, n)
			for r := range vals {
				vals[r] = make([]float32, count)
				for i := range vals[r] {
					vals[r][i] = float32(r + i)
				}
			}
			if err := ringAllreduce(ranks, vals); err != nil {
				return err
			}
			for r := range vals {
				for i, v := range vals[r] {
					if want := float32(n*(n-1)/2 + n*i); v != want {
						t.Fatalf("round %d: rank %d element %d is %v, want %v", round, r, i, v, want)
					}
				}
			}
			return d.Release()
		})
		if g := nodeGlobals(w); g != 0 {
			t.Fatalf("round %d: %d global domains still hosted after the fence", round, g)
		}
	}
}
