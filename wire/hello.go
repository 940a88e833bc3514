package wire

// Module is one module of a bundle: its name as the parent's loader knows
// it, and its source.
type Module struct {
	Name   string
	Source []byte
}

// Hello is the parent's first frame after the CHALLENGE: its proof of the
// token and the manifest of the L3 node it wants. It is small (MaxHello)
// because the daemon reads and checks it before it does any other work for
// the connection; the code the node runs follows once the node is up, as a
// BUNDLE command.
type Hello struct {
	Version           uint16   // the highest protocol version the parent speaks (≥ 1)
	Parent            uint64   // the parent's id, non-zero: drawn once per level-4 worker; exports are bound to it
	Proof             [32]byte // Prove(token, challenge nonce, header session, Parent)
	Platform          string
	DeviceIDs         []int
	NumSubWorkers     int
	CommProfile       string
	GlobalDeviceRanks []int // empty, or one per device id
}

// Encode writes the HELLO payload.
func (h *Hello) Encode(e *Encoder) {
	e.U16(h.Version)
	e.U64(h.Parent)
	e.Raw(h.Proof[:])
	e.String(h.Platform)
	encodeInts(e, h.DeviceIDs)
	e.Int(h.NumSubWorkers)
	e.String(h.CommProfile)
	encodeInts(e, h.GlobalDeviceRanks)
}

// DecodeHello reads a HELLO payload.
func DecodeHello(b []byte) (Hello, error) {
	d := NewDecoder(b)
	var h Hello
	h.Version = d.U16()
	if d.err == nil && h.Version == 0 {
		d.FailBounds("hello protocol version 0")
	}
	h.Parent = d.U64()
	if d.err == nil && h.Parent == 0 {
		d.FailBounds("hello from parent 0")
	}
	copy(h.Proof[:], d.take(32))
	h.Platform = decodeIdent(d, "platform")
	if d.err == nil && h.Platform == "" {
		d.FailBounds("empty platform")
	}
	h.DeviceIDs = decodeInts(d, MaxDevices, MaxDeviceID, "device id")
	h.NumSubWorkers = d.Int(MaxSubWorkers)
	h.CommProfile = decodeIdent(d, "comm profile")
	h.GlobalDeviceRanks = decodeInts(d, MaxDevices, MaxDeviceID, "global device rank")
	if d.err == nil && len(h.GlobalDeviceRanks) != 0 && len(h.GlobalDeviceRanks) != len(h.DeviceIDs) {
		d.FailBounds("%d global device ranks for %d device ids", len(h.GlobalDeviceRanks), len(h.DeviceIDs))
	}
	if err := d.Finish(); err != nil {
		return Hello{}, err
	}
	return h, nil
}

// PeekHelloVersion reads the version a HELLO payload of any protocol
// version starts with (its first two bytes in every version), so that a
// daemon can refuse a parent of another version by name.
func PeekHelloVersion(b []byte) (uint16, bool) {
	if len(b) < 2 {
		return 0, false
	}
	return uint16(b[0]) | uint16(b[1])<<8, true
}

// Bundle is the code a remote node runs: the parent loader's modules, by
// the names its loader knows them by. It is the body of a BUNDLE command.
type Bundle struct {
	Root    string   // the root module's name; "" iff Modules is empty
	Modules []Module // sorted by name, unique; source bytes ≤ MaxBundle in all
}

func (b *Bundle) encode(e *Encoder) {
	e.String(b.Root)
	e.U32(uint32(len(b.Modules)))
	for _, m := range b.Modules {
		e.String(m.Name)
		e.Blob(m.Source)
	}
}

func decodeBundle(d *Decoder) Bundle {
	var b Bundle
	b.Root = d.StringMax(MaxName)
	n := d.Count(MaxModules, minModuleSize)
	total := 0
	rootFound := false
	for i := 0; i < n && d.err == nil; i++ {
		m := Module{Name: decodeName(d, "module name")}
		if d.err == nil && i > 0 && m.Name <= b.Modules[i-1].Name {
			d.FailBounds("module %q after %q: names must be sorted and unique", m.Name, b.Modules[i-1].Name)
		}
		m.Source = d.Blob(MaxBundle - total)
		total += len(m.Source)
		rootFound = rootFound || m.Name == b.Root
		b.Modules = append(b.Modules, m)
	}
	if d.err == nil {
		if len(b.Modules) == 0 && b.Root != "" {
			d.FailBounds("root module %q in an empty bundle", b.Root)
		}
		if len(b.Modules) > 0 && !rootFound {
			d.FailBounds("root module %q is not in the bundle", b.Root)
		}
	}
	return b
}

// HelloReply is the daemon's answer to HELLO: the node is up (the READY),
// or the session is refused and the connection closes. A refusal's layout
// is the same in every protocol version, so a parent of another version
// can read why it was refused.
type HelloReply struct {
	Accepted    bool
	Session     uint64     // the HELLO's, echoed
	Worker      uint32     // the HELLO's, echoed
	Version     uint16     // accepted: the version spoken; refused: the highest the daemon speaks
	CommProfile string     // echoed
	Host        Host       // accepted only: the host the node runs on
	Err         *ErrorBody // required when refused, absent when accepted
}

// Encode writes the HELLO_REPLY payload. A refusal must carry Err.
func (r *HelloReply) Encode(e *Encoder) {
	e.Bool(r.Accepted)
	e.U64(r.Session)
	e.U32(r.Worker)
	e.U16(r.Version)
	e.String(r.CommProfile)
	if r.Accepted {
		r.Host.encode(e)
	}
	if !r.Accepted {
		body := r.Err
		if body == nil {
			body = &ErrorBody{}
		}
		body.encode(e)
	}
}

// DecodeHelloReply reads a HELLO_REPLY payload.
func DecodeHelloReply(b []byte) (HelloReply, error) {
	d := NewDecoder(b)
	r := HelloReply{Accepted: d.Bool(), Session: d.U64(), Worker: d.U32(), Version: d.U16()}
	if d.err == nil && r.Session == 0 {
		d.FailBounds("hello reply for session 0")
	}
	if d.err == nil && r.Version == 0 {
		d.FailBounds("hello reply protocol version 0")
	}
	r.CommProfile = decodeIdent(d, "comm profile")
	if r.Accepted {
		r.Host = decodeHost(d)
	} else {
		r.Err = decodeErrorBody(d)
	}
	if err := d.Finish(); err != nil {
		return HelloReply{}, err
	}
	return r, nil
}

func encodeInts(e *Encoder, v []int) {
	e.U32(uint32(len(v)))
	for _, x := range v {
		e.Int(x)
	}
}

func decodeInts(d *Decoder, maxCount, maxValue int, what string) []int {
	n := d.Count(maxCount, 8)
	if n == 0 {
		return nil
	}
	v := make([]int, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		x := d.U64()
		if d.err == nil && x > uint64(maxValue) {
			d.FailBounds("%s %d exceeds its bound %d", what, x, maxValue)
		}
		v = append(v, int(x))
	}
	return v
}
