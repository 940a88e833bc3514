package inplace

import (
	"bytes"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"simpler/hal/dtype"
	"simpler/internal/leakcheck"
	"simpler/kind"
	"simpler/starlib/array"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

var ops = []Op{Sum, Max, Min}

// step is the copying reference of one step, x = x op y, element by
// element on the bytes: sum through starlib/array's own arithmetic (what
// a script's a + b computes), max and min on the decoded values, stored
// back as an array store rounds or wraps them.
func step(t *testing.T, dt dtype.DType, op Op, x, y []byte) []byte {
	t.Helper()
	n := len(x) / dt.Size()
	if op == Sum {
		a, err := array.FromBytes(dt, []int{n}, x)
		if err != nil {
			t.Fatal(err)
		}
		b, err := array.FromBytes(dt, []int{n}, y)
		if err != nil {
			t.Fatal(err)
		}
		z, err := a.Binary(syntax.PLUS, b, starlark.Left)
		if err != nil {
			t.Fatal(err)
		}
		return z.(*array.Array).Bytes()
	}
	out := make([]byte, len(x))
	sz := dt.Size()
	for i := 0; i < len(x); i += sz {
		a, b := x[i:i+sz], y[i:i+sz]
		if dt.IsFloat() {
			u, v := float32(dt.Float(a)), float32(dt.Float(b))
			r := max(u, v)
			if op == Min {
				r = min(u, v)
			}
			dt.PutFloat(out[i:], float64(r))
			continue
		}
		u, v := dt.Int(a), dt.Int(b)
		less := u < v
		if dt == dtype.UInt64 {
			less = uint64(u) < uint64(v)
		}
		r := u
		if less == (op == Max) {
			r = v
		}
		dt.PutInt(out[i:], r)
	}
	return out
}

// sequential is the reference of a whole reduction: a copy of srcs[0],
// then one step per further source.
func sequential(t *testing.T, dt dtype.DType, op Op, srcs [][]byte) []byte {
	acc := append([]byte(nil), srcs[0]...)
	for _, s := range srcs[1:] {
		acc = step(t, dt, op, acc, s)
	}
	return acc
}

// randomBytes fills n elements of dt: floats get small integers and now
// and then an infinity or a NaN, so sums stay comparable; integers get
// every bit pattern, so sums wrap.
func randomBytes(rng *rand.Rand, dt dtype.DType, n int) []byte {
	b := make([]byte, n*dt.Size())
	if !dt.IsFloat() {
		rng.Read(b)
		if dt == dtype.Bool {
			for i := range b {
				b[i] %= 3 // 0, 1, and a non-canonical true
			}
		}
		return b
	}
	for i := 0; i < n; i++ {
		v := float64(rng.Intn(9) - 4)
		switch rng.Intn(40) {
		case 0:
			v = math.NaN()
		case 1:
			v = math.Inf(1)
		case 2:
			v = math.Copysign(0, -1)
		}
		dt.PutFloat(b[i*dt.Size():], v)
	}
	return b
}

// sameElems compares element by element, NaN equal to NaN.
func sameElems(dt dtype.DType, got, want []byte) error {
	sz := dt.Size()
	for i := 0; i < len(want); i += sz {
		g, w := got[i:i+sz], want[i:i+sz]
		if bytes.Equal(g, w) {
			continue
		}
		if dt.IsFloat() && math.IsNaN(dt.Float(g)) && math.IsNaN(dt.Float(w)) {
			continue
		}
		return fmt.Errorf("element %d: got % x, want % x", i/sz, g, w)
	}
	return nil
}

// TestReduceIsTheSequentialCopyingResult: every dtype, every op, one to
// seventeen sources, odd element counts across the block size and either
// side of the largest small reduction (reduceSmall), one or three
// destinations: the in-place result is the result of the copying
// operations step by step. The k sources of each case are the first k of
// seventeen, so the reference of each k extends the one before it by a
// few steps (the reference is what takes the time, under -race most).
func TestReduceIsTheSequentialCopyingResult(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, dt := range dtype.All {
		for _, op := range ops {
			for _, count := range []int{1, 7, 33, smallBytes / dt.Size(), smallBytes/dt.Size() + 1, blockBytes/dt.Size() + 3} {
				srcs := make([][]byte, 17)
				for i := range srcs {
					srcs[i] = randomBytes(rng, dt, count)
				}
				acc, steps := srcs[0], 1 // acc is the reference over srcs[:steps]
				ks := []int{1, 2, 3, 4, 5, 7, 8, 17}
				if count*dt.Size() > blockBytes {
					// Past a block, a few sources check the block loop; many
					// sources are checked on the shorter counts, where the
					// element-by-element reference costs less under -race.
					ks = []int{1, 2, 3}
				}
				for _, k := range ks {
					for ; steps < k; steps++ {
						acc = step(t, dt, op, acc, srcs[steps])
					}
					want := acc // for k = 1, srcs[0]: one source is a copy, bytes as they are
					dsts := [][]byte{make([]byte, len(want)), make([]byte, len(want)), make([]byte, len(want))}
					nd := 1 + (count+k)%3
					if err := Reduce(dt, op, dsts[:nd], srcs[:k]); err != nil {
						t.Fatal(err)
					}
					for j := 0; j < nd; j++ {
						if err := sameElems(dt, dsts[j], want); err != nil {
							t.Fatalf("%s %s, %d sources of %d elements, dst %d: %v", dt, op, k, count, j, err)
						}
					}
				}
			}
		}
	}
}

// TestReduceThroughAliases: a destination that is one of the sources
// (first, second, a later one), and ranges that overlap at another
// offset, give the result of computing into a temporary.
func TestReduceThroughAliases(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for _, dt := range []dtype.DType{dtype.Float32, dtype.Float16, dtype.Int8, dtype.UInt64, dtype.Bool} {
		for _, op := range ops {
			count := blockBytes/dt.Size()*2 + 5 // three blocks
			sz := dt.Size()
			for _, who := range []int{0, 1, 2, 4} {
				srcs := make([][]byte, 6)
				for i := range srcs {
					srcs[i] = randomBytes(rng, dt, count)
				}
				want := sequential(t, dt, op, srcs)
				other := make([]byte, len(want))
				if err := Reduce(dt, op, [][]byte{srcs[who], other}, srcs); err != nil {
					t.Fatal(err)
				}
				for j, d := range [][]byte{srcs[who], other} {
					if err := sameElems(dt, d, want); err != nil {
						t.Fatalf("%s %s, dst %d is source %d: %v", dt, op, j, who, err)
					}
				}
			}
			// The destination starts one element into a source, and the
			// other way round.
			for _, shift := range []int{1, -1} {
				buf := randomBytes(rng, dt, count+1)
				other := randomBytes(rng, dt, count)
				a, d := buf[:count*sz], buf[sz:]
				if shift < 0 {
					a, d = d, a
				}
				srcs := [][]byte{other, a, other}
				want := sequential(t, dt, op, [][]byte{append([]byte(nil), other...), append([]byte(nil), a...), other})
				if err := Reduce(dt, op, [][]byte{d}, srcs); err != nil {
					t.Fatal(err)
				}
				if err := sameElems(dt, d, want); err != nil {
					t.Fatalf("%s %s, destination shifted %d element from a source: %v", dt, op, shift, err)
				}
			}
		}
	}
}

// TestReduceIntegersAreExact: 64-bit sums wrap exactly, and max/min of
// uint64 compare unsigned, where a float64 round trip would lose bits.
func TestReduceIntegersAreExact(t *testing.T) {
	enc := func(v uint64) []byte {
		b := make([]byte, 8)
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		return b
	}
	dec := func(b []byte) uint64 {
		var v uint64
		for i := range 8 {
			v |= uint64(b[i]) << (8 * i)
		}
		return v
	}
	cases := []struct {
		dt   dtype.DType
		op   Op
		a, b uint64
		want uint64
	}{
		{dtype.UInt64, Sum, 1<<63 + 1, 1<<62 + 3, 1<<63 + 1<<62 + 4},
		{dtype.UInt64, Sum, math.MaxUint64, 2, 1},
		{dtype.UInt64, Max, 1<<64 - 2, 1<<64 - 3, 1<<64 - 2},
		{dtype.UInt64, Min, 1 << 63, 5, 5},
		{dtype.Int64, Sum, math.MaxInt64, 1, 1 << 63},
		{dtype.Int64, Sum, 1<<53 + 1, 1, 1<<53 + 2},
		{dtype.Int64, Max, 1 << 63, 1, 1}, // MinInt64 vs 1
	}
	for _, c := range cases {
		d := make([]byte, 8)
		if err := Reduce(c.dt, c.op, [][]byte{d}, [][]byte{enc(c.a), enc(c.b)}); err != nil {
			t.Fatal(err)
		}
		if got := dec(d); got != c.want {
			t.Errorf("%s %d %s %d = %d, want %d", c.dt, c.a, c.op, c.b, got, c.want)
		}
	}
}

func TestReduceRefusesMismatchedRanges(t *testing.T) {
	b4, b8 := make([]byte, 4), make([]byte, 8)
	for _, c := range []struct {
		name       string
		dt         dtype.DType
		dsts, srcs [][]byte
	}{
		{"no sources", dtype.Float32, [][]byte{b4}, nil},
		{"no destinations", dtype.Float32, nil, [][]byte{b4}},
		{"sources disagree", dtype.Float32, [][]byte{b4}, [][]byte{b4, b8}},
		{"destination too long", dtype.Float32, [][]byte{b8}, [][]byte{b4, b4}},
		{"not whole elements", dtype.Int64, [][]byte{b4}, [][]byte{b4, b4}},
		{"no dtype", dtype.Invalid, [][]byte{b4}, [][]byte{b4}},
	} {
		if err := Reduce(c.dt, Sum, c.dsts, c.srcs); kind.Of(err) != kind.ValueError {
			t.Errorf("%s: got %v, want a ValueError", c.name, err)
		}
	}
}

// TestReduceAllocatesNothing: the hot path of a collective's kernel.
func TestReduceAllocatesNothing(t *testing.T) {
	mk := func() []byte { return make([]byte, 256<<10) }
	srcs := [][]byte{mk(), mk(), mk(), mk(), mk()}
	dsts := [][]byte{mk(), mk(), srcs[0]}
	for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Int64, dtype.Bool} {
		if n := testing.AllocsPerRun(10, func() {
			if err := Reduce(dt, Sum, dsts, srcs); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per Reduce", dt, n)
		}
	}
}

func TestParseOp(t *testing.T) {
	for _, op := range ops {
		if got, ok := ParseOp(op.String()); !ok || got != op {
			t.Errorf("ParseOp(%q) = %v, %v", op, got, ok)
		}
	}
	if _, ok := ParseOp("prod"); ok {
		t.Error("prod parsed")
	}
}

// BenchmarkReduceFloat32 is a 4-rank allreduce chunk: four sources of
// 1 MiB into four destinations.
func BenchmarkReduceFloat32(b *testing.B) {
	mk := func() []byte { return make([]byte, 1<<20) }
	srcs := [][]byte{mk(), mk(), mk(), mk()}
	dsts := [][]byte{mk(), mk(), mk(), mk()}
	b.SetBytes(8 << 20) // read 4 MiB, write 4 MiB
	for b.Loop() {
		if err := Reduce(dtype.Float32, Sum, dsts, srcs); err != nil {
			b.Fatal(err)
		}
	}
}
