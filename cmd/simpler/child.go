package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"simpler/engine"
	"simpler/engine/proc"
	"simpler/starlib"
)

// childCommand is the hidden subcommand a chip or SUB worker process runs.
const childCommand = "__child"

func cmdChild(args []string, stderr io.Writer) int {
	// A terminal's Ctrl-C (or hangup) reaches the whole foreground process
	// group, this child too; the parent decides what it means (cancel the
	// runs, then close), and a child that died of it would turn a clean
	// cancel into a crash. The child still ends with its parent.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP)
	if len(args) != 1 {
		fmt.Fprintf(stderr, "simpler %s: internal: want a mailbox name\n", childCommand)
		return 2
	}
	if err := proc.RunChild(args[0], starlib.NewResolver); err != nil {
		fmt.Fprintf(stderr, "simpler child: %v\n", err)
		return 1
	}
	return 0
}

// launcher says how this binary starts its child processes.
func launcher() *engine.Launcher {
	path, err := os.Executable()
	if err != nil {
		return nil
	}
	return &engine.Launcher{Path: path, Args: []string{childCommand}}
}
