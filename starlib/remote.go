package starlib

import (
	"fmt"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/engine/hostmem"
	"simpler/engine/remote"
	"simpler/hal/dtype"
	"simpler/starlib/array"
)

// RemoteBuffer is a RemoteBufferHandle: opaque, it shows where it lives
// and its state but never a transport key.
type RemoteBuffer struct{ h *engine.RemoteBuffer }

func (b *RemoteBuffer) String() string {
	kind := "owner"
	if b.h.Imported() {
		kind = "imported"
	}
	return fmt.Sprintf("RemoteBufferHandle(%s, worker %d, owner %d, %d bytes, %s)", kind, b.h.Worker, b.h.Owner, b.h.NBytes, b.h.Access)
}
func (b *RemoteBuffer) Type() string         { return "RemoteBufferHandle" }
func (b *RemoteBuffer) Freeze()              {}
func (b *RemoteBuffer) Truth() starlark.Bool { return true }
func (b *RemoteBuffer) Hash() (uint32, error) {
	return 0, errorf(engine.TypeError, "unhashable type: RemoteBufferHandle")
}
func (b *RemoteBuffer) AttrNames() []string {
	return []string{"access", "address_space", "is_imported", "nbytes", "owner_worker_id", "released", "worker_id"}
}

func (b *RemoteBuffer) Attr(name string) (starlark.Value, error) {
	switch name {
	case "worker_id":
		return starlark.MakeInt(b.h.Worker), nil
	case "owner_worker_id":
		return starlark.MakeInt(b.h.Owner), nil
	case "nbytes":
		return starlark.MakeInt(b.h.NBytes), nil
	case "address_space":
		if b.h.Imported() {
			return starlark.String("remote_window"), nil
		}
		return starlark.String("remote_host"), nil
	case "access":
		return starlark.String(b.h.Access.String()), nil
	case "released":
		return starlark.Bool(b.h.Released()), nil
	case "is_imported":
		return starlark.Bool(b.h.Imported()), nil
	}
	return nil, nil
}

// RemoteExport is an opaque RemoteBufferExport.
type RemoteExport struct{ e *remote.Export }

func (x *RemoteExport) String() string {
	off, n := x.e.Range()
	return fmt.Sprintf("RemoteBufferExport(owner %d, %d bytes at %d, %s)", x.e.Owner().Owner, n, off, x.e.Access())
}
func (x *RemoteExport) Type() string         { return "RemoteBufferExport" }
func (x *RemoteExport) Freeze()              {}
func (x *RemoteExport) Truth() starlark.Bool { return true }
func (x *RemoteExport) Hash() (uint32, error) {
	return 0, errorf(engine.TypeError, "unhashable type: RemoteBufferExport")
}

// RemoteTensorRef names a tensor in a remote buffer (or, from
// host_inline, a small input carried in the task frame).
// Its tensor gives the shape and dtype, its ref where the bytes are.
type RemoteTensorRef struct {
	t   engine.Tensor
	ref engine.RemoteRef
}

func (r *RemoteTensorRef) String() string {
	if r.ref.Inline != nil {
		return fmt.Sprintf("RemoteTensorRef(host_inline %d bytes, shape=%s, %s)", len(r.ref.Inline), engine.FormatInts(r.t.Shape), r.t.DType)
	}
	return fmt.Sprintf("RemoteTensorRef(worker %d, offset=%d, shape=%s, %s)", r.ref.Buf.Worker, r.ref.Offset, engine.FormatInts(r.t.Shape), r.t.DType)
}
func (r *RemoteTensorRef) Type() string         { return "RemoteTensorRef" }
func (r *RemoteTensorRef) Freeze()              {}
func (r *RemoteTensorRef) Truth() starlark.Bool { return true }
func (r *RemoteTensorRef) Hash() (uint32, error) {
	return 0, errorf(engine.TypeError, "unhashable type: RemoteTensorRef")
}
func (r *RemoteTensorRef) AttrNames() []string { return []string{"dtype", "nbytes", "offset", "shape"} }

