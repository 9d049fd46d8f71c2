package triage

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The placeholders Normalize writes in place of what varies between runs.
const (
	TmpMask  = "<tmp>"
	HexMask  = "<hex>"
	DurMask  = "<dur>"
	NumMask  = "<n>"
	TimeMask = "<time>"
	// DirMask stands for the directories of an absolute path outside the
	// temporary directories: two checkouts of the same code print the same
	// file from different places.
	DirMask = ".../"
)

var (
	ansiRE = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)
	// timeRE matches RFC 3339 timestamps and times of day, before numbers
	// are masked one by one ("T15" would otherwise survive as a word). The
	// hour may have one digit, as clocks that do not pad it write it: 9:59:59
	// and 10:00:00 mask alike.
	timeRE  = regexp.MustCompile(`\b(?:\d{4}-\d{2}-\d{2}[T ])?\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\b`)
	hex0xRE = regexp.MustCompile(`\b0[xX][0-9a-fA-F]+\b`)
	uuidRE  = regexp.MustCompile(`\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b`)
	// hexRunRE matches long runs of hex digits: commit hashes, addresses
	// without 0x, random names. Only runs with both a digit and a letter are
	// masked (see isHexRun), so long decimal numbers stay numbers and words
	// spelled in a–f stay words.
	hexRunRE = regexp.MustCompile(`\b[0-9a-fA-F]{8,}\b`)
	// durRE matches Go-style durations: 1.23s, 15ms, 200µs, 3m2s, 1h0m0s.
	// The longer units come first so that "ms" is not read as "m".
	durRE   = regexp.MustCompile(`\d+(?:\.\d+)?(?:ns|us|µs|μs|ms|s|m|h)(?:\d+(?:\.\d+)?(?:ns|us|µs|μs|ms|s|m|h))*`)
	spaceRE = regexp.MustCompile(`\s+`)
)

// tempPrefixes are the directories whose paths Normalize masks whole, the
// longest first so that /private/tmp is matched before /tmp would be. They
// include the temporary directory of this process (os.TempDir), which is
// where private per-copy directories of Stress are made.
var tempPrefixes = func() []string {
	ps := []string{"/tmp", "/var/tmp", "/private/tmp", "/var/folders", "/private/var/folders", "/dev/shm", "$TMPDIR", "${TMPDIR}"}
	if d := filepath.Clean(os.TempDir()); filepath.IsAbs(d) && d != string(filepath.Separator) && !slices.Contains(ps, d) {
		ps = append(ps, d)
	}
	slices.SortStableFunc(ps, func(a, b string) int { return len(b) - len(a) })
	return ps
}()

// Normalize masks what varies between two runs of the same failure, so
// that equal failures give equal strings and different ones do not:
//
//   - ANSI colour codes are removed;
//   - a path under a temporary directory (/tmp, /var/folders, $TMPDIR,
//     this process's os.TempDir…) becomes <tmp>, the whole path token;
//   - any other absolute path keeps only its base name, behind .../;
//   - timestamps and times of day become <time>;
//   - hex numbers (0x1f3a), UUIDs and long hex runs with a digit and a
//     letter (commit hashes, addresses) become <hex>;
//   - durations (1.23s, 15ms, 200µs, 3m2s) become <dur>;
//   - decimal numbers not glued to a preceding letter become <n>: "got 4",
//     "[5]", "tok_0", "file.go:123" are masked, "int64" and "sha256" are
//     not. Line numbers are masked on purpose: a variant that edits a file
//     must still pair its failure modes with the other variant's;
//   - runs of white space become one space, and the ends are trimmed.
//
// Each step's placeholder contains nothing a later step masks.
func Normalize(line string) string {
	s := ansiRE.ReplaceAllString(line, "")
	s = maskPaths(s)
	s = timeRE.ReplaceAllString(s, TimeMask)
	s = hex0xRE.ReplaceAllString(s, HexMask)
	s = uuidRE.ReplaceAllString(s, HexMask)
	s = hexRunRE.ReplaceAllStringFunc(s, func(m string) string {
		if isHexRun(m) {
			return HexMask
		}
		return m
	})
	s = maskDurations(s)
	s = maskNumbers(s)
	return strings.TrimSpace(spaceRE.ReplaceAllString(s, " "))
}

