package wire

import "testing"

// The bulk prefixes are decoders of bytes from a socket too: a session
// reads a COPY_TO's prefix, and a parent a COPY_FROM reply's, before the
// data. A prefix's ok only says "a bulk message of exactly the rest of the
// frame": the session still checks the buffer and the range itself, and
// falls back to the whole decoder when they fail (session.readBulk). So
// the bodies check that a prefix never panics, that ok holds only for a
// message of the frame's length, and that wherever the whole message's
// decoder accepts too, both read the same fields.

// bulkCheckBound is the largest data length the fuzz bodies build a whole
// message for; beyond it they check the prefix alone.
const bulkCheckBound = 4096

func FuzzDecodeCopyToPrefix(f *testing.F) {
	p := Payload(&Control{Cmd: CmdCopyTo, Buffer: BufferRef{ID: 3, Generation: 2}, Offset: 7, Data: []byte{1, 2, 3}})
	f.Add(p[:CopyToPrefixSize], len(p))
	f.Add(p[:CopyToPrefixSize], len(p)+1)
	f.Fuzz(func(t *testing.T, b []byte, frameLen int) {
		buf, off, n, ok := DecodeCopyToPrefix(b, frameLen)
		if !ok {
			return
		}
		if n <= 0 || n > MaxCopy || CopyToPrefixSize+n != frameLen {
			t.Fatalf("the prefix %x accepted %d bytes of data in a frame of %d", b, n, frameLen)
		}
		if n > bulkCheckBound {
			return
		}
		whole := append(append([]byte(nil), b...), make([]byte, n)...)
		c, err := DecodeControl(whole)
		if err != nil {
			return // a range or a buffer the session refuses itself
		}
		if c.Cmd != CmdCopyTo || c.Buffer != buf || c.Offset != off || len(c.Data) != n {
			t.Fatalf("the prefix says %v %d %d bytes, the message %+v", buf, off, n, c)
		}
	})
}

func FuzzDecodeCopyFromReplyPrefix(f *testing.F) {
	r := Payload(&ControlReply{Seq: 11, Cmd: CmdCopyFrom, Data: []byte{1, 2, 3}})
	f.Add(r[:CopyFromReplyPrefixSize], len(r))
	e := Payload(&ControlReply{Seq: 11, Cmd: CmdCopyFrom, Err: &ErrorBody{Kind: "ValueError", Message: "no"}})
	f.Add(e[:CopyFromReplyPrefixSize], len(e))
	f.Fuzz(func(t *testing.T, b []byte, frameLen int) {
		seq, n, ok := DecodeCopyFromReplyPrefix(b, frameLen)
		if !ok {
			return
		}
		if n < 0 || seq == 0 || CopyFromReplyPrefixSize+n != frameLen {
			t.Fatalf("the prefix %x accepted seq %d, %d bytes in a frame of %d", b, seq, n, frameLen)
		}
		if n > bulkCheckBound {
			return
		}
		whole := append(append([]byte(nil), b...), make([]byte, n)...)
		r, err := DecodeControlReply(whole)
		if err != nil {
			return
		}
		if r.Seq != seq || r.Cmd != CmdCopyFrom || r.Err != nil || len(r.Data) != n {
			t.Fatalf("the prefix says seq %d, %d bytes; the reply %+v", seq, n, r)
		}
	})
}
