package dsched

import "fmt"

// Diverge compares the decisions of two runs of one program and seed
// (Options.Trace's) and says where they first differ: the step (from 1)
// and a sentence naming both decisions, for `--check-replay` to print.
// It returns 0 and "" when the runs agree.
func Diverge(first, second []Decision) (step int, why string) {
	for i := 0; i < len(first) && i < len(second); i++ {
		if first[i] != second[i] {
			return i + 1, fmt.Sprintf("step %d: the first run %s; the second %s",
				i+1, describe(first[i]), describe(second[i]))
		}
	}
	switch {
	case len(first) > len(second):
		return len(second) + 1, fmt.Sprintf("step %d: the second run had ended; the first %s",
			len(second)+1, describe(first[len(second)]))
	case len(second) > len(first):
		return len(first) + 1, fmt.Sprintf("step %d: the first run had ended; the second %s",
			len(first)+1, describe(second[len(first)]))
	}
	return 0, ""
}

func describe(d Decision) string {
	return fmt.Sprintf("ran %s (proc %d) after %s (proc %d) reached %q at %v",
		d.ToName, d.To, d.FromName, d.From, d.Point, d.Now)
}
