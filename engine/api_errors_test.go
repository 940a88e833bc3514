package engine

import (
	"strconv"
	"strings"
	"testing"

	"simpler/hal/dtype"
)

// wantKindText requires err to be of kind k with a message containing text.
func wantKindText(t *testing.T, what string, err error, k Kind, text string) {
	t.Helper()
	if err == nil || KindOf(err) != k || !strings.Contains(err.Error(), text) {
		t.Errorf("%s: got %v, want a %s containing %q", what, err, k, text)
	}
}

// A chip index out of range is an IndexError, as upstream's list index
// is, for the Worker's direct memory calls and the orchestrator's.
func TestChipIndexOutOfRangeIsIndexError(t *testing.T) {
	w := newWorker(t, Config{})
	_, err := w.Devices().Malloc(2, 16)
	wantKindText(t, "malloc on chip 2", err, IndexError, "malloc: worker_id 2 out of range (this worker has chips 0..1)")
	wantKindText(t, "free on chip -1", w.Devices().Free(-1, 0x1000), IndexError, "free: worker_id -1 out of range")
	wantKindText(t, "copy_to on chip 5", w.Devices().CopyTo(5, 0x1000, make([]byte, 4)), IndexError, "copy_to: worker_id 5 out of range")
	wantKindText(t, "copy_from on chip 5", w.Devices().CopyFrom(5, make([]byte, 4), 0x1000), IndexError, "copy_from: worker_id 5 out of range")
	err = submitRun(t, w, func(o *Orchestrator) error {
		_, err := o.Malloc(3, 16)
		return err
	})
	wantKindText(t, "orch.malloc on chip 3", err, IndexError, "orch.malloc: worker_id 3 out of range")
}

// malloc's size is checked at the API, before it is converted for a
// child process, with the same text in both modes (engine/proc's test
// checks process mode's).
func TestMallocSizeIsCheckedBeforeAnyConversion(t *testing.T) {
	for _, w := range []*Worker{newWorker(t, Config{})} {
		mode := w.Config().Mode
		for _, size := range []int{-1, 0} {
			_, err := w.Devices().Malloc(0, size)
			wantKindText(t, mode+" malloc", err, ValueError, "malloc: size must be > 0, got "+strconv.Itoa(size))
		}
		_, err := w.Devices().Malloc(0, 1<<40)
		wantKindText(t, mode+" malloc of 1 TiB", err, ValueError, "malloc: size 1099511627776 exceeds the device memory of one a2a3sim chip (68719476736 bytes)")
		p, err := w.Devices().Malloc(0, 64)
		if err != nil {
			t.Fatalf("%s malloc of 64 bytes: %v", mode, err)
		}
		if err := w.Devices().Free(0, p); err != nil {
			t.Errorf("%s free: %v", mode, err)
		}
	}
}

// register(fn, workers=[]) is refused: such a handle could run nowhere.
func TestRegisterRefusesAnEmptyWorkerList(t *testing.T) {
	w := newWorker(t, Config{})
	k := chipK("k", func(c *ChipCtx, a *TaskArgs) error { return nil })
	_, err := w.Registry().Register(k, []int{})
	wantKindText(t, "workers=[]", err, ValueError, "register: workers must be an explicit non-empty list, or None")
	if _, ok := w.Registry().Lookup(k.Digest()); ok {
		t.Error("a refused registration left the function registered")
	}
	if h := register(t, w, k, 1); len(h.Workers) != 1 || h.Workers[0] != 1 {
		t.Errorf("workers=[1]: %v", h.Workers)
	}
}

// Unregistering a handle of another worker is refused and leaves this
// worker's registration of the same function alone.
func TestUnregisterRefusesAnotherWorkersHandle(t *testing.T) {
	a := newWorker(t, Config{})
	b := newWorker(t, Config{})
	k := chipK("k", func(c *ChipCtx, a *TaskArgs) error { return nil })
	ha := register(t, a, k)
	hb := register(t, b, k)
	wantKindText(t, "b's handle on a", a.Registry().Unregister(hb), ValueError, `unregister: the handle of "k" belongs to another worker`)
	if h, ok := a.Registry().Lookup(k.Digest()); !ok || h != ha {
		t.Fatal("refusing another worker's handle unregistered this worker's")
	}
	if err := a.Registry().Unregister(ha); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Registry().Lookup(k.Digest()); ok {
		t.Error("a's own handle was not unregistered")
	}
	if _, ok := b.Registry().Lookup(k.Digest()); !ok {
		t.Error("unregistering on a dropped b's registration")
	}
}