func (r *RemoteTensorRef) Attr(name string) (starlark.Value, error) {
	switch name {
	case "shape":
		return intTuple(r.t.Shape), nil
	case "dtype":
		return array.DTypeConst(r.t.DType), nil
	case "nbytes":
		return starlark.MakeInt(r.t.NBytes()), nil
	case "offset":
		if r.ref.Buf == nil {
			return starlark.None, nil
		}
		return starlark.MakeInt(r.ref.Offset), nil
	}
	return nil, nil
}

// refShape reads shape= and dtype= for a RemoteTensorRef.
func refShape(op string, shapeV, dtV starlark.Value) ([]int, dtype.DType, error) {
	if shapeV == nil || shapeV == starlark.None {
		return nil, 0, errorf(engine.ValueError, "%s: shape= is required", op)
	}
	shape, err := toShape(op, shapeV)
	if err != nil {
		return nil, 0, err
	}
	dt := dtype.Float32
	if dtV != nil && dtV != starlark.None {
		if dt, err = array.ParseDType(dtV); err != nil {
			return nil, 0, engine.Wrap(err, op)
		}
	}
	return shape, dt, nil
}

// remoteTensorRefType is the RemoteTensorRef builtin, with host_inline
// as an attribute.
type remoteTensorRefType struct{ *starlark.Builtin }

func (remoteTensorRefType) AttrNames() []string { return []string{"host_inline"} }
func (remoteTensorRefType) Attr(name string) (starlark.Value, error) {
	if name == "host_inline" {
		return builtin("RemoteTensorRef.host_inline", hostInline), nil
	}
	return nil, nil
}

func newRemoteTensorRefType() starlark.Value {
	return remoteTensorRefType{builtin("RemoteTensorRef", newRemoteTensorRef)}
}

func newRemoteTensorRef(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "RemoteTensorRef"
	var hv, shapeV, dtV starlark.Value
	offset := 0
	if err := starlark.UnpackArgs(op, args, kw, "handle", &hv, "offset?", &offset, "shape?", &shapeV, "dtype?", &dtV); err != nil {
		return nil, err
	}
	h, ok := hv.(*RemoteBuffer)
	if !ok {
		return nil, errorf(engine.TypeError, "%s: want a RemoteBufferHandle, got %s", op, hv.Type())
	}
	shape, dt, err := refShape(op, shapeV, dtV)
	if err != nil {
		return nil, err
	}
	t := engine.Tensor{Shape: shape, DType: dt}
	if offset < 0 || offset+t.NBytes() > h.h.NBytes {
		return nil, errorf(engine.ValueError, "%s: %d bytes at offset %d overrun the %d-byte buffer", op, t.NBytes(), offset, h.h.NBytes)
	}
	return &RemoteTensorRef{t: t, ref: engine.RemoteRef{Buf: h.h, Offset: offset}}, nil
}

func hostInline(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "RemoteTensorRef.host_inline"
	var payload starlark.Value
	var shapeV, dtV starlark.Value
	if err := starlark.UnpackArgs(op, args, kw, "payload_bytes", &payload, "shape?", &shapeV, "dtype?", &dtV); err != nil {
		return nil, err
	}
	shape, dt, err := refShape(op, shapeV, dtV)
	if err != nil {
		return nil, err
	}
	var data []byte
	switch p := payload.(type) {
	case starlark.Bytes:
		data = []byte(p)
	case *array.Array:
		data = p.Bytes()
	default:
		return nil, errorf(engine.TypeError, "%s: payload must be bytes or an Array, got %s", op, payload.Type())
	}
	t := engine.Tensor{Shape: shape, DType: dt}
	if len(data) != t.NBytes() {
		return nil, errorf(engine.ValueError, "%s: %d payload bytes for a %d-byte tensor", op, len(data), t.NBytes())
	}
	if len(data) > 1<<20 {
		return nil, errorf(engine.ValueError, "%s: %d bytes exceed the 1 MiB inline limit; use remote_malloc and remote_copy_to", op, len(data))
	}
	return &RemoteTensorRef{t: t, ref: engine.RemoteRef{Inline: data}}, nil
}

