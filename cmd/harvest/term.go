package main

import (
	"strings"
	"unicode"
)

// What users and their tasks wrote (job names, dataset paths, commands,
// entry names, stderr) is printed to other people's terminals: admins
// list everybody's jobs. A terminal acts on control characters (an
// escape sequence can retitle the window, move the cursor, rewrite what
// was printed), so they are shown, never sent.

// printable keeps lines and tabs and shows any other control character
// (C0, DEL, C1) as '?'.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return '?'
		}
		return r
	}, s)
}

// oneLine makes s fit one line or table cell: control characters as
// spaces, at most n characters (an ellipsis ends a cut one; n <= 0: no
// limit).
func oneLine(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if r := []rune(s); n > 0 && len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
