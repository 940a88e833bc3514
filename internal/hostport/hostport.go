// Package hostport splits "host:port" strings the way package net's
// SplitHostPort does, without importing net: the engine checks the form
// of a remote node's endpoint, and internal/token finds a local daemon's
// token, without linking the network stack into packages that never
// open a socket.
//
// Contract: Split accepts exactly what net.SplitHostPort accepts and
// returns the same host and port (a differential fuzz test holds it to
// that); the host may be bracketed ("[::1]:80" has host "::1"), and the
// port is not checked beyond being what follows the last colon.
package hostport

import "strings"

// Split splits s into its host and port, or reports why it cannot.
func Split(s string) (host, port string, err error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", "", addrError(s, "missing port in address")
	}
	j, k := 0, 0 // no '[' may appear from j on, no ']' from k on
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		switch {
		case end < 0:
			return "", "", addrError(s, "missing ']' in address")
		case end+1 == len(s):
			return "", "", addrError(s, "missing port in address")
		case end+1 != i && s[end+1] == ':': // a colon after the ']' that is not the last one
			return "", "", addrError(s, "too many colons in address")
		case end+1 != i:
			return "", "", addrError(s, "missing port in address")
		}
		host, j, k = s[1:end], 1, end+1
	} else {
		host = s[:i]
		if strings.IndexByte(host, ':') >= 0 {
			return "", "", addrError(s, "too many colons in address")
		}
	}
	if strings.IndexByte(s[j:], '[') >= 0 {
		return "", "", addrError(s, "unexpected '[' in address")
	}
	if strings.IndexByte(s[k:], ']') >= 0 {
		return "", "", addrError(s, "unexpected ']' in address")
	}
	return host, s[i+1:], nil
}

// Error is why an address does not split, worded as package net words it.
type Error struct {
	Addr, Why string
}

func (e *Error) Error() string {
	if e.Addr == "" {
		return e.Why
	}
	return "address " + e.Addr + ": " + e.Why
}

func addrError(addr, why string) error { return &Error{Addr: addr, Why: why} }
