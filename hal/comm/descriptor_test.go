package comm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

func sampleDescriptor() Descriptor {
	return Descriptor{
		Profile: ProfileSim, DomainID: 0x0102030405060708, Generation: 0x1112131415161718,
		Rank: 0x21222324, Ranks: 0x31323334, MappingSize: 0x4142434445464748,
		Handle: "simpler-77-gdom-a-b-r3",
		Secret: Secret{0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60},
	}
}

// A valid descriptor to mutate in the rejection tests.
func validDescriptor() Descriptor {
	return Descriptor{Profile: ProfileSim, DomainID: 9, Generation: 2, Rank: 3, Ranks: 4,
		MappingSize: 8192, Handle: "simpler-77-gdom-9-2-r3", Secret: Secret{15: 1}}
}

// The layout is a wire contract: every offset and width is pinned here by
// reading the encoding independently of the decoder.
func TestDescriptorLayout(t *testing.T) {
	if DescriptorSize != 192 || DescriptorHandleMax != 127 || DescriptorVersion != 3 || ProfileSim != 1 {
		t.Fatalf("size %d, handle max %d, version %d, sim %d", DescriptorSize, DescriptorHandleMax, DescriptorVersion, ProfileSim)
	}
	d := sampleDescriptor()
	b := EncodeDescriptor(d)
	if len(b) != 192 {
		t.Fatalf("encoded %d bytes", len(b))
	}
	le := binary.LittleEndian
	fields := []struct {
		name      string
		off, size int
		want      uint64
	}{
		{"version", 8, 4, 3},
		{"profile", 12, 4, 1},
		{"domain id", 16, 8, d.DomainID},
		{"generation", 24, 8, d.Generation},
		{"rank", 32, 4, uint64(d.Rank)},
		{"rank count", 36, 4, uint64(d.Ranks)},
		{"mapping size", 40, 8, d.MappingSize},
	}
	if string(b[0:8]) != "SMPLGDSC" {
		t.Errorf("magic %q", b[0:8])
	}
	end := 8
	for _, f := range fields {
		if f.off != end {
			t.Errorf("%s at %d: the fields before leave a gap or overlap (end %d)", f.name, f.off, end)
		}
		end = f.off + f.size
		var got uint64
		if f.size == 4 {
			got = uint64(le.Uint32(b[f.off:]))
		} else {
			got = le.Uint64(b[f.off:])
		}
		if got != f.want {
			t.Errorf("%s at offset %d: %#x, want %#x", f.name, f.off, got, f.want)
		}
	}
	if end != 48 {
		t.Errorf("handle starts at %d, want 48", end)
	}
	handle := b[48:176]
	if !bytes.HasPrefix(handle, []byte(d.Handle)) || bytes.ContainsFunc(handle[len(d.Handle):], func(r rune) bool { return r != 0 }) {
		t.Errorf("handle field %q", handle)
	}
	if !bytes.Equal(b[176:192], d.Secret[:]) {
		t.Errorf("secret field %x, want %x", b[176:192], d.Secret[:])
	}
	// The unexported offsets agree with the pinned ones.
	offs := []int{descOffMagic, descOffVersion, descOffProfile, descOffDomainID, descOffGeneration,
		descOffRank, descOffRanks, descOffMappingSize, descOffHandle, descOffHandle + descHandleLen, descOffSecret + len(Secret{})}
	if !slices.Equal(offs, []int{0, 8, 12, 16, 24, 32, 36, 40, 48, 176, 192}) || descOffSecret != descOffHandle+descHandleLen {
		t.Errorf("offsets %v", offs)
	}
}

func TestDescriptorRoundTrip(t *testing.T) {
	long := "simpler-" + strings.Repeat("x", DescriptorHandleMax-8)
	for _, d := range []Descriptor{
		validDescriptor(),
		{Profile: ProfileSim, DomainID: 0, Generation: 0, Rank: 0, Ranks: 1, MappingSize: 1, Handle: "h", Secret: Secret{0: 1}},
		{Profile: ProfileSim, DomainID: ^uint64(0), Generation: ^uint64(0), Rank: 1023, Ranks: 1024,
			MappingSize: ^uint64(0), Handle: long, Secret: NewSecret()},
	} {
		got, err := DecodeDescriptor(EncodeDescriptor(d))
		if err != nil || got != d {
			t.Errorf("round trip of %v: %v, %v", d, got, err)
		}
	}
}

