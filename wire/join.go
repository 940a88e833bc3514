package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// Host names the host a node runs on: its name, for messages, and a key
// that two processes share exactly when they share the host's shared
// memory (internal/hostid: the kernel's boot and the /dev/shm mount).
type Host struct {
	Name string   // 1..MaxHostName printable ASCII characters, no space
	Key  [32]byte // opaque
}

func (h Host) encode(e *Encoder) {
	e.String(h.Name)
	e.Raw(h.Key[:])
}

func decodeHost(d *Decoder) Host {
	var h Host
	h.Name = d.StringMax(MaxHostName)
	if d.err == nil {
		if h.Name == "" {
			d.FailBounds("empty host name")
		}
		for i := 0; i < len(h.Name) && d.err == nil; i++ {
			if c := h.Name[i]; c <= ' ' || c > '~' {
				d.FailBounds("host name %q: want printable ASCII without spaces", h.Name)
			}
		}
	}
	copy(h.Key[:], d.take(32))
	return h
}

// Join is a rank's first frame on a connection it dialled to its level-4
// worker, in answer to that worker's CHALLENGE: its proof of the token
// over the challenge, its own challenge for the worker's proof (the
// HELLO that follows), and what it is: its rank in the group, its host
// and process, its platform and the devices it offers.
type Join struct {
	Version   uint16   // the highest protocol version the rank speaks (≥ 1)
	Rank      int      // < MaxGroupRanks
	Nonce     [32]byte // the rank's challenge: the HELLO's proof is over it
	Proof     [32]byte // ProveJoin(token, the CHALLENGE's nonce, Nonce, Rank)
	Host      Host
	PID       uint32 // the rank's process, for messages
	Platform  string // non-empty, [A-Za-z0-9._-]
	DeviceIDs []int  // the devices it offers; empty: it names none
}

// Encode writes the JOIN payload.
func (j *Join) Encode(e *Encoder) {
	e.U16(j.Version)
	e.Int(j.Rank)
	e.Raw(j.Nonce[:])
	e.Raw(j.Proof[:])
	j.Host.encode(e)
	e.U32(j.PID)
	e.String(j.Platform)
	encodeInts(e, j.DeviceIDs)
}

// DecodeJoin reads a JOIN payload.
func DecodeJoin(b []byte) (Join, error) {
	d := NewDecoder(b)
	var j Join
	j.Version = d.U16()
	if d.err == nil && j.Version == 0 {
		d.FailBounds("join protocol version 0")
	}
	j.Rank = d.Int(MaxGroupRanks - 1)
	copy(j.Nonce[:], d.take(32))
	copy(j.Proof[:], d.take(32))
	j.Host = decodeHost(d)
	j.PID = d.U32()
	j.Platform = decodeIdent(d, "platform")
	if d.err == nil && j.Platform == "" {
		d.FailBounds("empty platform")
	}
	j.DeviceIDs = decodeInts(d, MaxDevices, MaxDeviceID, "device id")
	if err := d.Finish(); err != nil {
		return Join{}, err
	}
	return j, nil
}

// joinLabel separates a rank's proof from every other MAC of the token:
// the message a HELLO's proof covers is 48 bytes, a JOIN's 85, and no
// prefix of one is the other.
const joinLabel = "simpler-join\x00"

// ProveJoin is a rank's proof of the token: HMAC-SHA256 keyed by the
// token over joinLabel || the parent's challenge nonce || the rank's own
// nonce || the rank (8 little-endian bytes). The parent answers with a
// HELLO whose proof is Prove over the rank's nonce, so each side proves
// the token against a nonce the other chose.
func ProveJoin(token []byte, challenge, nonce [32]byte, rank int) [32]byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(joinLabel))
	m.Write(challenge[:])
	m.Write(nonce[:])
	var r [8]byte
	binary.LittleEndian.PutUint64(r[:], uint64(rank))
	m.Write(r[:])
	var p [32]byte
	m.Sum(p[:0])
	return p
}

// VerifyJoin checks a rank's proof in constant time.
func VerifyJoin(token []byte, challenge, nonce [32]byte, rank int, proof [32]byte) bool {
	want := ProveJoin(token, challenge, nonce, rank)
	return hmac.Equal(want[:], proof[:])
}
