package remote

import (
	"testing"

	"simpler/engine"
	"simpler/wire"
)

// A session's HELLO asks the platform about its comm profile (Serves)
// and adds its own context, and is refused before the session brings
// anything up. (The other places a profile is given: engine's
// TestCommProfileChecksAskServes.)
func TestHelloCommProfileAsksServes(t *testing.T) {
	err := (&session{}).accept(wire.Hello{Platform: "a5sim", DeviceIDs: []int{0}, CommProfile: "infiniband"})
	const msg = `ValueError: HELLO: comm_profile "infiniband" is not supported on a5sim (supported: ["sim"])`
	if engine.KindOf(err) != engine.ValueError || err.Error() != msg {
		t.Errorf("HELLO: %v\nwant %s", err, msg)
	}
}
