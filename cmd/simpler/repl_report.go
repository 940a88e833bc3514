package main

import (
	"fmt"
	"simpler/engine"
	"simpler/starlib"
	"sort"
	"strings"

	"go.starlark.net/starlark"
)

// What the REPL reports about the live tree: :domains and :workers.

// observe is the session's OnWorker hook: it tracks every engine Worker,
// the domain events it reports, and its runs in progress (for Ctrl-C).
func (r *repl) observe(w *engine.Worker) {
	r.mu.Lock()
	rw := &replWorker{index: len(r.workers) + 1, w: w}
	r.workers = append(r.workers, rw)
	r.mu.Unlock()
	w.Events().Observe(func(e engine.Event) {
		switch e.Kind {
		case engine.TaskSubmitted, engine.TaskStarted, engine.TaskFinished, engine.RunFenced:
			r.mu.Lock()
			r.trackRun(rw, e)
			r.mu.Unlock()
			return
		case engine.DomainAllocated, engine.DomainReleased, engine.DomainFreed:
		default:
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		key := domainKey{rw.index, e.AllocID}
		d := r.domains[key]
		if d == nil {
			d = &domainRec{worker: rw, name: e.Domain, allocID: e.AllocID, run: e.Run}
			r.domains[key] = d
		}
		switch e.Kind {
		case engine.DomainAllocated:
			d.state = "live"
		case engine.DomainReleased:
			d.state = "released"
		case engine.DomainFreed:
			d.state = "freed"
			d.err = e.Err
		}
	})
}

type domainKey struct {
	worker  int
	allocID uint64
}

// domainRec is what the REPL knows of a domain: its state from the
// events, and its layout from w.live_domains while it was live.
type domainRec struct {
	worker  *replWorker
	name    string
	allocID uint64
	run     uint64
	state   string
	err     error
	layout  *domainLayout
}

type domainLayout struct {
	workers []int
	window  int
	buffers []engine.BufferSpec
	offsets []int
	ranks   []*engine.RankView
}

// snapshotDomains records the layout of every live domain not seen yet.
// It asks the workers without holding r.mu: their observers take r.mu
// while holding the worker's lock.
func (r *repl) snapshotDomains() {
	r.mu.Lock()
	workers := append([]*replWorker(nil), r.workers...)
	r.mu.Unlock()
	type found struct {
		key    domainKey
		name   string
		layout *domainLayout
	}
	var all []found
	for _, rw := range workers {
		for name, d := range rw.w.LocalDomains().Live() {
			key := domainKey{rw.index, d.AllocationID()}
			r.mu.Lock()
			rec := r.domains[key]
			known := rec != nil && rec.layout != nil
			r.mu.Unlock()
			if known {
				continue
			}
			l := &domainLayout{workers: d.Workers()}
			l.buffers, l.offsets = d.Buffers()
			for _, id := range l.workers {
				v, err := d.Rank(id)
				if err != nil {
					l = nil // released meanwhile
					break
				}
				l.window = v.WindowSize
				l.ranks = append(l.ranks, v)
			}
			if l != nil {
				all = append(all, found{key, name, l})
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range all {
		rec := r.domains[f.key]
		if rec == nil { // allocated before the observer was attached: cannot happen, but be safe
			continue
		}
		rec.layout = f.layout
	}
}

// domainReport describes every domain seen, oldest first per worker.
func (r *repl) domainReport() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	recs := make([]*domainRec, 0, len(r.domains))
	for _, d := range r.domains {
		recs = append(recs, d)
	}
	if len(recs) == 0 {
		return "no domains yet (a statement using orch.allocate_domain makes one)\n"
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].worker.index != recs[j].worker.index {
			return recs[i].worker.index < recs[j].worker.index
		}
		return recs[i].allocID < recs[j].allocID
	})
	var b strings.Builder
	for _, d := range recs {
		fmt.Fprintf(&b, "%q  %s  (Worker %d, allocation %d, run %d)\n", d.name, d.state, d.worker.index, d.allocID, d.run)
		if d.err != nil {
			fmt.Fprintf(&b, "  free failed: %v\n", d.err)
		}
		l := d.layout
		switch {
		case d.state == "freed":
			continue // its windows are gone: the header is enough
		case l == nil:
			b.WriteString("  (layout not seen: the domain was released before the prompt returned)\n")
			continue
		}
		devs := d.worker.w.Config().DeviceIDs
		fmt.Fprintf(&b, "  workers %s, window %d bytes\n", starlark.NewList(intValues(l.workers)), l.window)
		for _, v := range l.ranks {
			dev := -1
			if v.Worker < len(devs) {
				dev = devs[v.Worker]
			}
			fmt.Fprintf(&b, "  rank %d: chip_worker %d (device %d)  window base %#x  device_ctx %#x\n", v.Rank, v.Worker, dev, v.WindowBase, v.DeviceCtx)
			for i, spec := range l.buffers {
				fmt.Fprintf(&b, "    buffer %-10s %#x  +%d  %d bytes (%d × %s)\n", spec.Name, v.BufferPtrs[spec.Name], l.offsets[i], spec.NBytes, spec.Count, spec.DType)
			}
		}
	}
	return b.String()
}

// workerReport draws the tree of the session's workers.
func (r *repl) workerReport() string {
	r.mu.Lock()
	workers := append([]*replWorker(nil), r.workers...)
	r.mu.Unlock()
	if len(workers) == 0 {
		return "no workers (w could not be made; Worker(...) makes one)\n"
	}
	names := map[*engine.Worker][]string{}
	for name, v := range r.env.Globals() {
		if w, ok := v.(*starlib.Worker); ok {
			names[w.Engine()] = append(names[w.Engine()], name)
		}
	}
	index := map[*engine.Worker]int{}
	child := map[*engine.Worker]bool{}
	for _, rw := range workers {
		index[rw.w] = rw.index
		for _, c := range rw.w.Children() {
			child[c] = true
		}
	}
	var b strings.Builder
	var draw func(w *engine.Worker, indent, label string)
	draw = func(w *engine.Worker, indent, label string) {
		cfg := w.Config()
		title := label
		if i, ok := index[w]; ok {
			title += fmt.Sprintf("Worker %d", i)
		} else {
			title += "Worker"
		}
		if n := names[w]; len(n) > 0 {
			sort.Strings(n)
			title += " (" + strings.Join(n, ", ") + ")"
		}
		platform := "?"
		if cfg.Platform != nil {
			platform = cfg.Platform.Name()
		}
		fmt.Fprintf(&b, "%s%s: level %d, platform %s, mode %s\n", indent, title, cfg.Level, platform, cfg.Mode)
		if cfg.Level <= 3 {
			for i, id := range cfg.DeviceIDs {
				fmt.Fprintf(&b, "%s  chip_worker %d: device %d\n", indent, i, id)
			}
		}
		for i := 0; i < cfg.NumSubWorkers; i++ {
			fmt.Fprintf(&b, "%s  sub_worker %d\n", indent, i)
		}
		for i, c := range w.Children() {
			draw(c, indent+"  ", fmt.Sprintf("child_worker %d: ", i))
		}
	}
	for _, rw := range workers {
		if !child[rw.w] {
			draw(rw.w, "", "")
		}
	}
	return b.String()
}
