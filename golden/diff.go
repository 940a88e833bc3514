package golden

import (
	"fmt"
	"strings"
)

// contextLines is how many unchanged lines a diff shows around a change.
const contextLines = 3

// maxCells bounds the LCS table; bigger inputs get a coarser diff.
const maxCells = 4 << 20

// Diff returns a unified diff turning want into got, or "" if they are
// equal. Lines that differ only by a missing final newline are shown
// with a "\ No newline at end of file" marker.
func Diff(wantName, gotName, want, got string) string {
	if want == got {
		return ""
	}
	a, b := splitLines(want), splitLines(got)
	ops := editScript(a, b)
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", wantName, gotName)
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		// A hunk: from `contextLines` lines before this change to `contextLines`
		// lines after the last change that is at most 2*contextLines lines
		// further on.
		start := i - contextLines
		if start < 0 {
			start = 0
		}
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].kind != ' ' {
				end = j + 1
				continue
			}
			if j-end >= 2*contextLines {
				break
			}
		}
		stop := end + contextLines
		if stop > len(ops) {
			stop = len(ops)
		}
		aStart, bStart, aLen, bLen := ops[start].a, ops[start].b, 0, 0
		for _, op := range ops[start:stop] {
			if op.kind != '+' {
				aLen++
			}
			if op.kind != '-' {
				bLen++
			}
		}
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", span(aStart, aLen), span(bStart, bLen))
		for _, op := range ops[start:stop] {
			line := op.text
			sb.WriteByte(op.kind)
			sb.WriteString(strings.TrimSuffix(line, "\n"))
			sb.WriteByte('\n')
			if !strings.HasSuffix(line, "\n") {
				sb.WriteString("\\ No newline at end of file\n")
			}
		}
		i = stop
	}
	return sb.String()
}

// span formats a hunk range the way diff -u does (1-based; an empty
// range names the line before it).
func span(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// splitLines splits s after each newline, keeping them.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

type edit struct {
	kind byte // ' ', '-' or '+'
	text string
	a, b int // line index in want and got where this op applies
}

// editScript is the shortest edit from a to b by longest common
// subsequence, after trimming the common prefix and suffix.
func editScript(a, b []string) []edit {
	var ops []edit
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		ops = append(ops, edit{' ', a[pre], pre, pre})
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	n, m := len(ma), len(mb)
	if (n+1)*(m+1) > maxCells {
		// Too big for the table: everything in the middle differs.
		for i, l := range ma {
			ops = append(ops, edit{'-', l, pre + i, pre})
		}
		for j, l := range mb {
			ops = append(ops, edit{'+', l, pre + n, pre + j})
		}
	} else {
		// lcs[i][j] is the LCS length of ma[i:] and mb[j:].
		lcs := make([][]int32, n+1)
		for i := range lcs {
			lcs[i] = make([]int32, m+1)
		}
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if ma[i] == mb[j] {
					lcs[i][j] = lcs[i+1][j+1] + 1
				} else {
					lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
				}
			}
		}
		i, j := 0, 0
		for i < n || j < m {
			switch {
			case i < n && j < m && ma[i] == mb[j]:
				ops = append(ops, edit{' ', ma[i], pre + i, pre + j})
				i++
				j++
			case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
				ops = append(ops, edit{'-', ma[i], pre + i, pre + j})
				i++
			default:
				ops = append(ops, edit{'+', mb[j], pre + i, pre + j})
				j++
			}
		}
	}
	for k := 0; k < suf; k++ {
		ia, ib := len(a)-suf+k, len(b)-suf+k
		ops = append(ops, edit{' ', a[ia], ia, ib})
	}
	return ops
}
