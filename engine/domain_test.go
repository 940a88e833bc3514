package engine

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"simpler/hal"
	"simpler/hal/comm"
	"simpler/internal/fault"
)

func domainSpec(name string, workers ...int) DomainSpec {
	return DomainSpec{Name: name, Workers: workers, WindowSize: 4096,
		Buffers: []BufferSpec{{Name: "a", NBytes: 1024}, {Name: "b", NBytes: 2048}}}
}

// events records the domain events of w in order.
func domainEvents(w *Worker) *recorder {
	r := &recorder{}
	w.Events().Observe(func(e Event) {
		switch e.Kind {
		case DomainAllocated:
			r.add("alloc %s", e.Domain)
		case DomainReleased:
			r.add("release %s", e.Domain)
		case DomainFreed:
			r.add("free %s", e.Domain)
		}
	})
	return r
}

func TestDomainLifetime(t *testing.T) {
	w := newWorker(t, Config{})
	ev := domainEvents(w)
	if int(w.domains.commInits.Load()) != 0 {
		t.Fatal("init() did comm work")
	}
	var d1, d2, d3 *Domain
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		d1 = must(o.AllocateDomain(domainSpec("one", 0, 1)))
		d2 = must(o.AllocateDomain(domainSpec("two", 1)))
		d3 = must(o.AllocateDomain(domainSpec("three", 0)))
		v := must(d1.Rank(1))
		if v.Rank != 1 || v.Size != 2 || v.BufferPtrs["b"] != v.WindowBase+1024 || v.WindowSize != 4096 {
			t.Errorf("rank view %+v", v)
		}
		if _, err := d1.Rank(5); KindOf(err) != KeyError {
			t.Errorf("non-member: %v", err)
		}
		if d2.AllocationID() <= d1.AllocationID() || d3.AllocationID() <= d2.AllocationID() {
			t.Errorf("allocation ids not fresh: %d %d %d", d1.AllocationID(), d2.AllocationID(), d3.AllocationID())
		}
		if err := d2.Release(); err != nil {
			t.Error(err)
		}
		if !d2.Released() || d2.Freed() {
			t.Error("release must flip released at once and defer the free")
		}
		if _, err := d2.Rank(1); KindOf(err) != RuntimeError {
			t.Errorf("indexing a released domain: %v", err)
		}
		if live := w.LocalDomains().Live(); len(live) != 2 || live["two"] != nil {
			t.Errorf("live domains %v", live)
		}
	}))
	for _, d := range []*Domain{d1, d2, d3} {
		if !d.Freed() || !d.Released() {
			t.Errorf("%s not freed at the fence", d.Name())
		}
	}
	// Released ones first, then the rest swept last-allocated first.
	want := []string{"alloc one", "alloc two", "alloc three", "release two", "free two", "release three", "free three", "release one", "free one"}
	if got := ev.get(); !slices.Equal(got, want) {
		t.Errorf("events\n got %v\nwant %v", got, want)
	}
	mustRun(t, w, func(o *Orchestrator) error {
		_, err := o.AllocateDomain(domainSpec("one", 0, 1))
		return err
	})
	if int(w.domains.commInits.Load()) != 1 {
		t.Errorf("base communicator initialised %d times, want once", int(w.domains.commInits.Load()))
	}
}

func TestDomainReleaseAfterTheFenceIsANoOp(t *testing.T) {
	w := newWorker(t, Config{})
	var d *Domain
	r, err := w.Submit(asBuild(buildErr(func(o *Orchestrator) {
		d = must(o.AllocateDomain(domainSpec("kept", 0, 1)))
	})))
	if err != nil {
		t.Fatal(err)
	}
	// The sweep at the fence frees it; a release afterwards is a no-op
	// that reports the same (nil) result.
	if err := r.Wait(deadline); err != nil {
		t.Fatal(err)
	}
	if !d.Freed() {
		t.Fatal("not swept")
	}
	if err := d.Release(); err != nil {
		t.Fatal(err)
	}
}

func TestDomainSweptWhenTheRunFails(t *testing.T) {
	w := newWorker(t, Config{})
	bad := register(t, w, chipK("bad", func(c *ChipCtx, a *TaskArgs) error { return Errorf(ValueError, "boom") }))
	var d *Domain
	err := submitRun(t, w, buildErr(func(o *Orchestrator) {
		d = must(o.AllocateDomain(domainSpec("x", 0, 1)))
		must(o.SubmitNext(bad, nil, nil, 0))
	}))
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("run error %v", err)
	}
	if !d.Freed() {
		t.Fatal("a failed run must still sweep its domains")
	}
	// The orchestration function itself failing sweeps too.
	_, err = w.Submit(asBuild(buildErr(func(o *Orchestrator) {
		d = must(o.AllocateDomain(domainSpec("y", 0, 1)))
		panic(Errorf(RuntimeError, "orchestration failed"))
	})))
	if err == nil || !d.Freed() {
		t.Fatalf("err %v freed %v", err, d.Freed())
	}
}

