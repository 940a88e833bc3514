package starlib

import (
	"fmt"
	"math"
	"sort"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/hal"
)

// TaskArgs is the Starlark value of engine.TaskArgs. Inside a kernel it
// also knows the chip, so its tensors are readable there.
type TaskArgs struct {
	a    *engine.TaskArgs
	chip hal.Chip
	bufs []*Tensor // tensors whose memory can be freed (host buffers, host tensors): checked at submit
	// owned[i] is the Buffer tensor i is a view of, nil if none: its
	// access is checked against the tag at submit, since set_tag may
	// change the tag after add_tensor.
	owned []*Buffer
}

// live refuses args holding a tensor whose memory was freed, and a write
// tag on a view of a read-only Buffer. It is what every submit checks.
func (t *TaskArgs) live(op string) error {
	for _, v := range t.bufs {
		if err := v.live(op); err != nil {
			return err
		}
	}
	for i, b := range t.owned {
		if b != nil {
			if err := b.grants(op, i, t.a.Tags[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *TaskArgs) String() string {
	return fmt.Sprintf("TaskArgs(%d tensors, %d scalars)", len(t.a.Tensors), len(t.a.Scalars))
}
func (t *TaskArgs) Type() string         { return "TaskArgs" }
func (t *TaskArgs) Freeze()              {}
func (t *TaskArgs) Truth() starlark.Bool { return true }
func (t *TaskArgs) Hash() (uint32, error) {
	return 0, fmt.Errorf("TypeError: unhashable type: TaskArgs")
}

var taskArgsMethods = map[string]*starlark.Builtin{
	"add_tensor":   builtin("add_tensor", argsAddTensor),
	"add_scalar":   builtin("add_scalar", argsAddScalar),
	"tensor":       builtin("tensor", argsTensor),
	"scalar":       builtin("scalar", argsScalar),
	"scalar_f32":   builtin("scalar_f32", argsScalarF32),
	"tag":          builtin("tag", argsTag),
	"tensor_count": builtin("tensor_count", argsTensorCount),
	"scalar_count": builtin("scalar_count", argsScalarCount),
	"set_tag":      builtin("set_tag", argsSetTag),
	"clear":        builtin("clear", argsClear),
}

// Len is len(args): its tensors plus its scalars, as upstream's.
func (t *TaskArgs) Len() int { return len(t.a.Tensors) + len(t.a.Scalars) }

// Iterate yields the arguments in order, tensors then scalars (Starlark's
// len() takes only a sequence, and a sequence iterates).
func (t *TaskArgs) Iterate() starlark.Iterator {
	items := make([]starlark.Value, 0, t.Len())
	for _, ten := range t.a.Tensors {
		items = append(items, newTensor(ten, t.chip))
	}
	for _, v := range t.a.Scalars {
		items = append(items, starlark.MakeUint64(v))
	}
	return starlark.NewList(items).Iterate()
}

func (t *TaskArgs) Attr(name string) (starlark.Value, error) {
	if m, ok := taskArgsMethods[name]; ok {
		return m.BindReceiver(t), nil
	}
	return nil, nil
}

func (t *TaskArgs) AttrNames() []string { return sortedKeys(taskArgsMethods) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// newTaskArgs implements TaskArgs(tensors=[(t, TAG), ...], scalars=[...]).
func newTaskArgs(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var tensors, scalars *starlark.List
	if err := starlark.UnpackArgs("TaskArgs", args, kw, "tensors?", &tensors, "scalars?", &scalars); err != nil {
		return nil, err
	}
	t := &TaskArgs{a: &engine.TaskArgs{}}
	if tensors != nil {
		for i := 0; i < tensors.Len(); i++ {
			pair, ok := tensors.Index(i).(starlark.Tuple)
			if !ok || len(pair) != 2 {
				return nil, errorf(engine.TypeError, "TaskArgs: tensors[%d] must be a (tensor, tag) pair, got %s", i, tensors.Index(i))
			}
			if err := t.addTensor(pair[0], pair[1]); err != nil {
				return nil, err
			}
		}
	}
	if scalars != nil {
		for i := 0; i < scalars.Len(); i++ {
			if err := t.addScalar(scalars.Index(i)); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

func (t *TaskArgs) addTensor(tv, tagV starlark.Value) error {
	tag, ok := tagV.(TagValue)
	if !ok {
		return errorf(engine.TypeError, "add_tensor: tag must be one of INPUT, OUTPUT, INOUT, OUTPUT_EXISTING, NO_DEP, got %s", tagV.Type())
	}
	switch ten := tv.(type) {
	case *Tensor:
		if err := ten.live("add_tensor"); err != nil {
			return err
		}
		if ten.owner != nil {
			if err := ten.owner.grants("add_tensor", len(t.a.Tensors), engine.Tag(tag)); err != nil {
				return err
			}
		}
		if err := t.a.AddTensor(ten.t, engine.Tag(tag)); err != nil {
			return err
		}
		if ten.buf != nil || ten.host != nil || ten.owner != nil {
			t.bufs = append(t.bufs, ten)
		}
		t.own(ten.owner)
		return nil
	case *RemoteTensorRef:
		return t.a.AddRemote(ten.t, ten.ref, engine.Tag(tag))
	}
	return errorf(engine.TypeError, "add_tensor: want a Tensor or RemoteTensorRef, got %s", tv.Type())
}

// own records the Buffer of the tensor just added (nil: none). Args a
// kernel or an orchestration received have no owners until one is added,
// so owned is padded to stay indexed like the tensors.
func (t *TaskArgs) own(b *Buffer) {
	if b == nil {
		return
	}
	for len(t.owned) < len(t.a.Tensors)-1 {
		t.owned = append(t.owned, nil)
	}
	t.owned = append(t.owned, b)
}

func (t *TaskArgs) addScalar(v starlark.Value) error {
	switch x := v.(type) {
	case starlark.Int:
		if u, ok := x.Uint64(); ok {
			t.a.AddScalar(u)
			return nil
		}
		if i, ok := x.Int64(); ok {
			t.a.AddScalar(uint64(i))
			return nil
		}
		return errorf(engine.ValueError, "add_scalar: %s does not fit in 64 bits", x)
	case starlark.Float:
		t.a.AddScalar(uint64(math.Float32bits(float32(x))))
		return nil
	case starlark.Bool:
		if x {
			t.a.AddScalar(1)
		} else {
			t.a.AddScalar(0)
		}
		return nil
	}
	return errorf(engine.TypeError, "add_scalar: want an int or float, got %s", v.Type())
}

func argsAddTensor(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var tv starlark.Value
	var tag starlark.Value = TagValue(engine.Input)
	if err := starlark.UnpackArgs("add_tensor", args, kw, "t", &tv, "tag?", &tag); err != nil {
		return nil, err
	}
	return starlark.None, b.Receiver().(*TaskArgs).addTensor(tv, tag)
}

func argsAddScalar(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var v starlark.Value
	if err := starlark.UnpackPositionalArgs("add_scalar", args, kw, 1, &v); err != nil {
		return nil, err
	}
	return starlark.None, b.Receiver().(*TaskArgs).addScalar(v)
}

func (t *TaskArgs) index(op string, args starlark.Tuple, kw []starlark.Tuple, n int) (int, error) {
	var i int
	if err := starlark.UnpackPositionalArgs(op, args, kw, 1, &i); err != nil {
		return 0, err
	}
	if i < 0 || i >= n {
		return 0, errorf(engine.IndexError, "%s: index %d out of range (%d present)", op, i, n)
	}
	return i, nil
}

func argsTensor(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	t := b.Receiver().(*TaskArgs)
	i, err := t.index("tensor", args, kw, len(t.a.Tensors))
	if err != nil {
		return nil, err
	}
	return newTensor(t.a.Tensors[i], t.chip), nil
}

func argsTag(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	t := b.Receiver().(*TaskArgs)
	i, err := t.index("tag", args, kw, len(t.a.Tags))
	if err != nil {
		return nil, err
	}
	return TagValue(t.a.Tags[i]), nil
}

func argsScalar(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	t := b.Receiver().(*TaskArgs)
	i, err := t.index("scalar", args, kw, len(t.a.Scalars))
	if err != nil {
		return nil, err
	}
	return starlark.MakeUint64(t.a.Scalars[i]), nil
}

func argsScalarF32(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	t := b.Receiver().(*TaskArgs)
	i, err := t.index("scalar_f32", args, kw, len(t.a.Scalars))
	if err != nil {
		return nil, err
	}
	return starlark.Float(math.Float32frombits(uint32(t.a.Scalars[i]))), nil
}

// argsSetTag implements args.set_tag(i, tag): the tag of tensor i. As
// upstream, it does not judge the tag against a Buffer's access; every
// submit does (live).
func argsSetTag(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	t := b.Receiver().(*TaskArgs)
	var i int
	var tagV starlark.Value
	if err := starlark.UnpackPositionalArgs("set_tag", args, kw, 2, &i, &tagV); err != nil {
		return nil, err
	}
	tag, ok := tagV.(TagValue)
	if !ok {
		return nil, errorf(engine.TypeError, "set_tag: tag must be one of INPUT, OUTPUT, INOUT, OUTPUT_EXISTING, NO_DEP, got %s", tagV.Type())
	}
	if i < 0 || i >= len(t.a.Tensors) {
		return nil, errorf(engine.IndexError, "set_tag: index %d out of range (%d tensors present)", i, len(t.a.Tensors))
	}
	if !engine.Tag(tag).Valid() {
		return nil, errorf(engine.ValueError, "set_tag: unknown tag %d", uint8(tag))
	}
	t.a.Tags[i] = engine.Tag(tag)
	return starlark.None, nil
}

// argsClear implements args.clear(): no tensors, no scalars, ready to be
// filled again.
func argsClear(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackPositionalArgs("clear", args, kw, 0); err != nil {
		return nil, err
	}
	t := b.Receiver().(*TaskArgs)
	*t.a = engine.TaskArgs{}
	t.bufs, t.owned = nil, nil
	return starlark.None, nil
}

func argsTensorCount(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackPositionalArgs("tensor_count", args, kw, 0); err != nil {
		return nil, err
	}
	return starlark.MakeInt(len(b.Receiver().(*TaskArgs).a.Tensors)), nil
}

func argsScalarCount(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackPositionalArgs("scalar_count", args, kw, 0); err != nil {
		return nil, err
	}
	return starlark.MakeInt(len(b.Receiver().(*TaskArgs).a.Scalars)), nil
}

// TagValue is a tensor tag as a Starlark value.
type TagValue engine.Tag

func (t TagValue) String() string        { return engine.Tag(t).String() }
func (t TagValue) Type() string          { return "TensorArgType" }
func (t TagValue) Freeze()               {}
func (t TagValue) Truth() starlark.Bool  { return true }
func (t TagValue) Hash() (uint32, error) { return uint32(t) + 1, nil }

// CallConfig is per-call settings as a Starlark value.
type CallConfig struct{ c engine.CallConfig }

func (c *CallConfig) String() string {
	s := fmt.Sprintf("CallConfig(block_dim=%d, aicpu_thread_num=%d, enable_profiling=%s", c.c.BlockDim, c.c.AicpuThreadNum, starlark.Bool(c.c.EnableProfiling))
	if c.c.Timeout > 0 {
		s += fmt.Sprintf(", timeout_s=%v", c.c.Timeout.Seconds())
	}
	return s + ")"
}
func (c *CallConfig) Type() string         { return "CallConfig" }
func (c *CallConfig) Freeze()              {}
func (c *CallConfig) Truth() starlark.Bool { return true }
func (c *CallConfig) Hash() (uint32, error) {
	return 0, fmt.Errorf("TypeError: unhashable type: CallConfig")
}

func (c *CallConfig) Attr(name string) (starlark.Value, error) {
	switch name {
	case "block_dim":
		return starlark.MakeInt(c.c.BlockDim), nil
	case "aicpu_thread_num":
		return starlark.MakeInt(c.c.AicpuThreadNum), nil
	case "enable_profiling":
		return starlark.Bool(c.c.EnableProfiling), nil
	case "timeout_s":
		if c.c.Timeout == 0 {
			return starlark.None, nil
		}
		return starlark.Float(c.c.Timeout.Seconds()), nil
	}
	return nil, nil
}

func (c *CallConfig) AttrNames() []string { return engine.ConfigKeys }

func newCallConfig(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if len(args) > 0 {
		return nil, errorf(engine.TypeError, "CallConfig: takes keyword arguments only (%v)", engine.ConfigKeys)
	}
	c := &CallConfig{c: engine.DefaultCallConfig}
	for _, pair := range kw {
		key := string(pair[0].(starlark.String))
		var err error
		switch key {
		case "block_dim":
			c.c.BlockDim, err = positive(key, pair[1])
		case "aicpu_thread_num":
			c.c.AicpuThreadNum, err = positive(key, pair[1])
		case "enable_profiling":
			b, ok := pair[1].(starlark.Bool)
			if !ok {
				err = errorf(engine.TypeError, "CallConfig: enable_profiling must be a bool, got %s", pair[1].Type())
			}
			c.c.EnableProfiling = bool(b)
		case "timeout_s":
			c.c.Timeout, err = seconds("CallConfig", key, pair[1])
		default:
			err = errorf(engine.TypeError, "CallConfig: unknown key %q (known: %v)", key, engine.ConfigKeys)
		}
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

// positive reads a CallConfig count: an int in 1..MaxInt32 (what the
// runtime's launch fields hold).
func positive(key string, v starlark.Value) (int, error) {
	x, ok := v.(starlark.Int)
	if !ok {
		return 0, errorf(engine.TypeError, "CallConfig: %s must be an int, got %s", key, v.Type())
	}
	n, ok := x.Int64()
	if !ok || n <= 0 || n > math.MaxInt32 {
		return 0, errorf(engine.ValueError, "CallConfig: %s = %s is out of range (1..%d)", key, x, math.MaxInt32)
	}
	return int(n), nil
}
