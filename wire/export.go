package wire

// ExportIDSize is the encoded size of an export id in this version.
const ExportIDSize = 1 + 8 + 8 + 16

// exportIDVersion starts every export id, so a later layout is told apart.
const exportIDVersion = 1

// ExportID names one export of a remote buffer: the daemon that runs the
// owning session (its random id, which finds it among this user's daemons
// on one host), the session's slot there and 128 random bits that only
// that session's table resolves. It carries no shared-memory name,
// address or size: what an export covers (buffer, range, access, the
// parent it belongs to) is recorded by the owner when it exports, and an
// import learns it only from there.
type ExportID struct {
	Daemon uint64   // the owning session's daemon; non-zero
	Slot   uint64   // the owning session, as its daemon numbers them; non-zero
	Secret [16]byte // drawn from crypto/rand by the owner; not all zero
}

// Encode writes the id: a version byte, the daemon, the slot, the secret.
func (x ExportID) Encode(e *Encoder) {
	e.U8(exportIDVersion)
	e.U64(x.Daemon)
	e.U64(x.Slot)
	e.Raw(x.Secret[:])
}

// Bytes is the id's encoding, the opaque export token a parent relays.
func (x ExportID) Bytes() []byte { return Payload(x) }

// DecodeExportID reads an export id of exactly ExportIDSize bytes.
func DecodeExportID(b []byte) (ExportID, error) {
	var x ExportID
	d := NewDecoder(b)
	if v := d.U8(); d.err == nil && v != exportIDVersion {
		d.FailBounds("export id version %d, want %d", v, exportIDVersion)
	}
	x.Daemon = d.U64()
	if d.err == nil && x.Daemon == 0 {
		d.FailBounds("export id of daemon 0")
	}
	x.Slot = d.U64()
	if d.err == nil && x.Slot == 0 {
		d.FailBounds("export id of session slot 0")
	}
	copy(x.Secret[:], d.take(len(x.Secret)))
	if d.err == nil && x.Secret == ([16]byte{}) {
		d.FailBounds("export id with an all-zero secret")
	}
	if err := d.Finish(); err != nil {
		return ExportID{}, err
	}
	return x, nil
}
