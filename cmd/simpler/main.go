// Command simpler runs Starlark orchestration scripts over simulated (or
// real) Ascend NPU chips.
//
//	simpler run [--platform P] [--devices 0-3] [--mode thread|process] [--trace trace.json] script.star [ARGS...]
//	simpler repl [--platform P] [--devices 0-3] [--mode thread|process]
//	simpler test [-update] [-run regex] [paths...]
//	simpler doc [name]
//	simpler remote-l3-worker --listen HOST:PORT [--token-file F]
//	simpler bench [dispatch|process|collectives|remote|global]...
//	simpler platforms
//	simpler version
package main

import (
	"fmt"
	"io"
	"os"

	"simpler/bench"
)

// Version is the release of this build.
const Version = "0.1.0"

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Main runs the CLI with args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stdout, stderr)
	case childCommand:
		return cmdChild(args[1:], stderr)
	case "remote-l3-worker":
		return cmdRemote(args[1:], stdout, stderr)
	case sessionCommand:
		return cmdSession(args[1:], stderr)
	case bench.EchoCommand: // the peer of the benchmark's ping-pong
		if len(args) != 2 || bench.EchoPeer(args[1]) != nil {
			return 1
		}
		return 0
	case "bench":
		return cmdBench(args[1:], stdout, stderr)
	case "repl":
		return cmdRepl(args[1:], os.Stdin, stdout, stderr)
	case "test":
		return cmdTest(args[1:], stdout, stderr)
	case "doc":
		return cmdDoc(args[1:], stdout, stderr)
	case "platforms":
		return cmdPlatforms(stdout)
	case "version", "--version":
		fmt.Fprintf(stdout, "simpler %s\n", Version)
		return 0
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "simpler: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: simpler <command> [arguments]

commands:
  run [--platform P] [--devices 0-3] [--mode thread|process] [--trace trace.json] script.star [ARGS...]
            load script.star and call its main(ctx)
  repl [--platform P] [--devices 0-3] [--mode thread|process]
            an interactive Starlark shell with a ready Worker w
  test [-update] [-run regex] [paths...]
            run .star scripts and compare their output with NAME.golden
  remote-l3-worker --listen HOST:PORT [--token-file F]
            serve remote level-3 nodes to level-4 workers over TCP
  doc [name] print the builtins with their signatures
  bench     run the benchmarks against limits measured in the same run
  platforms print each platform's capabilities
  version   print the version
`)
}
