package starlib

import (
	"bytes"
	"strings"
	"testing"

	"simpler/wire"
)

// The module bundle's format is wire.ChildBundle, fuzzed and bounded in
// package wire (FuzzDecodeChildBundle). These check the binding's side:
// what Session.bundle writes, and what NewResolver refuses.

// bundleOf is what Session.bundle writes for a loader with root and the
// modules' sums: the encoder itself, run on a loader made by hand.
func bundleOf(root string, sums map[string]string) []byte {
	l := &loader{root: root, modules: map[string]*module{}}
	for name, sum := range sums {
		l.modules[name] = &module{name: name, sum: sum}
	}
	return (&Session{loader: l}).bundle()
}

// Session.bundle sorts the loader's modules, so what it writes decodes.
func TestSessionBundleDecodes(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	sums := map[string]string{"main.star": sum, "lib/x.star": sum, "@simpler//collectives.star": strings.Repeat("01", 32), "": ""}
	b := bundleOf("/home/u/proj", sums)
	cb, err := wire.DecodeChildBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	if cb.Root != "/home/u/proj" || len(cb.Modules) != len(sums) {
		t.Fatalf("decoded %+v", cb)
	}
	for _, m := range cb.Modules {
		if sums[m.Name] != m.Sum {
			t.Errorf("module %q: sum %q, want %q", m.Name, m.Sum, sums[m.Name])
		}
	}
	if again := wire.Payload(&cb); !bytes.Equal(again, b) {
		t.Fatalf("not canonical:\n  in  %x\n  out %x", b, again)
	}
}

// A bundle whose names do not ascend (a repeat would replace the first
// one's sum unseen) is refused, as a bad bundle, before anything loads.
func TestNewResolverRefusesABadBundle(t *testing.T) {
	for _, names := range [][]string{{"b.star", "a.star"}, {"a.star", "a.star"}} {
		b := wire.ChildBundle{Root: "/root"}
		for _, n := range names {
			b.Modules = append(b.Modules, wire.ChildModule{Name: n})
		}
		_, err := NewResolver(wire.Payload(&b))
		if err == nil || !strings.HasPrefix(err.Error(), "RuntimeError: bad module bundle: ") || !strings.Contains(err.Error(), "names must ascend") {
			t.Errorf("%v: error %v, want a bad bundle whose names must ascend", names, err)
		}
	}
}
