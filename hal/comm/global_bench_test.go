package comm

import "testing"

// BenchmarkGlobalWarm4 measures a warm global domain of 4 ranks of 64 KiB
// windows, all in this process: every rank prepares (from the pool of
// global windows), imports the table (its peers' kept mappings), commits
// and releases. It is the node-side work of a warm allocate + release,
// without the broker's round trips, so it shows what checking each peer's
// window costs.
func BenchmarkGlobalWarm4(b *testing.B) {
	clean(b)
	chips := openChips(b, 4)
	ranks := make([]*GlobalRank, 4)
	table := make([]Descriptor, 4)
	for b.Loop() {
		req := newGlobalReq(4, 64<<10)
		req.Pooled = true
		for r := range ranks {
			g, d, err := PrepareGlobal(req, r, chips[r])
			if err != nil {
				b.Fatal(err)
			}
			ranks[r], table[r] = g, d
		}
		for _, g := range ranks {
			if err := g.Import(table); err != nil {
				b.Fatal(err)
			}
			if err := g.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		for _, g := range ranks {
			if err := g.Release(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	if err := DrainPool(); err != nil {
		b.Fatal(err)
	}
}