func TestDescriptorRejects(t *testing.T) {
	le := binary.LittleEndian
	cases := []struct {
		name string
		mut  func([]byte) []byte
		want string
	}{
		{"empty", func(b []byte) []byte { return nil }, "0 bytes, want 192"},
		{"short", func(b []byte) []byte { return b[:191] }, "191 bytes, want 192"},
		{"long", func(b []byte) []byte { return append(b, 0) }, "193 bytes, want 192"},
		{"version 2's size", func(b []byte) []byte { return b[:176] }, "176 bytes, want 192"},
		{"magic", func(b []byte) []byte { b[3] ^= 1; return b }, "magic"},
		{"version 0", func(b []byte) []byte { le.PutUint32(b[8:], 0); return b }, "version 0 carries no secret, want version 3"},
		{"version 1", func(b []byte) []byte { le.PutUint32(b[8:], 1); return b }, "version 1 carries no secret, want version 3"},
		{"version 2", func(b []byte) []byte { le.PutUint32(b[8:], 2); return b }, "version 2 carries no secret, want version 3 (update every node)"},
		{"version 4", func(b []byte) []byte { le.PutUint32(b[8:], 4); return b }, "version 4, want 3"},
		{"zero secret", func(b []byte) []byte { clear(b[176:]); return b }, "no secret (all zero)"},
		{"no profile", func(b []byte) []byte { le.PutUint32(b[12:], 0); return b }, "unknown profile 0"},
		{"fabric profile", func(b []byte) []byte { le.PutUint32(b[12:], 2); return b }, "unknown profile 2"},
		{"no ranks", func(b []byte) []byte { le.PutUint32(b[36:], 0); return b }, "rank count 0"},
		{"too many ranks", func(b []byte) []byte { le.PutUint32(b[36:], 4097); return b }, "rank count 4097"},
		{"rank = count", func(b []byte) []byte { le.PutUint32(b[32:], 4); return b }, "rank 4 out of range for 4 ranks"},
		{"no mapping", func(b []byte) []byte { le.PutUint64(b[40:], 0); return b }, "mapping size 0"},
		{"empty handle", func(b []byte) []byte { clear(b[48:176]); return b }, "empty handle"},
		{"unterminated handle", func(b []byte) []byte {
			copy(b[48:], bytes.Repeat([]byte{'x'}, 128))
			return b
		}, "fills its 128 bytes without a NUL"},
		{"garbage after NUL", func(b []byte) []byte { b[175] = 'z'; return b }, "byte 127 of the handle's NUL padding is 0x7a"},
		{"garbage right after NUL", func(b []byte) []byte { b[48+23] = 1; return b }, "byte 23 of the handle's NUL padding is 0x1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := DecodeDescriptor(c.mut(EncodeDescriptor(validDescriptor())))
			if err == nil || !strings.HasPrefix(err.Error(), "ValueError: comm: bad global domain descriptor: ") ||
				!strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
			if d != (Descriptor{}) {
				t.Errorf("a rejected decode returned %v", d)
			}
		})
	}
	for _, h := range []string{strings.Repeat("h", 128), "a\x00b"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("EncodeDescriptor accepted the handle %q", h)
				}
			}()
			d := validDescriptor()
			d.Handle = h
			EncodeDescriptor(d)
		}()
	}
}

// Every accepted encoding is canonical: encoding the result gives the
// same bytes back.
func FuzzDecodeDescriptor(f *testing.F) {
	f.Add(EncodeDescriptor(validDescriptor()))
	f.Add(EncodeDescriptor(sampleDescriptor()))
	f.Add(make([]byte, DescriptorSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeDescriptor(b)
		if err != nil {
			return
		}
		if again := EncodeDescriptor(d); !bytes.Equal(again, b) {
			t.Errorf("decoded %v from %x, which encodes to %x", d, b, again)
		}
	})
}

// ---- helpers for global domains ----

var globalSeq atomic.Uint64

// No way of printing a descriptor shows its secret: not String, not any
// verb of fmt on the descriptor or on the secret alone.
func TestDescriptorNeverPrintsItsSecret(t *testing.T) {
	d := sampleDescriptor()
	hexed := fmt.Sprintf("%x", d.Secret[:]) // the bytes as a slice: what a leak would look like
	for _, out := range []string{
		d.String(), fmt.Sprint(d), fmt.Sprintf("%v %+v %#v %s %q %x %X", d, d, d, d, d, d, d),
		fmt.Sprintf("%v %+v %#v %s %x %d", d.Secret, d.Secret, d.Secret, d.Secret, d.Secret, d.Secret),
		fmt.Sprintf("%v", []Descriptor{d}),
	} {
		if strings.Contains(strings.ToLower(out), hexed[:8]) || strings.Contains(out, "81 82 83") || strings.Contains(out, "[81") {
			t.Errorf("printed the secret: %s", out)
		}
	}
	// A struct that holds a secret and has no String of its own.
	if got := fmt.Sprintf("%+v", struct{ S Secret }{d.Secret}); got != "{S:secret(…)}" {
		t.Errorf("%%+v of a struct holding a secret: %s, want {S:secret(…)}", got)
	}
}
