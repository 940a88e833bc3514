package comm

import (
	"encoding/binary"
	"os"
)

// The CommContext is what a kernel receives (as DeviceCtx) and hands to
// Open. It lives in ordinary device memory of its rank's chip, so it is
// reachable from a kernel in any process that runs that chip, and it holds
// only device addresses and sizes, never host pointers. Little-endian:
//
//	offset size field
//	     0    8 magic, "SMPLCOMM" read as a little-endian uint64
//	     8    4 version (ctxVersion)
//	    12    4 live: 1 while allocated, 0 once Release began
//	    16    4 rank
//	    20    4 size (number of ranks, n)
//	    24    8 window size in bytes
//	    32    8 allocation id
//	    40    8 device address of the shared header window
//	    48    8 size of the header window in bytes
//	    56    4 length of the domain name in bytes (at most maxNameLen)
//	    60    4 reserved, zero
//	    64  8*n window base of every rank, in this chip's address space
//	64+8*n  len domain name (UTF-8, not terminated)
const (
	ctxVersion = 1

	offMagic      = 0
	offVersion    = 8
	offLive       = 12
	offRank       = 16
	offSize       = 20
	offWindowSize = 24
	offAllocID    = 32
	offHeaderBase = 40
	offHeaderSize = 48
	offNameLen    = 56
	offBases      = 64

	maxNameLen = 255
	// maxRanks keeps the barrier's arrival count within its 16 bits and
	// the header within 17 pages (4 KiB ones); it is wire.MaxRanks, the
	// bound of a global domain's descriptor table.
	maxRanks = 4096
)

var ctxMagic = binary.LittleEndian.Uint64([]byte("SMPLCOMM"))

// ctxLen is the size of a CommContext for n ranks and a name of nameLen
// bytes.
func ctxLen(n, nameLen int) int { return offBases + 8*n + nameLen }

// ctxFields are the decoded contents of a CommContext.
type ctxFields struct {
	rank, size int
	windowSize int
	allocID    uint64
	headerBase uint64
	headerSize int
	name       string
	bases      []uint64
}

// truncName cuts a name to maxNameLen bytes; it is only used in messages.
func truncName(s string) string {
	if len(s) > maxNameLen {
		return s[:maxNameLen]
	}
	return s
}

func encodeCtx(f ctxFields) []byte {
	name := truncName(f.name)
	b := make([]byte, ctxLen(f.size, len(name)))
	le := binary.LittleEndian
	le.PutUint64(b[offMagic:], ctxMagic)
	le.PutUint32(b[offVersion:], ctxVersion)
	le.PutUint32(b[offLive:], 1)
	le.PutUint32(b[offRank:], uint32(f.rank))
	le.PutUint32(b[offSize:], uint32(f.size))
	le.PutUint64(b[offWindowSize:], uint64(f.windowSize))
	le.PutUint64(b[offAllocID:], f.allocID)
	le.PutUint64(b[offHeaderBase:], f.headerBase)
	le.PutUint64(b[offHeaderSize:], uint64(f.headerSize))
	le.PutUint32(b[offNameLen:], uint32(len(name)))
	for i, base := range f.bases {
		le.PutUint64(b[offBases+8*i:], base)
	}
	copy(b[offBases+8*f.size:], name)
	return b
}

// The header is one small shm object per allocation, mapped by every rank
// (and into every chip, so a kernel reaches it from the CommContext). It
// holds the synchronisation words, so nothing of the library's lives in
// the users' windows. Created zero-filled by ftruncate, which is a valid
// initial state for every word, so no rank has to initialise it. All
// words are uint32 (futex works on 32-bit words):
//
//	offset  field
//	     0  allocation barrier: ranks arrived (bits 0-30) | abandoned (bit 31)
//	     8  domain barrier: generation (bits 16-31) | ranks arrived (bits 0-15)
//	64+16r  rank r's notify sequence: bumped after every Notify into r's window
//	68+16r  rank r's sleepers: Waits on r's window blocked in the kernel
//	72+16r  rank r's last domain-barrier round: generation+1 when it arrived,
//	        | gaveUp (bit 31) once it timed out and withdrew
//	76+16r  rank r arrived at the allocation barrier: 1
const (
	hdrAlloc   = 0
	hdrBarrier = 8
	hdrRanks   = 64
	hdrPerRank = 16

	rankSeq      = 0
	rankSleepers = 4
	rankBarrier  = 8
	rankAlloc    = 12

	gaveUp         = 1 << 31
	allocAbandoned = 1 << 31
	allocCount     = allocAbandoned - 1
)

var pageSize = os.Getpagesize()

func roundPage(n int) int { return (n + pageSize - 1) / pageSize * pageSize }

// headerSize is the size of the header object for n ranks.
func headerSize(n int) int { return roundPage(hdrRanks + hdrPerRank*n) }

// rankWord is the offset of one of rank r's header words.
func rankWord(r, field int) int { return hdrRanks + hdrPerRank*r + field }
