package starlib

import (
	"bytes"
	"strings"
	"testing"
)

// bundleOf is what Session.bundle writes for a loader with root and the
// modules' sums: the encoder itself, run on a loader made by hand.
func bundleOf(root string, sums map[string]string) []byte {
	l := &loader{root: root, modules: map[string]*module{}}
	for name, sum := range sums {
		l.modules[name] = &module{name: name, sum: sum}
	}
	return (&Session{loader: l}).bundle()
}

// FuzzDecodeBundle: a child decodes its parent's module bundle. Decoding
// must not panic, and whatever decodes re-encodes to the same bytes.
func FuzzDecodeBundle(f *testing.F) {
	sum := strings.Repeat("ab", 32)
	for _, sums := range []map[string]string{
		{},
		{"main.star": sum},
		{"main.star": sum, "lib/x.star": sum, "@simpler//collectives.star": strings.Repeat("01", 32), "": ""},
	} {
		b := bundleOf("/home/u/proj", sums)
		if _, _, err := decodeBundle(b); err != nil {
			f.Fatalf("%v: its own bundle does not decode: %v", sums, err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		root, expect, err := decodeBundle(b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "RuntimeError: bad module bundle: ") {
				t.Fatalf("error %q is not a bad bundle's", err)
			}
			return
		}
		if again := bundleOf(root, expect); !bytes.Equal(again, b) {
			t.Fatalf("not canonical:\n  in  %x\n  out %x", b, again)
		}
	})
}

// A bundle's names ascend, as bundle sorts them: a repeated name would
// replace the first one's sum unseen, and an unsorted pair would not
// re-encode to the same bytes.
func TestDecodeBundleRefusesUnsortedOrRepeatedNames(t *testing.T) {
	for _, names := range [][]string{{"b.star", "a.star"}, {"a.star", "a.star"}} {
		var b []byte
		put := func(s string) {
			b = append(b, byte(len(s)), 0, 0, 0)
			b = append(b, s...)
		}
		put("/root")
		b = append(b, byte(len(names)), 0, 0, 0)
		for _, n := range names {
			put(n)
			put("sum")
		}
		_, _, err := decodeBundle(b)
		if err == nil || !strings.Contains(err.Error(), "names must ascend") {
			t.Errorf("%v: error %v, want names must ascend", names, err)
		}
		if _, err := NewResolver(b); err == nil {
			t.Errorf("%v: NewResolver accepted the bundle", names)
		}
	}
}
