package token

import (
	"bytes"
	"testing"
)

// A token file's bytes are read from a file someone else may have
// written; parse, which takes the token from them, never panics, and
// what it accepts is the first line's trimmed text, at least MinLen
// bytes.
func FuzzParse(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123\n"))
	f.Add([]byte("  short \nsecond line that is long enough\n"))
	f.Add([]byte(""))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := parse("f", data)
		if err != nil {
			return
		}
		first, _, _ := bytes.Cut(data, []byte("\n"))
		if len(tok) < MinLen || !bytes.Equal(tok, bytes.TrimSpace(first)) {
			t.Fatalf("parse(%q) = %q, want the first line trimmed, at least %d bytes", data, tok, MinLen)
		}
	})
}
