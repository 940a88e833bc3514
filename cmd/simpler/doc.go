package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"simpler/starlib"
)

// cmdDoc prints the script reference from starlib's doc table: everything,
// or the entries matching one name ("Worker", "Worker.register",
// "register", "host_tensor").
func cmdDoc(args []string, stdout, stderr io.Writer) int {
	fs := flagSet("doc")
	if code, ok := parseFlags("doc", fs, args, nil, stdout, stderr); !ok {
		return code
	}
	args = fs.Args()
	switch {
	case len(args) > 1:
		return usageError(stderr, "doc", "one name at most, got %q", args)
	case len(args) == 0:
		for i, sec := range starlib.DocSections {
			if i > 0 {
				fmt.Fprintln(stdout)
			}
			title := sec
			if sec == "" {
				title = "Globals"
			}
			fmt.Fprintln(stdout, title)
			fmt.Fprintln(stdout, strings.Repeat("=", len(title)))
			printDocs(stdout, starlib.Section(sec))
		}
		return 0
	}
	found := starlib.LookupDoc(args[0])
	if len(found) == 0 {
		fmt.Fprintf(stderr, "simpler doc: no entry for %q\n", args[0])
		if near := nearDocs(args[0]); len(near) > 0 {
			fmt.Fprintf(stderr, "did you mean: %s\n", strings.Join(near, ", "))
		}
		return 1
	}
	printDocs(stdout, found)
	return 0
}

func printDocs(w io.Writer, docs []starlib.Doc) {
	for _, d := range docs {
		fmt.Fprintf(w, "%s\n    %s\n", d.Signature, d.Summary)
	}
}

// nearDocs lists entry names that contain name, ignoring case: those
// whose member part contains it first.
func nearDocs(name string) []string {
	low := strings.ToLower(name)
	var members, others []string
	for _, d := range starlib.Docs() {
		switch {
		case strings.Contains(strings.ToLower(d.Member()), low):
			members = append(members, d.Name)
		case strings.Contains(strings.ToLower(d.Name), low):
			others = append(others, d.Name)
		}
	}
	sort.Strings(members)
	sort.Strings(others)
	out := append(members, others...)
	if len(out) == 0 {
		out = closestDocs(name)
	}
	if len(out) > 12 {
		out = append(out[:12], "...")
	}
	return out
}

// closestDocs are the entries whose name, member name or call name
// ("w.register") is nearest to name, when one is near enough to be a
// typo of it (closest): "allreduec" finds collectives.allreduce.
func closestDocs(name string) []string {
	byKey := map[string][]string{}
	var keys []string
	for _, d := range starlib.Docs() {
		for _, k := range []string{d.Name, d.Member(), d.CallName()} {
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			if !slices.Contains(byKey[k], d.Name) {
				byKey[k] = append(byKey[k], d.Name)
			}
		}
	}
	near := closest(name, keys)
	if near == "" {
		return nil
	}
	return byKey[near]
}
