package main

import (
	"strings"
	"testing"

	"simpler/wire"
)

// The memory flags of the real daemon reach its sessions. With
// --max-buffer-bytes 16 MiB, the loop REMOTE_MALLOC, EXPORT, IMPORT into
// the same session, REMOTE_FREE is refused once the session maps 16 MiB
// (it used to go on past 128 MiB); with --max-total-bytes below it, the
// daemon's bound refuses first. The session serves on after each.
func TestDaemonMemoryFlags(t *testing.T) {
	const mib = 1 << 20
	addr := startDaemonFlags(t, "--max-buffer-bytes", "16777216")
	c := dialDaemon(t, addr)
	var refused *wire.ErrorBody
	rounds := 0
	for ; rounds < 32 && refused == nil; rounds++ {
		refused = importRound(t, c, 4*mib)
	}
	if refused == nil || refused.Kind != "RuntimeError" || !strings.Contains(refused.Message, "beyond its bound of 16777216 (the daemon's --max-buffer-bytes)") {
		t.Fatalf("the loop: %+v after %d rounds", refused, rounds)
	}
	if rounds != 4 {
		t.Errorf("refused in round %d; the session maps 16 MiB after 3 rounds of 4 MiB, so the 4th's import is refused", rounds)
	}
	if r := ask(t, c, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 8}); r.Err != nil {
		t.Errorf("a small malloc after the refusal: %+v", r.Err)
	}
	c.conn.Close()

	addr = startDaemonFlags(t, "--max-buffer-bytes", "16777216", "--max-total-bytes", "12582912")
	c = dialDaemon(t, addr)
	if r := ask(t, c, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 8 * mib}); r.Err != nil {
		t.Fatal(r.Err)
	}
	r := ask(t, c, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 8 * mib})
	if r.Err == nil || !strings.Contains(r.Err.Message, "beyond their bound of 12582912 (the daemon's --max-total-bytes)") {
		t.Errorf("a malloc past the daemon's bound: %+v", r.Err)
	}
	if r := ask(t, c, &wire.Control{Cmd: wire.CmdMalloc, NBytes: 4 * mib}); r.Err != nil {
		t.Errorf("a malloc within both bounds: %+v", r.Err)
	}
}

// importRound runs one round of the loop and returns the refusal, if any.
func importRound(t *testing.T, c *daemonConn, size uint64) *wire.ErrorBody {
	t.Helper()
	r := ask(t, c, &wire.Control{Cmd: wire.CmdMalloc, NBytes: size})
	if r.Err != nil {
		return r.Err
	}
	owner := r.Buffer
	defer func() {
		if r := ask(t, c, &wire.Control{Cmd: wire.CmdFree, Buffer: owner}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}()
	r = ask(t, c, &wire.Control{Cmd: wire.CmdExport, Buffer: owner, NBytes: size, Access: wire.AccessRead})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return ask(t, c, &wire.Control{Cmd: wire.CmdImport, Token: r.Data, Access: wire.AccessRead}).Err
}

// ask sends a command and returns its reply, refused or not.
func ask(t *testing.T, c *daemonConn, m *wire.Control) wire.ControlReply {
	t.Helper()
	c.send(t, wire.TypeControl, m)
	_, p, err := wire.ReadFrame(c.conn, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := wire.DecodeControlReply(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// startDaemonFlags runs `simpler remote-l3-worker` with args until the
// test ends and returns its address.
func startDaemonFlags(t *testing.T, args ...string) string {
	t.Helper()
	_, addr, _ := startDaemonWith(t, args, nil)
	return addr
}
