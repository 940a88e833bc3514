package comm

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"simpler/hal/shm"
	"simpler/internal/futex"
)

// TestGlobalDomainOfLocalNodesParksInGo: a global domain over two level-3
// nodes of one process (8 chips each, each node with its own name prefix
// and pooled windows, as the engine's local nodes have) counts every rank
// as hosted here, in one wake header: every view sees it local, so a
// waiter parks in Go (no thread sleeps on the futex) and a notify from the
// other node wakes it.
func TestGlobalDomainOfLocalNodesParksInGo(t *testing.T) {
	clean(t)
	const nodes, perNode = 2, 8
	n := nodes * perNode
	chips := openChips(t, n)
	d := &globalDomain{chips: chips, perNode: perNode, ranks: make([]*GlobalRank, n), table: make([]Descriptor, n)}
	t.Cleanup(func() { d.release(t) })
	base := newGlobalReq(n, 4096)
	base.Pooled = true
	err := d.eachNode(func(r int) error {
		req := base
		req.Prefix = fmt.Sprintf("%snode%d-", shm.Prefix(), r/perNode)
		g, desc, err := PrepareGlobal(req, r, chips[r])
		d.ranks[r], d.table[r] = g, desc
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	d.importAll(t)
	d.commitAll(t)
	views := d.views(t)
	for r, v := range views {
		if !v.wk.local() {
			t.Fatalf("rank %d (node %d) does not see every rank as hosted here", r, r/perNode)
		}
		if v.wk != views[0].wk {
			t.Fatalf("rank %d counts its ranks in a wake header of its own", r)
		}
	}
	// Rank 3 (node 0) waits for rank 12 (node 1).
	own, _ := views[3].Base(3)
	res := make(chan error, 1)
	go func() {
		_, err := views[3].Wait(own, 8, 1, ">=", 20*time.Second)
		res <- err
	}()
	eventually(t, "rank 3 to park", func() bool { return views[3].wk.ranks[3].parked.Load() > 0 })
	if s := atomic.LoadUint32(futex.Word32(views[3].hdr, rankWord(3, rankSleepers))); s != 0 {
		t.Errorf("%d threads sleep on rank 3's futex", s)
	}
	peer, _ := views[12].Base(3)
	if err := views[12].Notify(3, peer, 8, 1, "add"); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}