// Every argument of add_remote_worker is checked where it is given, with
// a ValueError naming it, before any node is dialled.
func TestAddRemoteWorkerChecksEveryArgument(t *testing.T) {
	good := RemoteSpec{Endpoint: "127.0.0.1:7700", Platform: "a2a3sim", DeviceIDs: []int{0, 1}}
	cases := []struct {
		edit func(s *RemoteSpec)
		want string
	}{
		{func(s *RemoteSpec) { s.Endpoint = "nowhere" }, `endpoint "nowhere" is not host:port`},
		{func(s *RemoteSpec) { s.Platform = "" }, "add_remote_worker: platform is required"},
		{func(s *RemoteSpec) { s.Platform = "tpu" }, `add_remote_worker: platform: unknown platform "tpu"`},
		{func(s *RemoteSpec) { s.CommProfile = "a3-fabric-v1" }, `add_remote_worker: comm_profile "a3-fabric-v1" is not supported on a2a3sim`},
		{func(s *RemoteSpec) { s.DeviceIDs = nil }, "add_remote_worker: device_ids must not be empty"},
		{func(s *RemoteSpec) { s.DeviceIDs = []int{0, -1} }, "add_remote_worker: device_ids[1] = -1 is out of range for a2a3sim (0..15)"},
		{func(s *RemoteSpec) { s.DeviceIDs = []int{1 << 20} }, "add_remote_worker: device_ids[0] = 1048576 is out of range for a2a3sim (0..15)"},
		{func(s *RemoteSpec) { s.DeviceIDs = []int{3, 3} }, "add_remote_worker: device_ids[1] = 3 is listed twice"},
		{func(s *RemoteSpec) { s.DeviceIDs = make([]int, 4097) }, "add_remote_worker: 4097 device_ids, more than 4096"},
		{func(s *RemoteSpec) { s.NumSubWorkers = -1 }, "add_remote_worker: num_sub_workers must be in 0..65536, got -1"},
		{func(s *RemoteSpec) { s.NumSubWorkers = 65537 }, "add_remote_worker: num_sub_workers must be in 0..65536, got 65537"},
		{func(s *RemoteSpec) { s.GlobalDeviceRanks = []int{0} }, "add_remote_worker: 1 global_device_ranks for 2 device_ids"},
		{func(s *RemoteSpec) { s.GlobalDeviceRanks = []int{0, 1<<20 + 1} }, "add_remote_worker: global_device_ranks[1] = 1048577 is out of range (0..1048576)"},
		{func(s *RemoteSpec) { s.GlobalDeviceRanks = []int{4, 4} }, "add_remote_worker: global_device_ranks[1] = 4 is listed twice"},
	}
	for _, c := range cases {
		w, err := NewWorker(Config{Level: 4, Platform: sim(t)})
		if err != nil {
			t.Fatal(err)
		}
		spec := good
		c.edit(&spec)
		_, err = w.AddRemoteWorker(spec)
		wantKindText(t, c.want, err, ValueError, c.want)
		w.Close()
	}
	w, err := NewWorker(Config{Level: 4, Platform: sim(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	spec := good
	spec.NumSubWorkers, spec.GlobalDeviceRanks = 65536, []int{16, 17}
	if id, err := w.AddRemoteWorker(spec); err != nil || id != 0 {
		t.Fatalf("a good spec at the bounds: id %d, %v", id, err)
	}
}

// A buffer's nbytes may pad past its count elements, not fall short.
func TestBufferCountMustFitItsBytes(t *testing.T) {
	pad := []BufferSpec{{Name: "a", DType: dtype.Float32, Count: 4, NBytes: 64}, {Name: "b", DType: dtype.Float32, Count: 2, NBytes: 8}}
	offsets, err := BufferOffsets("allocate_domain", pad, 128)
	if err != nil || len(offsets) != 2 || offsets[1] != 64 {
		t.Fatalf("a padded buffer: offsets %v, %v", offsets, err)
	}
	short := []BufferSpec{{Name: "a", DType: dtype.Float32, Count: 5, NBytes: 16}}
	_, err = BufferOffsets("allocate_domain", short, 128)
	wantKindText(t, "count past nbytes", err, ValueError, `allocate_domain: buffer "a" has count=5 of float32, more than its nbytes=16 hold`)
}
