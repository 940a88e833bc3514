package wire

// Health is a probe on the health lane.
type Health struct {
	Timestamp int64 // the sender's clock, Unix nanoseconds
}

// Encode writes the HEALTH payload.
func (h *Health) Encode(e *Encoder) { e.I64(h.Timestamp) }

// DecodeHealth reads a HEALTH payload.
func DecodeHealth(b []byte) (Health, error) {
	d := NewDecoder(b)
	h := Health{Timestamp: d.I64()}
	if err := d.Finish(); err != nil {
		return Health{}, err
	}
	return h, nil
}

// HealthReply answers a probe: its sequence and timestamp, echoed (the
// round trip is the parent's clock now minus Timestamp), and how many
// tasks the daemon has accepted and not yet completed.
type HealthReply struct {
	Seq       uint64
	Timestamp int64
	InFlight  uint32
}

// Encode writes the HEALTH_REPLY payload.
func (r *HealthReply) Encode(e *Encoder) {
	e.U64(r.Seq)
	e.I64(r.Timestamp)
	e.U32(r.InFlight)
}

// DecodeHealthReply reads a HEALTH_REPLY payload.
func DecodeHealthReply(b []byte) (HealthReply, error) {
	d := NewDecoder(b)
	r := HealthReply{Seq: decodeSeq(d), Timestamp: d.I64(), InFlight: d.U32()}
	if err := d.Finish(); err != nil {
		return HealthReply{}, err
	}
	return r, nil
}

// Shutdown ends a session, from either side; the header's FlagDrain says
// whether in-flight work finishes first.
type Shutdown struct {
	Reason string // ≤ MaxReason bytes, may be empty
}

// Encode writes the SHUTDOWN payload.
func (s *Shutdown) Encode(e *Encoder) { e.String(s.Reason) }

// DecodeShutdown reads a SHUTDOWN payload.
func DecodeShutdown(b []byte) (Shutdown, error) {
	d := NewDecoder(b)
	s := Shutdown{Reason: d.StringMax(MaxReason)}
	if err := d.Finish(); err != nil {
		return Shutdown{}, err
	}
	return s, nil
}
