package starlib

import (
	starlarkjson "go.starlark.net/lib/json"
	starlarkmath "go.starlark.net/lib/math"
	starlarktime "go.starlark.net/lib/time"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"simpler/engine"
	"simpler/hal/dtype"
	"simpler/starlib/array"
)

// predeclared is every global a script sees.
func (s *Session) predeclared() starlark.StringDict {
	d := starlark.StringDict{
		"Worker":          builtin("Worker", s.newWorker),
		"host_tensor":     builtin("host_tensor", s.hostTensor),
		"make_tensor":     builtin("make_tensor", makeTensor),
		"TaskArgs":        builtin("TaskArgs", newTaskArgs),
		"CallConfig":      builtin("CallConfig", newCallConfig),
		"CommBufferSpec":  builtin("CommBufferSpec", newBufferSpec),
		"catch":           builtin("catch", catch),
		"RemoteTensorRef": newRemoteTensorRefType(),
		"assert":          assertModule,
		"array":           array.Module,
		"time":            starlarktime.Module,
		"json":            starlarkjson.Module,
		"math":            starlarkmath.Module,
		"fmt":             builtin("fmt", fmtBuiltin),
		"struct":          builtin("struct", starlarkstruct.Make),
	}
	dtypes := starlark.StringDict{}
	for _, dt := range dtype.All {
		v := array.DTypeConst(dt)
		d[dt.ConstName()] = v
		dtypes[dt.ConstName()] = v
	}
	d["DataType"] = starlarkstruct.FromStringDict(starlark.String("DataType"), dtypes)
	tags := starlark.StringDict{}
	for _, t := range engine.Tags {
		d[t.String()] = TagValue(t)
		tags[t.String()] = TagValue(t)
	}
	d["TensorArgType"] = starlarkstruct.FromStringDict(starlark.String("TensorArgType"), tags)
	return d
}

// catch calls fn(*args, **kwargs) and returns None, or the error message.
func catch(th *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	if len(args) == 0 {
		return nil, errorf(engine.TypeError, "catch: want a function to call")
	}
	fn, ok := args[0].(starlark.Callable)
	if !ok {
		return nil, errorf(engine.TypeError, "catch: want a function to call, got %s", args[0].Type())
	}
	if _, err := starlark.Call(th, fn, args[1:], kw); err != nil {
		return starlark.String(Message(err)), nil
	}
	return starlark.None, nil
}
