package engine

import (
	"strings"
	"testing"
	"time"

	"simpler/hal/comm"
	"simpler/wire"
)

func sampleGlobalRankReqs() []ctlReq {
	desc := func(rank uint32) comm.Descriptor {
		return comm.Descriptor{Profile: comm.ProfileSim, DomainID: 7, Generation: 1, Rank: rank, Ranks: 2,
			MappingSize: 4096, Handle: "simpler-1-w2-gdom-7-1-0123456789abcdef0123456789abcdef-r" + string('0'+rune(rank))}
	}
	req := comm.GlobalRequest{Prefix: "simpler-1-w2-", DomainID: 7, Generation: 1, Name: "g", Ranks: 2, WindowSize: 4096, Timeout: time.Second}
	id := comm.GlobalRequest{DomainID: 7, Generation: 1}
	return []ctlReq{
		{op: opGlobalRank, grank: globalRankReq{step: grPrepare, req: req, rank: 1}},
		{op: opGlobalRank, grank: globalRankReq{step: grImport, req: id, rank: 1, table: []comm.Descriptor{desc(0), desc(1)}}},
		{op: opGlobalRank, grank: globalRankReq{step: grCommit, req: id, rank: 1}},
		{op: opGlobalRank, grank: globalRankReq{step: grInvalidate, req: id}},
		{op: opGlobalRank, grank: globalRankReq{step: grRelease, req: id, rank: 4095}},
	}
}

// The opGlobalRank request decodes canonically, like every mailbox form.
func FuzzDecodeGlobalRankRequest(f *testing.F) {
	var seeds [][]byte
	for _, r := range sampleGlobalRankReqs() {
		seeds = append(seeds, encoded(r.encode))
	}
	fuzzCanonical(f, seeds, func(b []byte) (func(*wire.Encoder) error, error) {
		r, err := decodeCtlReq(b)
		return func(e *wire.Encoder) error { r.encode(e); return nil }, err
	})
}

// Every step round-trips; an unknown step, a rank past the bound, a bad
// descriptor, a table longer than its bytes and trailing bytes are
// refused before the child acts on any of it.
func TestGlobalRankRequestDecoding(t *testing.T) {
	for _, r := range sampleGlobalRankReqs() {
		b := encoded(r.encode)
		got, err := decodeCtlReq(b)
		if err != nil {
			t.Fatalf("step %d: %v", r.grank.step, err)
		}
		canonical(t, b, func(e *wire.Encoder) error { got.encode(e); return nil })
		if got.grank.step != r.grank.step || got.grank.rank != r.grank.rank || len(got.grank.table) != len(r.grank.table) {
			t.Errorf("step %d decoded as %+v", r.grank.step, got.grank)
		}
	}
	samples := sampleGlobalRankReqs()
	importReq := encoded(samples[1].encode)
	badDesc := append([]byte(nil), importReq...)
	badDesc[len(badDesc)-comm.DescriptorSize] ^= 0xff // the second descriptor's magic
	unknown := encoded(func(e *wire.Encoder) { e.U8(opGlobalRank); e.U8(9); e.U64(7); e.U64(1); e.Int(0) })
	farRank := encoded(func(e *wire.Encoder) { e.U8(opGlobalRank); e.U8(grCommit); e.U64(7); e.U64(1); e.Int(wire.MaxRanks) })
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"unknown step", unknown, "unknown global rank step 9"},
		{"rank past the bound", farRank, "exceeds its bound"},
		{"bad descriptor", badDesc, "descriptor 1"},
		{"truncated table", importReq[:len(importReq)-1], "truncated"},
		{"trailing bytes", append(encoded(samples[2].encode), 0), "trailing"},
	} {
		if _, err := decodeCtlReq(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}
