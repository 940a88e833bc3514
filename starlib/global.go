package starlib

import (
	"fmt"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/engine/global"
	"simpler/starlib/array"
)

// GlobalDomain is a GlobalCommDomainHandle.
type GlobalDomain struct{ d *global.Domain }

func (g *GlobalDomain) String() string {
	return fmt.Sprintf("GlobalCommDomainHandle(%q, domain_id=%d, %d members)", g.d.Spec().Name, g.d.ID(), len(g.d.Spec().Members))
}
func (g *GlobalDomain) Type() string          { return "GlobalCommDomainHandle" }
func (g *GlobalDomain) Freeze()               {}
func (g *GlobalDomain) Truth() starlark.Bool  { return true }
func (g *GlobalDomain) Hash() (uint32, error) { return starlark.MakeUint64(g.d.ID()).Hash() }
func (g *GlobalDomain) AttrNames() []string {
	return []string{"buffer_range", "domain_id", "freed", "generation", "global_device_ranks", "mapping_size", "member", "members", "name", "release", "released", "retain_after_run", "topology_hash"}
}

func (g *GlobalDomain) Attr(name string) (starlark.Value, error) {
	spec := g.d.Spec()
	switch name {
	case "name":
		return starlark.String(spec.Name), nil
	case "domain_id":
		return starlark.MakeUint64(g.d.ID()), nil
	case "generation":
		return starlark.MakeUint64(g.d.Generation()), nil
	case "members":
		l := make([]starlark.Value, len(spec.Members))
		for i, m := range spec.Members {
			l[i] = starlark.Tuple{starlark.MakeInt(m[0]), starlark.MakeInt(m[1])}
		}
		return starlark.NewList(l), nil
	case "global_device_ranks":
		l := make([]starlark.Value, 0, len(g.d.DeviceRanks()))
		for _, r := range g.d.DeviceRanks() {
			l = append(l, starlark.MakeInt(r))
		}
		return starlark.NewList(l), nil
	case "topology_hash":
		return starlark.String(g.d.Topology()), nil
	case "mapping_size":
		return starlark.MakeInt(spec.WindowSize), nil
	case "retain_after_run":
		return starlark.Bool(spec.RetainAfterRun), nil
	case "released":
		return starlark.Bool(g.d.Released()), nil
	case "freed":
		return starlark.Bool(g.d.Freed()), nil
	case "member":
		return builtin("member", func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			var r int
			if err := starlark.UnpackPositionalArgs("member", args, kw, 1, &r); err != nil {
				return nil, err
			}
			m, err := g.d.Member(r) // refused once released, like the buffer ranges and staging
			if err != nil {
				return nil, err
			}
			return starlark.Tuple{starlark.MakeInt(m[0]), starlark.MakeInt(m[1])}, nil
		}), nil
	case "buffer_range":
		return builtin("buffer_range", func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			var buf string
			if err := starlark.UnpackPositionalArgs("buffer_range", args, kw, 1, &buf); err != nil {
				return nil, err
			}
			off, n, err := g.d.BufferRange(buf)
			if err != nil {
				return nil, err
			}
			return starlark.Tuple{starlark.MakeInt(off), starlark.MakeInt(n)}, nil
		}), nil
	case "release":
		return builtin("release", func(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
			if err := noArgs("release", args, kw); err != nil {
				return nil, err
			}
			return starlark.None, g.d.Release()
		}), nil
	}
	return nil, nil
}

// allocateGlobalDomain implements orch.allocate_global_domain(name=,
// members=[(node, local), ...], window_size=, buffers=, retain_after_run=).
func (o *Orchestrator) allocateGlobalDomain(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "allocate_global_domain"
	var name string
	var membersV, buffersV starlark.Value = nil, starlark.None
	var windowSize int
	retain := false
	if err := starlark.UnpackArgs(op, args, kw, "name", &name, "members", &membersV, "window_size", &windowSize,
		"buffers?", &buffersV, "retain_after_run?", &retain); err != nil {
		return nil, err
	}
	spec := global.Spec{Name: name, WindowSize: windowSize, RetainAfterRun: retain}
	it, ok := membersV.(starlark.Indexable)
	if !ok {
		return nil, errorf(engine.TypeError, "%s: members must be a list of (node, local_worker) pairs, got %s", op, membersV.Type())
	}
	for i := 0; i < it.Len(); i++ {
		pair, err := intList(op, fmt.Sprintf("members[%d]", i), it.Index(i))
		if err != nil {
			return nil, err
		}
		if len(pair) != 2 {
			return nil, errorf(engine.ValueError, "%s: members[%d] must be a (node, local_worker) pair", op, i)
		}
		spec.Members = append(spec.Members, [2]int{pair[0], pair[1]})
	}
	bufs, err := bufferSpecs(op, buffersV)
	if err != nil {
		return nil, err
	}
	spec.Buffers = bufs
	d, err := global.Allocate(o.o, spec)
	if err != nil {
		return nil, err
	}
	return &GlobalDomain{d: d}, nil
}