func (w *Worker) addRemoteWorker(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "add_remote_worker"
	if err := w.s.refuseShipped(op); err != nil {
		return nil, err
	}
	endpoint, platform, profile := "127.0.0.1:7700", w.platform, "sim"
	var devicesV, ranksV, tokenV starlark.Value = starlark.None, starlark.None, starlark.None
	subs := 0
	if err := starlark.UnpackArgs(op, args, kw, "endpoint?", &endpoint, "platform?", &platform, "device_ids?", &devicesV,
		"num_sub_workers?", &subs, "comm_profile?", &profile, "global_device_ranks?", &ranksV, "token?", &tokenV); err != nil {
		return nil, err
	}
	spec := engine.RemoteSpec{Endpoint: endpoint, Platform: platform, NumSubWorkers: subs, CommProfile: profile}
	if devicesV == starlark.None {
		spec.DeviceIDs = []int{0}
	} else {
		ids, err := intList(op, "device_ids", devicesV)
		if err != nil {
			return nil, err
		}
		spec.DeviceIDs = ids
	}
	if ranksV != starlark.None {
		ranks, err := intList(op, "global_device_ranks", ranksV)
		if err != nil {
			return nil, err
		}
		spec.GlobalDeviceRanks = ranks
	}
	switch t := tokenV.(type) {
	case starlark.NoneType:
	case starlark.String:
		spec.Token = []byte(t)
	case starlark.Bytes:
		spec.Token = []byte(t)
	default:
		return nil, errorf(engine.TypeError, "%s: token must be a string or bytes, got %s", op, tokenV.Type())
	}
	id, err := w.w.AddRemoteWorker(spec)
	if err != nil {
		return nil, err
	}
	return starlark.MakeInt(id), nil
}

func remoteHandle(op string, v starlark.Value) (*engine.RemoteBuffer, error) {
	b, ok := v.(*RemoteBuffer)
	if !ok {
		return nil, errorf(engine.TypeError, "%s: want a RemoteBufferHandle, got %s", op, v.Type())
	}
	return b.h, nil
}

func (w *Worker) remoteMalloc(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var worker, nbytes int
	if err := starlark.UnpackArgs("remote_malloc", args, kw, "worker", &worker, "nbytes", &nbytes); err != nil {
		return nil, err
	}
	d, err := directFor(th, "remote_malloc", w.w)
	if err != nil {
		return nil, err
	}
	h, err := remote.DirectIn(d).Malloc(worker, nbytes)
	if err != nil {
		return nil, err
	}
	return &RemoteBuffer{h: h}, nil
}

func (w *Worker) remoteFree(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var hv starlark.Value
	if err := starlark.UnpackPositionalArgs("remote_free", args, kw, 1, &hv); err != nil {
		return nil, err
	}
	h, err := remoteHandle("remote_free", hv)
	if err != nil {
		return nil, err
	}
	// A free that fails leaves the handle live: the memory is still
	// there, and remote_free may be called again.
	return starlark.None, remote.Free(h)
}

func (w *Worker) remoteReleaseImport(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var hv starlark.Value
	if err := starlark.UnpackPositionalArgs("remote_release_import", args, kw, 1, &hv); err != nil {
		return nil, err
	}
	h, err := remoteHandle("remote_release_import", hv)
	if err != nil {
		return nil, err
	}
	return starlark.None, remote.ReleaseImport(h)
}