// Many releasers racing the fence: exactly one backend free, and every
// caller sees its result.
func TestDomainReleaseRacesTheFence(t *testing.T) {
	w := newWorker(t, Config{})
	ev := domainEvents(w)
	for round := 0; round < 20; round++ {
		var d *Domain
		r, err := w.Submit(asBuild(buildErr(func(o *Orchestrator) {
			d = must(o.AllocateDomain(domainSpec("race", 0, 1)))
		})))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := d.Release(); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if err := r.Wait(deadline); err != nil {
			t.Fatal(err)
		}
		if !d.Freed() {
			t.Fatal("not freed")
		}
	}
	frees := 0
	for _, e := range ev.get() {
		if e == "free race" {
			frees++
		}
	}
	if frees != 20 {
		t.Errorf("%d backend frees for 20 allocations", frees)
	}
}

// A local free cannot be run again (each rank's release ran all of its
// teardown), so a failed one ends the domain failed — released, never
// freed — and poisons the worker (the rule: lifetime).
func TestDomainFailedFreePoisonsTheWorker(t *testing.T) {
	w := newWorker(t, Config{})
	ev := domainEvents(w)
	if err := fault.Load("domain.release"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fault.Load("") })
	var d *Domain
	err := submitRun(t, w, buildErr(func(o *Orchestrator) {
		d = must(o.AllocateDomain(domainSpec("doomed", 0, 1)))
	}))
	if err == nil || !strings.Contains(err.Error(), "injected fault at domain.release") {
		t.Fatalf("run error %v", err)
	}
	if !d.Released() || d.Freed() {
		t.Errorf("after a failed free: released %v freed %v", d.Released(), d.Freed())
	}
	// The failure is replayed to a later releaser without a second backend
	// free, and the worker refuses work with the cause attached.
	if err2 := d.Release(); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("replayed error %v, want %v", err2, err)
	}
	if got, want := ev.get(), []string{"alloc doomed", "release doomed", "free doomed"}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	_, err = w.Submit(asBuild(func(o *Orchestrator) error { return nil }))
	if err == nil || !strings.Contains(err.Error(), "unusable after a failed cleanup") || !strings.Contains(err.Error(), "domain.release") {
		t.Errorf("poisoned worker accepted work: %v", err)
	}
}

func TestDomainAllocationFaultLeavesNothing(t *testing.T) {
	w := newWorker(t, Config{})
	if err := fault.Load("domain.alloc"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fault.Load("") })
	err := submitRun(t, w, func(o *Orchestrator) error {
		_, err := o.AllocateDomain(domainSpec("a", 0, 1))
		return err
	})
	if err == nil || len(w.LocalDomains().Live()) != 0 {
		t.Fatalf("err %v live %v", err, w.LocalDomains().Live())
	}
	mustRun(t, w, func(o *Orchestrator) error { // the name is free again
		_, err := o.AllocateDomain(domainSpec("a", 0, 1))
		return err
	})
}

func TestDomainValidation(t *testing.T) {
	w := newWorker(t, Config{})
	noop := register(t, w, chipK("noop", func(c *ChipCtx, a *TaskArgs) error { return nil }))
	cases := []struct {
		spec DomainSpec
		want string
	}{
		{DomainSpec{Name: "x", WindowSize: 64}, "workers must not be empty"},
		{DomainSpec{Name: "x", Workers: []int{0, 0}, WindowSize: 64}, "worker 0 listed twice"},
		{DomainSpec{Name: "x", Workers: []int{2}, WindowSize: 64}, "worker 2 is not one of this worker's chips"},
		{DomainSpec{Name: "x", Workers: []int{0}, WindowSize: 0}, "window_size must be > 0"},
		{DomainSpec{Name: "x", Workers: []int{0}, WindowSize: 1 << 50}, "window_size=1125899906842624 exceeds the 68719476736 bytes of device memory of a a2a3sim chip"},
		{DomainSpec{Name: "x", Workers: []int{0}, WindowSize: 64, Buffers: []BufferSpec{{Name: "a", NBytes: 8}, {Name: "a", NBytes: 8}}}, `buffer name "a" used twice`},
		{DomainSpec{Name: "x", Workers: []int{0}, WindowSize: 64, Buffers: []BufferSpec{{Name: "a", NBytes: 48}, {Name: "b", NBytes: 32}}}, "buffers sum to 80 bytes, exceeds window_size=64"},
	}
	mustRun(t, w, func(o *Orchestrator) error {
		for _, c := range cases {
			_, err := o.AllocateDomain(c.spec)
			if err == nil || KindOf(err) != ValueError || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%+v: got %v, want %q", c.spec, err, c.want)
			}
		}
		if _, err := o.AllocateDomain(domainSpec("dup", 0)); err != nil {
			return err
		}
		if _, err := o.AllocateDomain(domainSpec("dup", 1)); err == nil || !strings.Contains(err.Error(), "already live") {
			t.Errorf("duplicate live name: %v", err)
		}
		if _, err := o.SubmitNext(noop, nil, nil, 0); err != nil {
			return err
		}
		if _, err := o.AllocateDomain(domainSpec("late", 0)); KindOf(err) != RuntimeError || !strings.Contains(err.Error(), "stage every rank") {
			t.Errorf("allocate after submit: %v", err)
		}
		spec := domainSpec("late", 0)
		spec.TaskOnly = true
		_, err := o.AllocateDomain(spec)
		return err
	})
	if len(w.LocalDomains().Live()) != 0 {
		t.Errorf("live after the run: %v", w.LocalDomains().Live())
	}
}

