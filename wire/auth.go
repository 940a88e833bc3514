package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// ChallengeSize is the CHALLENGE payload: the nonce alone.
const ChallengeSize = 32

// Challenge is the daemon's first frame on a connection: a fresh random
// nonce the parent must prove knowledge of the token against.
type Challenge struct {
	Nonce [32]byte
}

// Encode writes the 32 nonce bytes.
func (c Challenge) Encode(e *Encoder) { e.Raw(c.Nonce[:]) }

// DecodeChallenge reads exactly ChallengeSize bytes.
func DecodeChallenge(b []byte) (Challenge, error) {
	var c Challenge
	d := NewDecoder(b)
	copy(c.Nonce[:], d.take(ChallengeSize))
	if err := d.Finish(); err != nil {
		return Challenge{}, err
	}
	return c, nil
}

// Prove is the parent's answer to a challenge: HMAC-SHA256 keyed by the
// shared token over nonce || session || parent (the ids as 8 little-endian
// bytes each). The token itself never crosses the wire.
func Prove(token []byte, nonce [32]byte, session, parent uint64) [32]byte {
	m := hmac.New(sha256.New, token)
	m.Write(nonce[:])
	var s [16]byte
	binary.LittleEndian.PutUint64(s[:8], session)
	binary.LittleEndian.PutUint64(s[8:], parent)
	m.Write(s[:])
	var p [32]byte
	m.Sum(p[:0])
	return p
}

// Verify checks a proof in constant time.
func Verify(token []byte, nonce [32]byte, session, parent uint64, proof [32]byte) bool {
	want := Prove(token, nonce, session, parent)
	return hmac.Equal(want[:], proof[:])
}
