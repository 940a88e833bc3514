// Package hostid names the host a process runs on for the one question
// the sim comm profile asks of it: do two processes share this host's
// shared memory? A sim global domain keeps its windows in /dev/shm, so
// its members must; a node on another machine, or in a container with a
// /dev/shm of its own, cannot map them.
//
// Contract: Local returns the same ID for every process of one kernel
// boot that sees the same /dev/shm mount, and (with overwhelming
// likelihood) a different Key for any other. Name is the host name, for
// messages only; two hosts may share it. An ID crosses hosts in the
// remote protocol's JOIN and HELLO_REPLY (wire.Host).
package hostid

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ID is a host as the sim profile tells hosts apart.
type ID struct {
	Name string   // the host name (printable, no spaces); "unknown" if it has none
	Key  [32]byte // equal exactly when /dev/shm is shared
}

// String is the name.
func (id ID) String() string { return id.Name }

// Long is the name and a short form of the key, which tells two hosts of
// one name apart.
func (id ID) Long() string { return fmt.Sprintf("%s (host key %x)", id.Name, id.Key[:4]) }

var (
	once  sync.Once
	local ID
)

// Local is this process's host.
func Local() ID {
	once.Do(func() { local = compute() })
	return local
}

func compute() ID {
	name, err := os.Hostname()
	name = clean(name)
	if err != nil || name == "" {
		name = "unknown"
	}
	h := sha256.New()
	h.Write([]byte("simpler-host-v1\x00"))
	// The boot: a reboot, or another machine, gives another.
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		h.Write(b)
	} else {
		h.Write([]byte(name)) // no boot id: the name is all there is
	}
	// The /dev/shm mount: containers on one kernel may each have their own.
	var st unix.Stat_t
	if unix.Stat("/dev/shm", &st) == nil {
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:8], st.Dev)
		binary.LittleEndian.PutUint64(b[8:], st.Ino)
		h.Write(b[:])
	}
	id := ID{Name: name}
	h.Sum(id.Key[:0])
	return id
}

// clean keeps a host name to what wire.Host carries: printable ASCII
// without spaces, at most 255 bytes.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r <= ' ' || r > '~' {
			return '_'
		}
		return r
	}, s)
	if len(s) > 255 {
		s = s[:255]
	}
	return s
}

// Names describes a set of hosts for a message: each by its name, or by
// its name and key where two of them share a name.
func Names(ids []ID) []string {
	count := map[string]int{}
	seen := map[[32]byte]bool{}
	var uniq []ID
	for _, id := range ids {
		if !seen[id.Key] {
			seen[id.Key] = true
			uniq = append(uniq, id)
			count[id.Name]++
		}
	}
	out := make([]string, len(uniq))
	for i, id := range uniq {
		out[i] = id.Name
		if count[id.Name] > 1 {
			out[i] = id.Long()
		}
	}
	return out
}