// Kernels of a domain's members see each other's windows.
func TestDomainWindowsAreShared(t *testing.T) {
	w := newWorker(t, Config{})
	k := register(t, w, chipK("exchange", func(c *ChipCtx, a *TaskArgs) error {
		v, err := comm.Open(c.Chip, a.Scalars[0])
		if err != nil {
			return err
		}
		peer := 1 - v.Rank()
		base, _ := v.Base(peer)
		if err := v.Notify(peer, base, 8, int64(100+v.Rank()), "set"); err != nil {
			return err
		}
		own, _ := v.Base(v.Rank())
		got, err := v.Wait(own, 8, 100, ">=", deadline)
		if err != nil {
			return err
		}
		if got != int64(100+peer) {
			return Errorf(ValueError, "rank %d saw %d", v.Rank(), got)
		}
		return v.Barrier(deadline)
	}))
	mustRun(t, w, buildErr(func(o *Orchestrator) {
		d := must(o.AllocateDomain(domainSpec("x", 0, 1)))
		var args []*TaskArgs
		for id := 0; id < 2; id++ {
			args = append(args, &TaskArgs{Scalars: []uint64{must(d.Rank(id)).DeviceCtx}})
		}
		must(o.SubmitNextGroup(k, args, nil, []int{0, 1}))
		must(0, d.Release())
	}))
}

// Every place a comm profile is given asks the platform (Serves) and adds
// its own context: a Worker's config, add_remote_worker and the base
// communicator. (The broker and COMM_INIT: gdomain_test.go; a session's
// HELLO: engine/remote's TestHelloCommProfileAsksServes.)
func TestCommProfileChecksAskServes(t *testing.T) {
	onboard, err := hal.Lookup("a2a3")
	if err != nil {
		t.Fatal(err)
	}
	want := func(what string, err error, msg string) {
		t.Helper()
		if msg == "" && err != nil || msg != "" && (KindOf(err) != ValueError || err.Error() != msg) {
			t.Errorf("%s: %v\nwant %s", what, err, msg)
		}
	}
	_, err = NewWorker(Config{Level: 3, Platform: sim(t), DeviceIDs: []int{0}, CommProfile: "a3-fabric-v1"})
	want("Worker", err, `ValueError: Worker: comm_profile "a3-fabric-v1" is not supported on a2a3sim (supported: ["sim"])`)
	// A Worker on a platform this host cannot run is made, and init says
	// why it cannot run (API.md section 7), before anything about its
	// profile.
	ow, err := NewWorker(Config{Level: 2, Platform: onboard, DeviceIDs: []int{0}})
	if err != nil {
		t.Fatalf("Worker on a2a3: %v", err)
	}
	if cause, err := onboard.Check(), ow.Init(); cause == nil || err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(cause.Error(), "RuntimeError: ")) {
		t.Errorf("init on a2a3: %v, want %v", err, cause)
	}
	ow.Close()

	spec := RemoteSpec{Endpoint: "127.0.0.1:7700", Platform: "a2a3sim", DeviceIDs: []int{0}}
	want("add_remote_worker default", checkRemoteSpec(&spec), "")
	if spec.CommProfile != "sim" {
		t.Errorf("add_remote_worker defaults comm_profile to %q", spec.CommProfile)
	}
	spec.Platform, spec.CommProfile = "a2a3", "a3-fabric-v1"
	want("add_remote_worker on a2a3", checkRemoteSpec(&spec),
		`ValueError: add_remote_worker: comm_profile "a3-fabric-v1" on a2a3 needs the fabric backend, which this build does not have (it serves "sim" on the simulated platforms)`)

	c, err := sim(t).OpenChip(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want("base communicator", initBaseComm(c.Platform(), ""), "")
	want("base communicator", initBaseComm(c.Platform(), "a5-fabric-v1"), `ValueError: comm_profile "a5-fabric-v1" is not supported on a2a3sim (supported: ["sim"])`)
}
