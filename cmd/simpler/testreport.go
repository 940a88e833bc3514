package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"simpler/golden"
)

// testReporter prints what `simpler test` found, as text or (-json) as one
// JSON event per line, and keeps each outcome for a JUnit report
// (--junit). Outcomes come to it in the order of the jobs.
type testReporter struct {
	w         io.Writer
	json      bool
	verbose   bool
	withMode  bool   // several modes: a script's name says which
	junitPath string // "" when no JUnit report was asked for
	paint     painter
	start     time.Time
	outcomes  []golden.Outcome
}

func newTestReporter(opts *testOptions, w io.Writer) *testReporter {
	r := &testReporter{
		w:         w,
		json:      opts.json,
		verbose:   opts.verbose,
		withMode:  len(opts.modes) > 1,
		junitPath: opts.junit,
		start:     time.Now(),
	}
	if !r.json {
		r.paint = newPainter(w)
	}
	return r
}

// testEvent is one line of `simpler test -json`, in the spirit of
// `go test -json`: Action is "run" when a script's report starts,
// "output" for one line of its text report, then "pass", "fail" or "skip"
// (a script -failfast did not start). The last event has no Script: its
// Action is the verdict of the whole run, with the counts.
type testEvent struct {
	Time    time.Time
	Action  string
	Script  string   `json:",omitempty"`
	Mode    string   `json:",omitempty"`
	Elapsed *float64 `json:",omitempty"` // seconds, on pass, fail and skip
	Output  string   `json:",omitempty"`
	Passed  *int     `json:",omitempty"` // the last event's counts
	Failed  *int     `json:",omitempty"`
	Skipped *int     `json:",omitempty"`
}

func (r *testReporter) event(e testEvent) {
	e.Time = time.Now()
	line, err := json.Marshal(e)
	if err != nil { // a struct of strings and numbers always marshals
		panic(err)
	}
	r.w.Write(append(line, '\n'))
}

// outcome reports one job's outcome as it arrives.
func (r *testReporter) outcome(o golden.Outcome) {
	r.outcomes = append(r.outcomes, o)
	if !r.json {
		reportOutcome(r.w, r.paint, o, r.verbose, r.withMode)
		return
	}
	var text bytes.Buffer
	reportOutcome(&text, painter{}, o, true, r.withMode)
	r.event(testEvent{Action: "run", Script: o.Script, Mode: o.Mode})
	for _, line := range strings.SplitAfter(text.String(), "\n") {
		if line != "" {
			r.event(testEvent{Action: "output", Script: o.Script, Mode: o.Mode, Output: line})
		}
	}
	secs := o.Elapsed.Seconds()
	r.event(testEvent{Action: verdict(o), Script: o.Script, Mode: o.Mode, Elapsed: &secs})
}

// verdict is an outcome's action: pass, fail or skip.
func verdict(o golden.Outcome) string {
	switch {
	case o.NotRun:
		return "skip"
	case o.Passed:
		return "pass"
	}
	return "fail"
}

// finish prints the last line, "N passed, M failed", or with -json the
// same line as output and the run's verdict with its counts.
func (r *testReporter) finish(passed, failed int) {
	summary := fmt.Sprintf("%d passed, %d failed\n", passed, failed)
	if !r.json {
		fmt.Fprint(r.w, summary)
		return
	}
	skipped := len(r.outcomes) - passed - failed
	action := "pass"
	if failed > 0 || len(r.outcomes) == 0 {
		action = "fail"
	}
	secs := time.Since(r.start).Seconds()
	r.event(testEvent{Action: "output", Output: summary})
	r.event(testEvent{Action: action, Elapsed: &secs, Passed: &passed, Failed: &failed, Skipped: &skipped})
}

// The JUnit XML report: one testsuite, one testcase per job.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Errors    int         `xml:"errors,attr"`
	Skipped   int         `xml:"skipped,attr"`
	Time      string      `xml:"time,attr"`
	Timestamp string      `xml:"timestamp,attr"`
	Cases     []junitCase `xml:"testcase"`
}

type junitCase struct {
	Classname string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// junit builds the report of the outcomes so far.
func (r *testReporter) junit() junitSuites {
	suite := junitSuite{
		Name:      "simpler test",
		Time:      seconds(time.Since(r.start)),
		Timestamp: r.start.UTC().Format(time.RFC3339),
	}
	for _, o := range r.outcomes {
		c := junitCase{Classname: filepath.Dir(o.Script), Name: filepath.Base(o.Script), Time: seconds(o.Elapsed)}
		if r.withMode {
			c.Name += " [" + o.Mode + "]"
		}
		switch verdict(o) {
		case "skip":
			c.Skipped = &junitMessage{Message: o.Problem}
			suite.Skipped++
		case "fail":
			msg := o.Problem
			if msg == "" {
				msg = "the output differs from " + golden.GoldenPath(o.Script)
			}
			c.Failure = &junitMessage{Message: msg, Text: o.Diff + o.Got}
			suite.Failures++
		}
		suite.Cases = append(suite.Cases, c)
	}
	suite.Tests = len(suite.Cases)
	return junitSuites{Tests: suite.Tests, Failures: suite.Failures, Skipped: suite.Skipped, Time: suite.Time, Suites: []junitSuite{suite}}
}

// writeJUnit writes the JUnit report to its file, when one was asked for.
func (r *testReporter) writeJUnit() error {
	if r.junitPath == "" {
		return nil
	}
	body, err := xml.MarshalIndent(r.junit(), "", "  ")
	if err != nil {
		return err
	}
	doc := append([]byte(xml.Header), append(body, '\n')...)
	if err := os.WriteFile(r.junitPath, doc, 0o644); err != nil {
		return fmt.Errorf("--junit: %v", err)
	}
	return nil
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// indent puts prefix before every line of s.
func indent(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(s, "\n") {
		if line != "" {
			b.WriteString(prefix + strings.TrimSuffix(line, "\n") + "\n")
		}
	}
	return b.String()
}
