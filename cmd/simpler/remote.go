package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"simpler/engine"
	"simpler/hal/shm"
	"simpler/starlib"
)

// sessionCommand is the hidden subcommand that serves one remote session;
// the daemon passes it the connection as file descriptor 3.
const sessionCommand = "__session"

// cmdRemote is `simpler remote-l3-worker --listen HOST:PORT [--token-file F]`.
func cmdRemote(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("remote-l3-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:7700", "address to serve on (port 0 picks a free one)")
	tokenFile := fs.String("token-file", "", "file holding the shared token parents must prove (required off loopback)")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return 2
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		fmt.Fprintf(stderr, "simpler remote-l3-worker: --listen %q is not host:port\n", *listen)
		return 2
	}
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && host != "localhost" && *tokenFile == "" {
		fmt.Fprintf(stderr, "simpler remote-l3-worker: listening on %s (not loopback) needs --token-file\n", host)
		return 2
	}
	sessionArgs := []string{sessionCommand}
	if *tokenFile != "" {
		if _, err := readToken(*tokenFile); err != nil {
			fmt.Fprintf(stderr, "simpler remote-l3-worker: %v\n", err)
			return 2
		}
		sessionArgs = append(sessionArgs, *tokenFile)
	}
	shm.SweepDead()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "simpler remote-l3-worker: %v\n", err)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "simpler remote-l3-worker: %v\n", err)
		return 1
	}
	d := engine.NewDaemon(ln, &engine.Launcher{Path: exe, Args: sessionArgs, Stdout: stdout, Stderr: stderr}, stderr)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		<-sig
		d.Close()
	}()
	// Tests and scripts wait for this line: the daemon is ready.
	fmt.Fprintf(stdout, "simpler remote-l3-worker: listening on %s\n", ln.Addr())
	if f, ok := stdout.(interface{ Sync() error }); ok {
		f.Sync()
	}
	err = d.Serve()
	d.Close()
	if err != nil {
		fmt.Fprintf(stderr, "simpler remote-l3-worker: %v\n", err)
		return 1
	}
	return 0
}

func readToken(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	tok := strings.TrimSpace(line)
	if tok == "" {
		return nil, fmt.Errorf("token file %s is empty", path)
	}
	return []byte(tok), nil
}

// cmdSession serves one session (started by the daemon).
func cmdSession(args []string, stderr io.Writer) int {
	var token []byte
	if len(args) == 1 {
		t, err := readToken(args[0])
		if err != nil {
			fmt.Fprintf(stderr, "simpler session: %v\n", err)
			return 1
		}
		token = t
	}
	if err := engine.ServeSessionFD(token, starlib.NewSourceResolver); err != nil {
		fmt.Fprintf(stderr, "simpler session: %v\n", err)
		return 1
	}
	return 0
}
