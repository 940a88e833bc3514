package wire

import "testing"

// Fuzz targets of the mailbox messages, the global-domain tables and the
// child's module bundle, seeded from mailboxSamples: decoding never
// panics, and whatever decodes re-encodes to the same bytes.

func fuzzMailbox(f *testing.F, decode func([]byte) (Message, error)) {
	seedFrom(f, decode)
	f.Fuzz(func(t *testing.T, b []byte) { canonical(t, b, decode) })
}

func FuzzDecodeMailboxInit(f *testing.F)        { fuzzMailbox(f, decMailboxInit) }
func FuzzDecodeMailboxControl(f *testing.F)     { fuzzMailbox(f, decMailboxControl) }
func FuzzDecodeMailboxTask(f *testing.F)        { fuzzMailbox(f, decMailboxTask) }
func FuzzDecodeAddrReply(f *testing.F)          { fuzzMailbox(f, decAddrReply) }
func FuzzDecodeCommAllocReply(f *testing.F)     { fuzzMailbox(f, decCommAllocReply) }
func FuzzDecodeGlobalPrepareReply(f *testing.F) { fuzzMailbox(f, decGlobalPrepareReply) }
func FuzzDecodeHostRef(f *testing.F)            { fuzzMailbox(f, decHostRef) }
func FuzzDecodeNodeConfig(f *testing.F)         { fuzzMailbox(f, decNodeConfig) }
func FuzzDecodeCallConfig(f *testing.F)         { fuzzMailbox(f, decCallConfig) }
func FuzzDecodePrepareExtra(f *testing.F)       { fuzzMailbox(f, decPrepareExtra) }
func FuzzDecodeDescriptorTable(f *testing.F)    { fuzzMailbox(f, decDescriptorTable) }
func FuzzDecodeTopology(f *testing.F)           { fuzzMailbox(f, decTopology) }
func FuzzDecodeReattach(f *testing.F)           { fuzzMailbox(f, decReattach) }
func FuzzDecodeChildBundle(f *testing.F)        { fuzzMailbox(f, decChildBundle) }
