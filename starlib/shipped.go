package starlib

import "simpler/engine"

// Shipped code is a task, not a host program. A remote node runs code its
// parent sent over the wire (NewSourceResolver): the modules of the
// parent's script, its kernels and its node orchestration. That code gets
// the script surface that makes sense inside a node (tensors, TaskArgs,
// the orchestrator, collectives) and nothing that reaches the host the
// node runs on. The builtins below refuse, in a session whose code was
// shipped, at run time and at load, before reading any argument:
//
//   - Worker(): a worker reaches other hosts and starts processes;
//   - add_remote_worker: dials any host:port from the node's host, and
//     with no token reads the token file of another daemon there;
//   - add_worker_group: starts a launcher (mpirun, srun) with arguments,
//     and reads token_file=, a path on the node's host.
//
// The names stay predeclared, so that a shipped main script whose main()
// makes Workers still loads for its kernels; only calling them fails.

// hostReach names each host-reaching builtin and why shipped code may not
// call it.
var hostReach = map[string]string{
	"Worker()":          "a Worker reaches beyond the node (add_remote_worker dials any host:port, add_worker_group starts a launcher with launcher_args, token_file= reads a file)",
	"add_remote_worker": "it would dial a host:port from the node's host (and read a token file there)",
	"add_worker_group":  "it would start a launcher process and read a token file on the node's host",
}

// refuseShipped refuses builtin what in shipped code.
func (s *Session) refuseShipped(what string) error {
	if !s.shipped {
		return nil
	}
	return errorf(engine.RuntimeError, "%s: code shipped to a remote node runs as a task there, not as a host program: %s", what, hostReach[what])
}