// remoteCopy implements remote_copy_to / remote_copy_from: the host side
// is a host Tensor or an address in shared memory.
func (w *Worker) remoteCopy(th *starlark.Thread, op string, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var hv, hostV starlark.Value
	var nbytes, offset int
	if err := starlark.UnpackArgs(op, args, kw, "h", &hv, "host", &hostV, "nbytes", &nbytes, "offset?", &offset); err != nil {
		return nil, err
	}
	h, err := remoteHandle(op, hv)
	if err != nil {
		return nil, err
	}
	if t, ok := hostV.(*Tensor); ok && (t.t.ChildMemory || nbytes > t.t.NBytes()) {
		return nil, errorf(engine.ValueError, "%s: the host side must be a host tensor of at least %d bytes", op, nbytes)
	}
	addr, err := toAddr(op, hostV)
	if err != nil {
		return nil, err
	}
	if nbytes <= 0 {
		return nil, errorf(engine.ValueError, "%s: nbytes must be > 0, got %d", op, nbytes)
	}
	host, err := hostmem.Resolve(addr, nbytes)
	if err != nil {
		return nil, engine.Wrap(err, op)
	}
	d, err := directFor(th, op, w.w)
	if err != nil {
		return nil, err
	}
	if op == "remote_copy_to" {
		return starlark.None, remote.DirectIn(d).CopyTo(h, host, offset)
	}
	return starlark.None, remote.DirectIn(d).CopyFrom(h, host, offset)
}

func (w *Worker) remoteCopyTo(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	return w.remoteCopy(th, "remote_copy_to", args, kw)
}

func (w *Worker) remoteCopyFrom(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	return w.remoteCopy(th, "remote_copy_from", args, kw)
}

func (w *Worker) remoteExport(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "remote_export"
	var hv starlark.Value
	var nbytesV starlark.Value = starlark.None
	offset, access := 0, "readwrite"
	if err := starlark.UnpackArgs(op, args, kw, "h", &hv, "offset?", &offset, "nbytes?", &nbytesV, "access?", &access); err != nil {
		return nil, err
	}
	h, err := remoteHandle(op, hv)
	if err != nil {
		return nil, err
	}
	nbytes := h.NBytes - offset
	if nbytesV != starlark.None {
		if nbytes, err = starlark.AsInt32(nbytesV); err != nil {
			return nil, errorf(engine.TypeError, "%s: nbytes must be an int, got %s", op, nbytesV.Type())
		}
	}
	a, err := engine.ParseAccess(access)
	if err != nil {
		return nil, engine.Wrap(err, op)
	}
	d, err := directFor(th, op, w.w)
	if err != nil {
		return nil, err
	}
	e, err := remote.DirectIn(d).Export(h, offset, nbytes, a)
	if err != nil {
		return nil, err
	}
	return &RemoteExport{e: e}, nil
}

func (w *Worker) remoteImport(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "remote_import"
	var ev, accessV starlark.Value = nil, starlark.None
	var worker int
	if err := starlark.UnpackArgs(op, args, kw, "exp", &ev, "worker", &worker, "access?", &accessV); err != nil {
		return nil, err
	}
	e, ok := ev.(*RemoteExport)
	if !ok {
		return nil, errorf(engine.TypeError, "%s: want a RemoteBufferExport, got %s", op, ev.Type())
	}
	var a engine.Access
	if accessV != starlark.None {
		s, ok := starlark.AsString(accessV)
		if !ok {
			return nil, errorf(engine.TypeError, "%s: access must be a string, got %s", op, accessV.Type())
		}
		var err error
		if a, err = engine.ParseAccess(s); err != nil {
			return nil, engine.Wrap(err, op)
		}
	}
	d, err := directFor(th, op, w.w)
	if err != nil {
		return nil, err
	}
	h, err := remote.DirectIn(d).Import(e.e, worker, a)
	if err != nil {
		return nil, err
	}
	return &RemoteBuffer{h: h}, nil
}
