package bench

import (
	"fmt"
	"io"
	"sync"
)

// The issue's table (issue 28): one row per figure a user's script gets,
// each with its target, printed at the end of `simpler bench` with met or
// MISSED. A part notes its rows as it measures them (noteRow); the table
// lists every row of the issue in the issue's order, and a row no part of
// this invocation measured says so.
//
// The collectives' rows are noted by colltable.go (windowTable) under the
// figure names collectiveRows lists, the same way the other parts note
// theirs; a row no part of this run measured prints as not measured.

// Row is one figure of the issue's table as this run measured it.
type Row struct {
	Figure string // one of issueRows' names
	Value  string // what was measured, with its unit and its reference
	Met    bool
}

// issueRow is a row of the issue's table: its figure and its target.
type issueRow struct {
	figure, target string
}

// The figure names, as noteRow takes them.
const (
	RowAllreduce2       = "4 KiB allreduce, best window algorithm, 2 ranks"
	RowAllreduce4       = "4 KiB allreduce, best window algorithm, 4 ranks"
	RowBusbw2           = "64 MiB allreduce busbw/memcpy, best window algorithm, 2 ranks"
	RowBusbw4           = "64 MiB allreduce busbw/memcpy, best window algorithm, 4 ranks"
	RowPod              = "1024-rank global allocate + 4 KiB ring, from a script"
	RowRemote           = "remote no-op task / loopback round trip"
	RowProcessMarginal  = "process-mode dispatch marginal"
	RowDispatchStarlark = "dispatch (thread, Starlark)"
)

// collectiveRows are the rows the collectives part notes (colltable.go).
var collectiveRows = []issueRow{
	{RowAllreduce2, "<= 10 x Open MPI"},
	{RowAllreduce4, "<= 2 x Open MPI"},
	{RowBusbw2, ">= 0.45"},
	{RowBusbw4, ">= 0.30"},
}

// pathRows are the rows the other parts note: pod, remote, process and
// dispatch.
var pathRows = []issueRow{
	{RowPod, "<= 2 s, <= 1 GiB RSS"},
	{RowRemote, "<= 3 x at p50, p99 <= 10 x p50"},
	{RowProcessMarginal, "<= 8 us"},
	{RowDispatchStarlark, "no regression beyond 10%"},
}

// noted holds the rows noted in this process, by figure.
var noted struct {
	sync.Mutex
	rows map[string]Row
}

// noteRow records a measured row of the issue's table; a later one for
// the same figure replaces it (a part run twice reports its last run).
func noteRow(r Row) {
	noted.Lock()
	defer noted.Unlock()
	if noted.rows == nil {
		noted.rows = map[string]Row{}
	}
	noted.rows[r.Figure] = r
}

// lookupRow is the row noted for figure, if any.
func lookupRow(figure string) (Row, bool) {
	noted.Lock()
	defer noted.Unlock()
	r, ok := noted.rows[figure]
	return r, ok
}

// Summary prints the issue's table: every row with its target, the value
// this run measured and met or MISSED; a row not measured in this run
// says which part measures it. It reports whether every measured row met
// its target.
func Summary(w io.Writer) bool {
	fmt.Fprintln(w, "issue 28: what a script gets, against the targets (this run)")
	fmt.Fprintf(w, "  %-62s %-32s %s\n", "figure", "target", "this run")
	ok := true
	printRows := func(rows []issueRow, part string) {
		for _, ir := range rows {
			r, measured := lookupRow(ir.figure)
			got := "not measured (simpler bench " + part + ")"
			if measured {
				got = metOrMissed(r.Met, r.Value)
				ok = ok && r.Met
			}
			fmt.Fprintf(w, "  %-62s %-32s %s\n", ir.figure, ir.target, got)
		}
	}
	printRows(collectiveRows, "collectives")
	for _, ir := range pathRows {
		printRows([]issueRow{ir}, partOf[ir.figure])
	}
	return ok
}

// partOf names the part that measures each of pathRows.
var partOf = map[string]string{
	RowPod:              "pod",
	RowRemote:           "remote",
	RowProcessMarginal:  "process",
	RowDispatchStarlark: "dispatch",
}
