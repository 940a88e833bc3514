package race

// signal is what the detector knows of one signal word: the values
// notifies left in it, newest last, each with the clock a wait that
// observes it acquires.
type signal struct {
	hist []sigWrite
}

type sigWrite struct {
	value int64
	clk   vclock
	by    *Ctx
}

// maxSignalHistory bounds the notifies remembered per word; a wait that
// observes an older value acquires nothing (and may then report a race
// that a longer memory would have ordered).
const maxSignalHistory = 16

// Notify runs do, c's notify of the signal word at addr (width bytes;
// add for op="add", of operand), which returns the value the word holds
// after it, and
// records it as an atomic write that releases what c did so far: a wait
// that observes the value acquires it. For an add the release also
// carries the earlier notifies' (an atomic read-modify-write continues
// them), for a set it replaces them. do runs under the detector's lock,
// so the value and the record cannot be torn apart by another notify.
func (c *Ctx) Notify(addr uintptr, width int, add bool, operand int64, op string, st Stack, do func() (int64, error)) error {
	if c.rec != nil {
		v, err := do()
		if err == nil {
			c.rec.add(event{kind: evNotify, key: c.rec.canon(addr), width: width, add: add, operand: operand, value: v, op: op, st: st})
		}
		return err
	}
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := do()
	if err != nil {
		return err
	}
	d.notified(c, canon(addr, 0), width, add, v, op, st)
	return nil
}

// notified records c's notify of the word at key, which left v in it.
func (d *Detector) notified(c *Ctx, key uintptr, width int, add bool, v int64, op string, st Stack) {
	d.access(c, key, key+uintptr(width), AtomicWrite, op, st)
	s := d.signals[key]
	if s == nil {
		s = &signal{}
		d.signals[key] = s
	}
	clk := c.vc.copy()
	if n := len(s.hist); add && n > 0 {
		clk.join(&s.hist[n-1].clk)
	}
	s.hist = append(s.hist, sigWrite{v, clk, c})
	if len(s.hist) > maxSignalHistory {
		s.hist = s.hist[1:]
	}
	c.tick()
}

// Waited records that c's wait on the word at addr ended observing got:
// an atomic read, after which c acquires the notify that left got there
// (the newest one that did).
func (c *Ctx) Waited(addr uintptr, width int, got int64, op string, st Stack) {
	if c.rec != nil {
		c.rec.add(event{kind: evWaited, key: c.rec.canon(addr), width: width, value: got, op: op, st: st})
		return
	}
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	d.waited(c, canon(addr, 0), width, got, op, st)
}

func (d *Detector) waited(c *Ctx, key uintptr, width int, got int64, op string, st Stack) {
	d.access(c, key, key+uintptr(width), AtomicRead, op, st)
	if h := d.notifyOf(key, got); h != nil {
		c.vc.join(&h.clk)
	}
}

// notifyOf is the newest notify that left v in the word at key, nil if
// none the detector remembers did.
func (d *Detector) notifyOf(key uintptr, v int64) *sigWrite {
	s := d.signals[key]
	if s == nil {
		return nil
	}
	for i := len(s.hist) - 1; i >= 0; i-- {
		if s.hist[i].value == v {
			return &s.hist[i]
		}
	}
	return nil
}

// plainWrite forgets the notifies of signal words a plain store of [lo,
// hi) overwrote: a wait can no longer observe their values.
func (d *Detector) plainWrite(lo, hi uintptr) {
	for a := range d.signals {
		if a >= lo && a < hi {
			delete(d.signals, a)
		}
	}
}

// rankKey counts one rank's barriers on one domain; barrierKey names a
// round of a domain's barrier.
type (
	rankKey struct {
		dom  string
		rank int
	}
	barrierKey struct {
		dom   string
		round int
	}
)

// barrierRound is one round of a domain's barrier: the join of the
// clocks of the ranks that arrived, which every rank that leaves acquires.
type barrierRound struct {
	clk     vclock
	arrived []bool
	count   int
	left    int
}

// Arrive records that c, rank of a domain of size ranks (dom names that
// allocation of it, among every domain the process ever had), arrives at
// its next barrier, and returns the round; Leave follows once the barrier
// passed.
func (c *Ctx) Arrive(dom string, rank, size int) int {
	if c.rec != nil {
		c.rec.add(event{kind: evArrive, dom: dom, rank: rank, size: size})
		return 0
	}
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.arrive(c, dom, rank, size)
}

func (d *Detector) arrive(c *Ctx, dom string, rank, size int) int {
	rk := rankKey{dom, rank}
	round := d.counts[rk]
	d.counts[rk] = round + 1
	b := d.bars[barrierKey{dom, round}]
	if b == nil {
		b = &barrierRound{arrived: make([]bool, size)}
		d.bars[barrierKey{dom, round}] = b
	}
	if rank >= 0 && rank < len(b.arrived) && !b.arrived[rank] {
		b.arrived[rank] = true
		b.count++
	}
	b.clk.join(&c.vc)
	c.tick()
	return round
}

// Leave orders what c does next after everything every rank did before
// arriving at round.
func (c *Ctx) Leave(dom string, round int) {
	if c.rec != nil {
		c.rec.add(event{kind: evLeave, dom: dom})
		return
	}
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	d.leave(c, dom, round)
}

func (d *Detector) leave(c *Ctx, dom string, round int) {
	k := barrierKey{dom, round}
	b := d.bars[k]
	if b == nil {
		return
	}
	c.vc.join(&b.clk)
	if b.left++; b.left == len(b.arrived) {
		delete(d.bars, k)
	}
}
