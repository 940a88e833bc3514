// Command simpler runs Starlark orchestration scripts over simulated (or
// real) Ascend NPU chips.
//
//	simpler run [flags] script.star [ARGS...]
//	simpler repl [flags]
//	simpler test [flags] [paths...]
//	simpler doc [name]
//	simpler remote-l3-worker [flags]
//	simpler bench [dispatch|process|collectives|remote|global]...
//	simpler platforms [--json]
//	simpler completion bash|zsh
//	simpler version
//	simpler help [command]
//
// `simpler help COMMAND` (or `simpler COMMAND --help`) prints a command's
// flags; usage.go holds the table help is made from.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"simpler/bench"
	"simpler/hal/shm"
)

// Version is the release of this build.
const Version = "0.1.0"

func main() {
	code := Main(os.Args[1:], os.Stdout, os.Stderr)
	shm.Finish() // the prefix's lock: a clean exit leaves nothing in /dev/shm
	os.Exit(code)
}

// Main runs the CLI with args and returns the exit code: 0 on success
// (and for help), 1 when what ran failed, 2 for a wrong command line.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(rest, stdout, stderr)
	case childCommand:
		return cmdChild(rest, stderr)
	case "remote-l3-worker":
		return cmdRemote(rest, stdout, stderr)
	case sessionCommand:
		return cmdSession(rest, stderr)
	case bench.EchoCommand: // the peer of the benchmark's ping-pong
		if len(rest) != 1 || bench.EchoPeer(rest[0]) != nil {
			return 1
		}
		return 0
	case "bench":
		return cmdBench(rest, stdout, stderr)
	case "repl":
		return cmdRepl(rest, os.Stdin, stdout, stderr)
	case "test":
		return cmdTest(rest, stdout, stderr)
	case "doc":
		return cmdDoc(rest, stdout, stderr)
	case "platforms":
		return cmdPlatformsFlags(rest, stdout, stderr)
	case "completion":
		return cmdCompletion(rest, stdout, stderr)
	case "version", "--version":
		return cmdVersion(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return cmdHelp(rest, stdout, stderr)
	}
	fmt.Fprintf(stderr, "simpler: unknown command %q (commands: %s)\n", cmd, strings.Join(commandNames(), ", "))
	if near := closest(cmd, commandNames()); near != "" {
		fmt.Fprintf(stderr, "did you mean %q?\n", near)
	}
	fmt.Fprintln(stderr, "run 'simpler help' for an overview")
	return 2
}