func (o *Orchestrator) releaseGlobalDomain(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var hv starlark.Value
	if err := starlark.UnpackPositionalArgs("release_global_domain", args, kw, 1, &hv); err != nil {
		return nil, err
	}
	g, ok := hv.(*GlobalDomain)
	if !ok {
		return nil, errorf(engine.TypeError, "release_global_domain: want a GlobalCommDomainHandle, got %s", hv.Type())
	}
	return starlark.None, g.d.Release()
}

// GlobalView is what get_global_domain returns on a node: view[local] →
// ChipDomainContext.
type GlobalView struct {
	id   uint64
	view map[int]*engine.RankView
}

func (v *GlobalView) String() string        { return fmt.Sprintf("GlobalDomainView(%d)", v.id) }
func (v *GlobalView) Type() string          { return "GlobalDomainView" }
func (v *GlobalView) Freeze()               {}
func (v *GlobalView) Truth() starlark.Bool  { return true }
func (v *GlobalView) Hash() (uint32, error) { return starlark.MakeUint64(v.id).Hash() }

func (v *GlobalView) Get(k starlark.Value) (starlark.Value, bool, error) {
	i, err := starlark.AsInt32(k)
	if err != nil {
		return nil, false, errorf(engine.TypeError, "global domain index must be a local worker id (int), got %s", k.Type())
	}
	r, ok := v.view[i]
	if !ok {
		return nil, false, errorf(engine.KeyError, "local worker %d hosts no rank of global domain %d on this node", i, v.id)
	}
	return &ChipDomain{v: r}, true, nil
}

func (o *Orchestrator) getGlobalDomain(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var id int
	if err := starlark.UnpackPositionalArgs("get_global_domain", args, kw, 1, &id); err != nil {
		return nil, err
	}
	view, err := global.View(o.o.Worker(), uint64(id))
	if err != nil {
		return nil, err
	}
	return &GlobalView{id: uint64(id), view: view}, nil
}

func globalHandle(op string, v starlark.Value) (*global.Domain, error) {
	g, ok := v.(*GlobalDomain)
	if !ok {
		return nil, errorf(engine.TypeError, "%s: want a GlobalCommDomainHandle, got %s", op, v.Type())
	}
	return g.d, nil
}

func (o *Orchestrator) copyToGlobal(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "copy_to_global_domain"
	var hv, data starlark.Value
	var rank, offset int
	var buffer string
	if err := starlark.UnpackArgs(op, args, kw, "h", &hv, "domain_rank", &rank, "data", &data, "buffer?", &buffer, "offset?", &offset); err != nil {
		return nil, err
	}
	d, err := globalHandle(op, hv)
	if err != nil {
		return nil, err
	}
	var b []byte
	switch x := data.(type) {
	case starlark.Bytes:
		b = []byte(x)
	default:
		a, err := array.FromValue(nil, data, 0, nil)
		if err != nil {
			return nil, engine.Wrap(err, op)
		}
		b = a.Bytes()
	}
	return starlark.None, d.CopyToGlobal(rank, b, buffer, offset)
}

func (o *Orchestrator) copyFromGlobal(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "copy_from_global_domain"
	var hv starlark.Value
	var rank, nbytes, offset int
	var buffer string
	if err := starlark.UnpackArgs(op, args, kw, "h", &hv, "domain_rank", &rank, "nbytes", &nbytes, "buffer?", &buffer, "offset?", &offset); err != nil {
		return nil, err
	}
	d, err := globalHandle(op, hv)
	if err != nil {
		return nil, err
	}
	b, err := d.CopyFromGlobal(rank, nbytes, buffer, offset)
	if err != nil {
		return nil, err
	}
	return starlark.Bytes(b), nil
}
