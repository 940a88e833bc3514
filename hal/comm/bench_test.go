package comm

import (
	"sync"
	"testing"
)

// BenchmarkAllocateRelease4 measures allocating and releasing a 4-rank
// domain of 64 KiB windows, the ranks in parallel as the engine runs them,
// with the window pool and without it (every window fresh memory).
func BenchmarkAllocateRelease4(b *testing.B) {
	for _, bc := range []struct {
		name string
		off  bool
	}{{"pool", false}, {"nopool", true}} {
		b.Run(bc.name, func(b *testing.B) {
			clean(b)
			poolOff.Store(bc.off)
			b.Cleanup(func() { poolOff.Store(false) })
			chips := openChips(b, 4)
			ranks := make([]*Rank, 4)
			errs := make([]error, 4)
			for b.Loop() {
				req := newReq(4, 64<<10)
				var wg sync.WaitGroup
				for r := range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ranks[r], errs[r] = Allocate(req, r, chips[r])
					}()
				}
				wg.Wait()
				for r, rk := range ranks {
					if errs[r] != nil {
						b.Fatal(errs[r])
					}
					// A kernel would touch its window; so does the benchmark,
					// or a fresh window's cost would be deferred past it.
					mem, err := chips[r].Bytes(rk.WindowBase, 64<<10)
					if err != nil {
						b.Fatal(err)
					}
					for i := 0; i < len(mem); i += 4096 {
						mem[i] = 1
					}
				}
				for _, rk := range ranks {
					if err := rk.Release(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
