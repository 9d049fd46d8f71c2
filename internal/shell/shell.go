// Package shell quotes words for a POSIX shell, for the commands the tools
// print for a person to paste: run this seed again, replay this schedule.
package shell

import "strings"

// Quote quotes s for a POSIX shell, leaving a word the shell takes
// literally alone.
func Quote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@%+,µ", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Join joins argv into a command line a POSIX shell splits back into argv.
func Join(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = Quote(a)
	}
	return strings.Join(q, " ")
}
