package starlib

import (
	"io"
	"regexp"
	"sort"
	"strings"
	"testing"

	starlarkjson "go.starlark.net/lib/json"
	starlarkmath "go.starlark.net/lib/math"
	"go.starlark.net/starlark"

	"simpler/hal/dtype"
	"simpler/starlib/array"
)

// surface returns, per doc section, the names the binding really has:
// the predeclared globals, and the AttrNames of a value of each type.
func surface(t *testing.T) map[string][]string {
	t.Helper()
	s := NewSession("a2a3sim", []int{0, 1}, "thread", nil, io.Discard, io.Discard)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	var globals []string
	for name := range s.loader.predecl {
		globals = append(globals, name)
	}
	arr, err := starlark.Call(&starlark.Thread{}, array.Module.Members["zeros"], starlark.Tuple{starlark.MakeInt(2)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	attrs := func(v starlark.Value) []string { return v.(starlark.HasAttrs).AttrNames() }
	keys := func(d starlark.StringDict) []string { return d.Keys() }
	return map[string][]string{
		"":                       globals,
		"ctx":                    attrs(s.ctx()),
		"Worker":                 attrs(&Worker{}),
		"CallableHandle":         attrs(&Handle{}),
		"RunHandle":              attrs(&RunHandle{}),
		"Orchestrator":           attrs(&Orchestrator{}),
		"TaskArgs":               attrs(&TaskArgs{}),
		"CallConfig":             attrs(&CallConfig{}),
		"Tensor":                 attrs(&Tensor{}),
		"HostBuffer":             attrs(&HostBuffer{}),
		"Buffer":                 attrs(&Buffer{}),
		"CommBufferSpec":         attrs(&BufferSpec{}),
		"CommDomainHandle":       attrs(&DomainHandle{}),
		"ChipDomainContext":      attrs(&ChipDomain{}),
		"GlobalCommDomainHandle": attrs(&GlobalDomain{}),
		"Chip":                   attrs(&Chip{}),
		"Comm":                   attrs(&Comm{}),
		"RemoteBufferHandle":     attrs(&RemoteBuffer{}),
		"RemoteTensorRef":        append(attrs(&RemoteTensorRef{}), attrs(s.loader.predecl["RemoteTensorRef"])...),
		"array":                  keys(array.Module.Members),
		"Array":                  attrs(arr),
		"DataType":               attrs(array.DTypeConst(dtype.Float32)),
		"assert":                 keys(assertModule.Members),
		"json":                   keys(starlarkjson.Module.Members),
		"math":                   keys(starlarkmath.Module.Members),
		"collectives":            collectivesExports(t),
	}
}

// collectivesExports are the names @simpler//collectives.star gives a
// script: its public top-level functions, and the fields of the struct
// collectives(w) returns (the last struct(...) of the file).
func collectivesExports(t *testing.T) []string {
	t.Helper()
	src, err := stdlib.ReadFile("stdlib/collectives.star")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^def ([a-z]\w*)\(`).FindAllStringSubmatch(string(src), -1) {
		if m[1] != "collectives" { // the section's heading documents it
			names = append(names, m[1])
		}
	}
	tail := string(src[strings.LastIndex(string(src), "return struct("):])
	for _, m := range regexp.MustCompile(`(?m)^\s+(\w+) = \w+,$`).FindAllStringSubmatch(tail, -1) {
		names = append(names, m[1])
	}
	if len(names) < 7 {
		t.Fatalf("found only %q in collectives.star", names)
	}
	return names
}

// TestDocsCoverTheBinding fails when a global or an attribute of a
// documented type has no doc entry, or when an entry names something the
// binding no longer has: the reference cannot drift from the code.
func TestDocsCoverTheBinding(t *testing.T) {
	real := surface(t)
	if len(real) != len(DocSections) {
		t.Errorf("surface covers %d sections, DocSections has %d: keep them in step", len(real), len(DocSections))
	}
	for _, sec := range DocSections {
		names, ok := real[sec]
		if !ok {
			t.Errorf("section %q has no values to check in this test", sec)
			continue
		}
		documented := map[string]bool{}
		for _, d := range Section(sec) {
			if sec == "" {
				documented[d.Name] = true
			} else if d.Kind == DocMember {
				documented[d.Member()] = true
			}
		}
		have := map[string]bool{}
		for _, n := range names {
			have[n] = true
			if !documented[n] {
				t.Errorf("%s has no doc entry: add it to docTable in starlib/doc.go", qualified(sec, n))
			}
		}
		var stale []string
		for n := range documented {
			if !have[n] {
				stale = append(stale, qualified(sec, n))
			}
		}
		sort.Strings(stale)
		for _, n := range stale {
			t.Errorf("doc entry %s names nothing the binding has", n)
		}
	}
}

func qualified(sec, name string) string {
	if sec == "" {
		return name
	}
	return sec + "." + name
}

func TestDocEntriesAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	sections := map[string]bool{}
	for _, s := range DocSections {
		sections[s] = true
	}
	for _, d := range docTable {
		if seen[d.Name] {
			t.Errorf("%s: documented twice", d.Name)
		}
		seen[d.Name] = true
		if d.Signature == "" || d.Summary == "" {
			t.Errorf("%s: empty signature or summary", d.Name)
		}
		if strings.Contains(d.Summary, "\n") {
			t.Errorf("%s: the summary must be one line", d.Name)
		}
		if d.Kind == DocMember && !sections[d.Owner()] {
			t.Errorf("%s: owner %q is not in DocSections", d.Name, d.Owner())
		}
	}
	for _, sec := range DocSections[1:] {
		s := Section(sec)
		if len(s) == 0 || s[0].Kind == DocMember || s[0].Name != sec {
			t.Errorf("section %q has no heading entry", sec)
		}
	}
	if got := len(Docs()); got != len(docTable) {
		t.Errorf("Docs() returns %d entries of %d: some entry belongs to no section", got, len(docTable))
	}
}

func TestLookupDoc(t *testing.T) {
	names := func(ds []Doc) string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Name)
		}
		return strings.Join(out, " ")
	}
	if got := names(LookupDoc("Worker.register")); got != "Worker.register" {
		t.Errorf("exact lookup: %q", got)
	}
	got := LookupDoc("Worker")
	if len(got) < 10 || got[0].Name != "Worker" || got[0].Kind != DocGlobal {
		t.Errorf("section lookup: %q", names(got))
	}
	if got := names(LookupDoc("malloc")); got != "Worker.malloc Orchestrator.malloc" {
		t.Errorf("member lookup: %q", got)
	}
	for name, want := range map[string]string{
		"w.register":           "Worker.register",
		"o.submit_next_level":  "Orchestrator.submit_next_level",
		"allreduce":            "collectives.allreduce",
		"c.allreduce":          "collectives.allreduce",
		"global_collectives":   "collectives.global_collectives",
		"CallConfig.timeout_s": "CallConfig.timeout_s",
		"json.encode":          "json.encode",
		"fmt":                  "fmt",
	} {
		if got := names(LookupDoc(name)); got != want {
			t.Errorf("LookupDoc(%q) = %q, want %q", name, got, want)
		}
	}
	if got := LookupDoc("collectives"); len(got) != 8 || got[0].Name != "collectives" {
		t.Errorf("collectives section: %q", names(got))
	}
	if got := LookupDoc("CallConfig"); !strings.Contains(got[0].Signature, "timeout_s=None") {
		t.Errorf("CallConfig's signature lacks timeout_s: %q", got[0].Signature)
	}
	if got := LookupDoc("no_such_thing"); len(got) != 0 {
		t.Errorf("unknown name: %q", names(got))
	}
}
