package engine

import (
	"reflect"
	"strings"
	"testing"

	"simpler/hal/comm"
	"simpler/wire"
)

// The opGlobalRank request is wire's (wire.GlobalRankReq), bounded and
// fuzzed there. These check the engine's side: descriptor tables convert
// both ways, and a child refuses a table with a bad descriptor before it
// looks for the rank.

func globalRankDescriptor(rank uint32) comm.Descriptor {
	return comm.Descriptor{Profile: comm.ProfileSim, DomainID: 7, Generation: 1, Rank: rank, Ranks: 2,
		MappingSize: 4096, Handle: "simpler-1-w2-gdom-7-1-0123456789abcdef0123456789abcdef-r" + string('0'+rune(rank))}
}

func TestDescriptorTableConversion(t *testing.T) {
	ds := []comm.Descriptor{globalRankDescriptor(0), globalRankDescriptor(1)}
	back, err := commDescriptors(wireDescriptors(ds))
	if err != nil || !reflect.DeepEqual(back, ds) {
		t.Fatalf("%+v came back as %+v (%v)", ds, back, err)
	}
	if got, err := commDescriptors(wireDescriptors(nil)); err != nil || got != nil {
		t.Errorf("an empty table: %v, %v", got, err)
	}
	table := wireDescriptors(ds)
	table.Descriptors[1][0] ^= 0xff // the second descriptor's magic
	_, err = commDescriptors(table)
	wantErrText(t, "a bad descriptor", err, "descriptor 1")
}

func TestChildRefusesABadImportTable(t *testing.T) {
	c := &child{granks: map[grankKey]*comm.GlobalRank{}}
	g := wire.GlobalRankReq{Step: grImport, DomainID: 7, Generation: 1, Rank: 1,
		Table: wireDescriptors([]comm.Descriptor{globalRankDescriptor(0), globalRankDescriptor(1)})}
	g.Table.Descriptors[1][0] ^= 0xff
	_, err := c.globalRank(&g)
	if err == nil || !strings.Contains(err.Error(), "descriptor 1") {
		t.Errorf("a bad descriptor: %v, want it refused before the rank is looked for", err)
	}
}
