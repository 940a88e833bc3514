package wire

// Output is one whole line a remote node's code printed, sent by its
// session to the parent (an OUTPUT frame, seq 0, at any time after the
// READY) so that the parent shows it, tagged with the node. A line is
// never split across frames: the parent writes each one whole. The line
// has no newline; its control characters are already escaped by the
// session, and the parent escapes again what a hostile session sends.
type Output struct {
	Stream Stream
	Line   []byte // ≤ MaxOutputLine bytes
}

// Stream says where a line was printed.
type Stream uint8

// The streams; any other value is refused.
const (
	StreamStdout Stream = 1
	StreamStderr Stream = 2
)

// MaxOutputLine bounds one OUTPUT line: a printed line of up to 2 KiB
// with every byte escaped (four bytes each) and the note of what was cut.
const MaxOutputLine = 9 << 10

// Encode writes the OUTPUT payload.
func (o *Output) Encode(e *Encoder) {
	e.U8(uint8(o.Stream))
	e.Blob(o.Line)
}

// DecodeOutput reads an OUTPUT payload.
func DecodeOutput(b []byte) (Output, error) {
	d := NewDecoder(b)
	o := Output{Stream: Stream(d.U8()), Line: d.Blob(MaxOutputLine)}
	if err := d.Finish(); err != nil {
		return Output{}, err
	}
	if o.Stream != StreamStdout && o.Stream != StreamStderr {
		return Output{}, errorf(ErrBounds, "OUTPUT stream %d is neither stdout (1) nor stderr (2)", o.Stream)
	}
	return o, nil
}
