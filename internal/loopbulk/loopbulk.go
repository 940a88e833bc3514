// Package loopbulk is the raw limit a bulk remote copy is compared with:
// a loopback TCP connection whose reader, a goroutine of this process,
// reads into one 1 MiB buffer (always in cache: no copy into memory is
// cheaper) and acknowledges each message of the conn's size with one byte,
// with plain Go sockets and the kernel's own buffer sizing. Both the bench
// (simpler bench remote) and engine/remote's Go benchmarks measure it.
package loopbulk

import (
	"io"
	"net"
)

// Conn sends messages of one size over loopback TCP to its own reader.
type Conn struct {
	ln   net.Listener
	c    net.Conn
	data []byte
	done chan error
}

// Dial makes a connection for messages of size bytes, its reader started.
func Dial(size int) (*Conn, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Conn{ln: ln, data: make([]byte, size), done: make(chan error, 1)}
	for i := range r.data {
		r.data[i] = byte(i)
	}
	go r.serve()
	if r.c, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		ln.Close()
		<-r.done
		return nil, err
	}
	return r, nil
}

// serve reads and acknowledges until the connection ends.
func (r *Conn) serve() {
	c, err := r.ln.Accept()
	if err != nil {
		r.done <- err
		return
	}
	defer c.Close()
	buf := make([]byte, 1<<20)
	for {
		for got := 0; got < len(r.data); {
			n, err := c.Read(buf)
			if err != nil {
				r.done <- nil
				return
			}
			got += n
		}
		if _, err := c.Write([]byte{1}); err != nil {
			r.done <- err
			return
		}
	}
}

// Send writes one message and waits for the reader's acknowledgement.
func (r *Conn) Send() error {
	if _, err := r.c.Write(r.data); err != nil {
		return err
	}
	_, err := io.ReadFull(r.c, make([]byte, 1))
	return err
}

// Close ends the connection and waits for its reader.
func (r *Conn) Close() error {
	r.c.Close()
	r.ln.Close()
	return <-r.done
}
