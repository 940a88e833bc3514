package wire

// ChildSumSize is the length of a module's sum in a ChildBundle: sha256
// in lowercase hex.
const ChildSumSize = 64

// MaxChildBundle is the size of the largest valid ChildBundle: a root and
// MaxModules modules, every name MaxName bytes.
const MaxChildBundle = 4 + MaxName + 4 + MaxModules*(4+MaxName+4+ChildSumSize)

// ChildBundle tells a child process which code its parent runs: the
// parent loader's root, and the sha256 of every module the parent loaded,
// so that the child loads the same files from disk and refuses any that
// changed since. (A remote node gets the sources themselves instead, in
// BUNDLE.)
type ChildBundle struct {
	Root    string        // ≤ MaxName
	Modules []ChildModule // sorted by name, unique; ≤ MaxModules
}

// ChildModule is one module of a ChildBundle: its name as the parent's
// loader knows it, and the sha256 of its source in lowercase hex, or ""
// for a module the parent could not read (the child cannot either).
type ChildModule struct {
	Name string // ≤ MaxName
	Sum  string // "" or ChildSumSize hex digits
}

// Encode writes the bundle.
func (b *ChildBundle) Encode(e *Encoder) {
	e.String(b.Root)
	e.U32(uint32(len(b.Modules)))
	for _, m := range b.Modules {
		e.String(m.Name)
		e.String(m.Sum)
	}
}

// DecodeChildBundle reads a bundle. Names must ascend strictly, as the
// parent sorts them: a repeated name would silently replace the first
// one's sum, and an unsorted pair would not re-encode to the same bytes.
func DecodeChildBundle(b []byte) (ChildBundle, error) {
	d := NewDecoder(b)
	cb := ChildBundle{Root: d.StringMax(MaxName)}
	n := d.Count(MaxModules, 8) // a name and a sum, each at least a length
	if n > 0 {
		cb.Modules = make([]ChildModule, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		m := ChildModule{Name: d.StringMax(MaxName), Sum: decodeSum(d)}
		if d.err == nil && i > 0 && m.Name <= cb.Modules[i-1].Name {
			d.FailBounds("module %q after %q: names must ascend", m.Name, cb.Modules[i-1].Name)
		}
		cb.Modules = append(cb.Modules, m)
	}
	if err := d.Finish(); err != nil {
		return ChildBundle{}, err
	}
	return cb, nil
}

// decodeSum reads a module's sum: empty, or ChildSumSize lowercase hex
// digits.
func decodeSum(d *Decoder) string {
	s := d.StringMax(ChildSumSize)
	if d.err != nil || s == "" {
		return s
	}
	if len(s) != ChildSumSize {
		d.FailBounds("module sum %q: want %d hex digits", s, ChildSumSize)
		return ""
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			d.FailBounds("module sum %q: want lowercase hex digits", s)
			return ""
		}
	}
	return s
}
