package comm

// The descriptor of one rank of a global domain: what a node exports for
// each of its ranks at prepare, and what every node receives, as a
// rank-ordered table, to import. It crosses process and machine
// boundaries, so its layout is fixed and versioned. Little-endian:
//
//	offset size field
//	     0    8 magic, "SMPLGDSC" read as a little-endian uint64
//	     8    4 version (DescriptorVersion)
//	    12    4 profile (ProfileSim)
//	    16    8 domain id
//	    24    8 generation
//	    32    4 rank
//	    36    4 rank count
//	    40    8 mapping size: the bytes of the rank's window
//	    48  128 backend handle, NUL-padded; for ProfileSim the name of the
//	            shm object behind the rank's window, at most 127 bytes so
//	            that the field always ends in a NUL
//	   176   16 secret: the window's capability, never zero (seal.go)
//	   192      end (DescriptorSize)
//
// Version 2 widened the handle to carry 128 random bits, when the name was
// taken for the capability. A name in /dev/shm is listed to every local
// user, so version 3 makes the handle a mere locator and adds the secret,
// which is in no name: a node maps a peer's window only if the secret
// stored in the window's object is the descriptor's. Older versions are
// refused, naming the version, so a node that predates the secret is
// never handed a window it could not check.
import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"

	"simpler/kind"
)

// Profile is a global domain's backend: how a rank's window is exported
// and imported.
type Profile uint32

// ProfileSim shares windows as POSIX shared-memory objects on one host.
// (0 is deliberately no profile: a zeroed descriptor is invalid.)
const ProfileSim Profile = 1

func (p Profile) String() string {
	if p == ProfileSim {
		return "sim"
	}
	return "profile(" + strconv.FormatUint(uint64(p), 10) + ")"
}

const (
	// DescriptorSize is the encoded size of every descriptor.
	DescriptorSize = 192
	// DescriptorVersion is the layout version written and accepted.
	DescriptorVersion = 3
	// DescriptorHandleMax is the longest backend handle, in bytes.
	DescriptorHandleMax = descHandleLen - 1

	descOffMagic       = 0
	descOffVersion     = 8
	descOffProfile     = 12
	descOffDomainID    = 16
	descOffGeneration  = 24
	descOffRank        = 32
	descOffRanks       = 36
	descOffMappingSize = 40
	descOffHandle      = 48
	descHandleLen      = 128
	descOffSecret      = 176
)

var descMagic = binary.LittleEndian.Uint64([]byte("SMPLGDSC"))

// Descriptor is one rank's export of a global domain. The magic and the
// version are not fields: EncodeDescriptor writes the current ones and
// DecodeDescriptor accepts nothing else.
type Descriptor struct {
	Profile     Profile
	DomainID    uint64
	Generation  uint64
	Rank        uint32
	Ranks       uint32 // the domain's rank count
	MappingSize uint64 // bytes of the rank's window
	Handle      string // ProfileSim: the shm object name of the window, a locator only
	Secret      Secret // the capability: what the window's object stores (seal.go)
}

// String shows every field but the secret, which no message may carry.
func (d Descriptor) String() string {
	return fmt.Sprintf("{%v domain %d generation %d rank %d/%d, %d bytes, %q}",
		d.Profile, d.DomainID, d.Generation, d.Rank, d.Ranks, d.MappingSize, d.Handle)
}

// EncodeDescriptor returns the DescriptorSize bytes of d. It writes any
// descriptor whose Handle fits the field (DecodeDescriptor is the one that
// validates); a Handle longer than DescriptorHandleMax or holding a NUL
// byte cannot be represented and panics. Descriptors made by PrepareGlobal
// or DecodeDescriptor never do.
func EncodeDescriptor(d Descriptor) []byte {
	if len(d.Handle) > DescriptorHandleMax || bytes.IndexByte([]byte(d.Handle), 0) >= 0 {
		panic(fmt.Sprintf("comm: descriptor handle %q does not fit %d NUL-free bytes", d.Handle, DescriptorHandleMax))
	}
	b := make([]byte, DescriptorSize)
	le := binary.LittleEndian
	le.PutUint64(b[descOffMagic:], descMagic)
	le.PutUint32(b[descOffVersion:], DescriptorVersion)
	le.PutUint32(b[descOffProfile:], uint32(d.Profile))
	le.PutUint64(b[descOffDomainID:], d.DomainID)
	le.PutUint64(b[descOffGeneration:], d.Generation)
	le.PutUint32(b[descOffRank:], d.Rank)
	le.PutUint32(b[descOffRanks:], d.Ranks)
	le.PutUint64(b[descOffMappingSize:], d.MappingSize)
	copy(b[descOffHandle:descOffHandle+descHandleLen], d.Handle)
	copy(b[descOffSecret:], d.Secret[:])
	return b
}

// DecodeDescriptor parses and checks an encoded descriptor: exactly
// DescriptorSize bytes, the magic, DescriptorVersion, a known profile,
// 1 <= rank count <= 4096, rank < rank count, a mapping size > 0, a
// non-empty handle followed only by NUL bytes, and a non-zero secret. Whether the descriptor fits
// a particular domain is Import's to check.
func DecodeDescriptor(b []byte) (Descriptor, error) {
	bad := func(format string, args ...any) (Descriptor, error) {
		return Descriptor{}, kind.Errorf(kind.ValueError, "comm: bad global domain descriptor: "+format, args...)
	}
	if len(b) != DescriptorSize {
		return bad("%d bytes, want %d", len(b), DescriptorSize)
	}
	le := binary.LittleEndian
	if m := le.Uint64(b[descOffMagic:]); m != descMagic {
		return bad("magic %#x, want %#x", m, descMagic)
	}
	if v := le.Uint32(b[descOffVersion:]); v != DescriptorVersion {
		if v < DescriptorVersion {
			return bad("version %d carries no secret, want version %d (update every node)", v, DescriptorVersion)
		}
		return bad("version %d, want %d", v, DescriptorVersion)
	}
	d := Descriptor{
		Profile:     Profile(le.Uint32(b[descOffProfile:])),
		DomainID:    le.Uint64(b[descOffDomainID:]),
		Generation:  le.Uint64(b[descOffGeneration:]),
		Rank:        le.Uint32(b[descOffRank:]),
		Ranks:       le.Uint32(b[descOffRanks:]),
		MappingSize: le.Uint64(b[descOffMappingSize:]),
	}
	if d.Profile != ProfileSim {
		return bad("unknown profile %d", uint32(d.Profile))
	}
	if d.Ranks < 1 || d.Ranks > maxRanks {
		return bad("rank count %d; want 1..%d", d.Ranks, maxRanks)
	}
	if d.Rank >= d.Ranks {
		return bad("rank %d out of range for %d ranks", d.Rank, d.Ranks)
	}
	if d.MappingSize == 0 {
		return bad("mapping size 0")
	}
	h := b[descOffHandle : descOffHandle+descHandleLen]
	n := bytes.IndexByte(h, 0)
	switch {
	case n < 0:
		return bad("the handle fills its %d bytes without a NUL", descHandleLen)
	case n == 0:
		return bad("empty handle")
	}
	for i, c := range h[n:] {
		if c != 0 {
			return bad("byte %d of the handle's NUL padding is %#x", n+i, c)
		}
	}
	d.Handle = string(h[:n])
	copy(d.Secret[:], b[descOffSecret:])
	if d.Secret.IsZero() {
		return bad("no secret (all zero)")
	}
	return d, nil
}
