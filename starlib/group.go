package starlib

import (
	"fmt"
	"os"
	"strings"

	"go.starlark.net/starlark"

	"simpler/engine"
	"simpler/engine/remote"
)

// addWorkerGroup implements w.add_worker_group(ranks=, launcher="mpirun",
// platform=, device_ids=, num_sub_workers=0, hosts=None,
// launcher_args=[], global_device_ranks=None, listen="127.0.0.1:0",
// token_file=None): ranks of remote level-3 nodes that a launcher starts
// at init() and that dial in; the ids, one per rank in rank order.
func (w *Worker) addWorkerGroup(th *starlark.Thread, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	const op = "add_worker_group"
	if err := w.s.refuseShipped(op); err != nil {
		return nil, err
	}
	spec := engine.GroupSpec{Launcher: engine.LauncherMPI, Platform: w.platform, Listen: "127.0.0.1:0"}
	var devicesV, hostsV, argsV, ranksV, tokenV starlark.Value = starlark.None, starlark.None, starlark.None, starlark.None, starlark.None
	if err := starlark.UnpackArgs(op, args, kw, "ranks", &spec.Ranks, "launcher?", &spec.Launcher, "platform?", &spec.Platform,
		"device_ids?", &devicesV, "num_sub_workers?", &spec.NumSubWorkers, "hosts?", &hostsV, "launcher_args?", &argsV,
		"global_device_ranks?", &ranksV, "listen?", &spec.Listen, "token_file?", &tokenV); err != nil {
		return nil, err
	}
	spec.DeviceIDs = []int{0}
	var err error
	if devicesV != starlark.None {
		if spec.DeviceIDs, err = intList(op, "device_ids", devicesV); err != nil {
			return nil, err
		}
	}
	if ranksV != starlark.None {
		if spec.GlobalDeviceRanks, err = intList(op, "global_device_ranks", ranksV); err != nil {
			return nil, err
		}
	}
	if spec.Hosts, err = stringList(op, "hosts", hostsV); err != nil {
		return nil, err
	}
	if spec.LauncherArgs, err = stringList(op, "launcher_args", argsV); err != nil {
		return nil, err
	}
	// Before the token file is read: launcher_args and hosts reach a
	// program that starts programs, and only an allow-list passes.
	if err := remote.CheckGroupLaunch(spec); err != nil {
		return nil, err
	}
	switch t := tokenV.(type) {
	case starlark.NoneType:
	case starlark.String:
		spec.TokenFile = string(t)
	default:
		return nil, errorf(engine.TypeError, "%s: token_file must be a path (a string), got %s", op, tokenV.Type())
	}
	ids, err := w.w.AddWorkerGroup(spec)
	if err != nil {
		return nil, err
	}
	return starlark.NewList(intTuple(ids)), nil
}

// stringList reads an optional list of strings (None: empty).
func stringList(op, name string, v starlark.Value) ([]string, error) {
	if v == starlark.None {
		return nil, nil
	}
	it, ok := v.(starlark.Indexable)
	if !ok {
		return nil, errorf(engine.TypeError, "%s: %s must be a list of strings, got %s", op, name, v.Type())
	}
	out := make([]string, it.Len())
	for i := range out {
		s, ok := it.Index(i).(starlark.String)
		if !ok {
			return nil, errorf(engine.TypeError, "%s: %s[%d] must be a string, got %s", op, name, i, it.Index(i).Type())
		}
		out[i] = string(s)
	}
	return out, nil
}

// groupStarter is how this session's level-4 workers start their worker
// groups: ranks are this simpler binary as `remote-l3-worker --connect`.
// A group whose ranks something else starts (launcher "none") is
// announced on stderr, with what to run.
func (s *Session) groupStarter() engine.GroupStarter {
	exe := ""
	if s.Launcher != nil {
		exe = s.Launcher.Path
	}
	if exe == "" {
		exe, _ = os.Executable()
	}
	cfg := remote.StarterConfig{Rank: []string{exe, "remote-l3-worker"}, Env: s.GroupEnv}
	cfg.OnListen = func(req engine.GroupRequest, addr, tokenFile string) {
		if req.Spec.Launcher != engine.LauncherNone {
			return
		}
		var devs []string
		for _, d := range req.Spec.DeviceIDs {
			devs = append(devs, fmt.Sprint(d))
		}
		s.outMu.Lock()
		defer s.outMu.Unlock()
		fmt.Fprintf(s.Stderr, "simpler: %s listens on %s for its %d ranks (launcher \"none\"); start each with\n  simpler remote-l3-worker --connect %s --token-file %s --platform %s --devices %s --rank N\n",
			req.Name, addr, req.Spec.Ranks, addr, tokenFile, req.Spec.Platform, strings.Join(devs, ","))
	}
	return remote.StartGroup(cfg)
}
