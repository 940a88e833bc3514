package global

import (
	"reflect"
	"testing"

	"simpler/engine"
	"simpler/hal/comm"
)

func globalRankDescriptor(rank uint32) comm.Descriptor {
	return comm.Descriptor{Profile: comm.ProfileSim, DomainID: 7, Generation: 1, Rank: rank, Ranks: 2,
		MappingSize: 4096, Handle: "simpler-1-w2-gdom-7-1-0123456789abcdef0123456789abcdef-r" + string('0'+rune(rank)),
		Secret: comm.Secret{0: 7, 15: byte(rank + 1)}}
}

// Descriptor tables convert both ways, and a bad descriptor is named.
// (A chip process's refusal of one is engine/proc's test.)
func TestDescriptorTableConversion(t *testing.T) {
	ds := []comm.Descriptor{globalRankDescriptor(0), globalRankDescriptor(1)}
	back, err := engine.CommDescriptors(engine.WireDescriptors(ds))
	if err != nil || !reflect.DeepEqual(back, ds) {
		t.Fatalf("%+v came back as %+v (%v)", ds, back, err)
	}
	if got, err := engine.CommDescriptors(engine.WireDescriptors(nil)); err != nil || got != nil {
		t.Errorf("an empty table: %v, %v", got, err)
	}
	table := engine.WireDescriptors(ds)
	table.Descriptors[1][0] ^= 0xff // the second descriptor's magic
	_, err = engine.CommDescriptors(table)
	wantErrText(t, "a bad descriptor", err, "descriptor 1")
}