// isHexRun reports whether a run of hex digits has both a decimal digit
// and a letter.
func isHexRun(m string) bool {
	return strings.ContainsAny(m, "0123456789") && strings.ContainsAny(m, "abcdefABCDEF")
}

// isPathDelim reports whether r ends a path token.
func isPathDelim(r rune) bool {
	return unicode.IsSpace(r) || strings.ContainsRune("\"'`,;:()[]<>|*?=", r)
}

// isPathChar reports whether r may sit just before a path inside a token,
// in which case what follows is not the start of an absolute path.
func isPathChar(r rune) bool {
	return r == '/' || r == '.' || r == '_' || r == '-' || r == '~' || r == '$' || r == '\\' ||
		unicode.IsLetter(r) || unicode.IsDigit(r)
}

// maskPaths replaces temporary paths by TmpMask and shortens other
// absolute paths to DirMask plus their base name.
func maskPaths(s string) string {
	var b strings.Builder
	prev := rune(-1)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == '/' || r == '$') && (prev < 0 || !isPathChar(prev)) {
			end := i + strings.IndexFunc(s[i:]+" ", isPathDelim)
			tok := strings.TrimRight(s[i:end], ".")
			if tok == "" {
				tok = s[i:end]
			}
			if out, ok := maskPath(tok); ok {
				b.WriteString(out)
				i += len(tok)
				prev = 'x'
				continue
			}
		}
		b.WriteRune(r)
		prev = r
		i += size
	}
	return b.String()
}

// maskPath masks one path token, or reports false when it is none.
func maskPath(tok string) (string, bool) {
	for _, p := range tempPrefixes {
		if rest, ok := strings.CutPrefix(tok, p); ok && (rest == "" || rest[0] == '/') {
			return TmpMask, true
		}
	}
	if !strings.HasPrefix(tok, "/") || strings.HasPrefix(tok, "//") {
		return "", false
	}
	i := strings.LastIndexByte(tok, '/')
	if i == 0 || i == len(tok)-1 {
		return "", false // "/proc" or "/a/b/": nothing to shorten to
	}
	return DirMask + tok[i+1:], true
}

// maskDurations replaces durations that are whole words.
func maskDurations(s string) string {
	locs := durRE.FindAllStringIndex(s, -1)
	if locs == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for _, loc := range locs {
		if wordRuneBefore(s, loc[0]) || wordRuneAfter(s, loc[1]) {
			continue
		}
		b.WriteString(s[last:loc[0]])
		b.WriteString(DurMask)
		last = loc[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

func wordRuneBefore(s string, i int) bool {
	if i == 0 {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.'
}

func wordRuneAfter(s string, i int) bool {
	if i == len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return unicode.IsLetter(r) || unicode.IsDigit(r)
}

// maskNumbers replaces decimal numbers (with an optional fraction,
// exponent, and a minus sign that is not a hyphen) unless a letter is glued
// before them, as in "int64".
func maskNumbers(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		if !isDigit(s[i]) {
			out = append(out, s[i])
			i++
			continue
		}
		j := i
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		prev, _ := utf8.DecodeLastRuneInString(s[:i])
		if i > 0 && unicode.IsLetter(prev) {
			out = append(out, s[i:j]...) // part of a word: int64, sha256, r1c3
			i = j
			continue
		}
		if j+1 < len(s) && s[j] == '.' && isDigit(s[j+1]) {
			for j++; j < len(s) && isDigit(s[j]); j++ {
			}
		}
		if j+1 < len(s) && (s[j] == 'e' || s[j] == 'E') {
			k := j + 1
			if s[k] == '+' || s[k] == '-' {
				k++
			}
			if k < len(s) && isDigit(s[k]) {
				for j = k; j < len(s) && isDigit(s[j]); j++ {
				}
			}
		}
		// A minus sign after a space or punctuation is a sign, folded into
		// the mask; after a word it is a hyphen, as in "x-1", and stays.
		if prev == '-' {
			before, _ := utf8.DecodeLastRuneInString(s[:i-1])
			if i == 1 || !(unicode.IsLetter(before) || unicode.IsDigit(before) || before == '_') {
				out = out[:len(out)-1]
			}
		}
		out = append(out, NumMask...)
		i = j
	}
	return string(out)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
