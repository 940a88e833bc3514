package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// cmdCompletion prints a shell completion script made from the commands
// table: the command names, each command's flags, and file names where
// a command takes paths. `source <(simpler completion bash)`, or for zsh
// `source <(simpler completion zsh)`.
func cmdCompletion(args []string, stdout, stderr io.Writer) int {
	fs := flagSet("completion")
	if code, ok := parseFlags("completion", fs, args, nil, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() != 1 {
		return usageError(stderr, "completion", "want one shell, bash or zsh, got %q", fs.Args())
	}
	switch fs.Arg(0) {
	case "bash":
		fmt.Fprint(stdout, bashCompletion())
	case "zsh":
		fmt.Fprint(stdout, zshCompletion())
	default:
		return usageError(stderr, "completion", "unknown shell %q (want bash or zsh)", fs.Arg(0))
	}
	return 0
}

// commandFlags are the flags of command c, "--name" each, sorted.
func commandFlags(c command) []string {
	if c.flags == nil {
		return nil
	}
	fs := flagSet(c.name)
	c.flags(fs)
	var out []string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, "--"+f.Name) })
	sort.Strings(out)
	return out
}

// bashCompletion completes the command in the first word, then that
// command's flags for a word starting with a dash, and file names (or
// for help and doc, command and entry names) otherwise.
func bashCompletion() string {
	var b strings.Builder
	b.WriteString("# bash completion for simpler; load it with: source <(simpler completion bash)\n")
	b.WriteString("_simpler() {\n")
	b.WriteString("    local cur=\"${COMP_WORDS[COMP_CWORD]}\"\n")
	b.WriteString("    if [ \"$COMP_CWORD\" -eq 1 ]; then\n")
	fmt.Fprintf(&b, "        COMPREPLY=($(compgen -W %q -- \"$cur\"))\n", strings.Join(commandNames(), " "))
	b.WriteString("        return\n    fi\n")
	b.WriteString("    local flags=\"\"\n")
	b.WriteString("    case \"${COMP_WORDS[1]}\" in\n")
	for _, c := range commands {
		if fl := commandFlags(c); len(fl) > 0 {
			fmt.Fprintf(&b, "    %s) flags=%q ;;\n", c.name, strings.Join(fl, " "))
		}
	}
	fmt.Fprintf(&b, "    help) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", strings.Join(commandNames(), " "))
	b.WriteString("    completion) COMPREPLY=($(compgen -W \"bash zsh\" -- \"$cur\")); return ;;\n")
	b.WriteString("    esac\n")
	b.WriteString("    if [[ \"$cur\" == -* ]]; then\n")
	b.WriteString("        COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\"))\n")
	b.WriteString("    else\n")
	b.WriteString("        COMPREPLY=($(compgen -f -- \"$cur\"))\n")
	b.WriteString("    fi\n")
	b.WriteString("}\n")
	b.WriteString("complete -o filenames -F _simpler simpler\n")
	return b.String()
}

// zshCompletion is the same completion for zsh, through _arguments.
func zshCompletion() string {
	var b strings.Builder
	b.WriteString("#compdef simpler\n# zsh completion for simpler; load it with: source <(simpler completion zsh)\n")
	b.WriteString("_simpler() {\n")
	b.WriteString("    if (( CURRENT == 2 )); then\n")
	fmt.Fprintf(&b, "        compadd -- %s\n", strings.Join(commandNames(), " "))
	b.WriteString("        return\n    fi\n")
	b.WriteString("    case \"${words[2]}\" in\n")
	for _, c := range commands {
		if fl := commandFlags(c); len(fl) > 0 {
			fmt.Fprintf(&b, "    %s)\n        if [[ \"${words[CURRENT]}\" == -* ]]; then compadd -- %s; else _files; fi ;;\n", c.name, strings.Join(fl, " "))
		}
	}
	fmt.Fprintf(&b, "    help) compadd -- %s ;;\n", strings.Join(commandNames(), " "))
	b.WriteString("    completion) compadd -- bash zsh ;;\n")
	b.WriteString("    *) _files ;;\n")
	b.WriteString("    esac\n")
	b.WriteString("}\n")
	b.WriteString("if [[ \"$funcstack[1]\" == \"_simpler\" ]]; then _simpler \"$@\"; else compdef _simpler simpler; fi\n")
	return b.String()
}
