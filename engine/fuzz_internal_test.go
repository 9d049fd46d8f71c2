package engine

import (
	"strings"
	"testing"

	"github.com/llmdst/llmdst/core"
)

// FuzzDetokenizer feeds tokens, one frame at a time, and stop strings to the
// incremental detokenizer, and checks what any output kind would show: the
// text never contains a stop string that ends past the first MinTokens
// tokens, Delta texts concatenate to the final text, the final text is the
// decoded tokens cut at the first such stop string, and nothing panics.
// perFrame's low two bits give the tokens a frame, the next three MinTokens.
func FuzzDetokenizer(f *testing.F) {
	f.Add([]byte{3, 9, 27, 81, 4}, " the", "", uint8(1))
	f.Add([]byte{1, 2, 3, 4, 5, 6}, "of an", "d", uint8(2))
	f.Add([]byte{200, 201, 202}, "x", "yy", uint8(0))
	f.Fuzz(func(t *testing.T, raw []byte, stop1, stop2 string, perFrame uint8) {
		var stops []string
		for _, s := range []string{stop1, stop2} {
			if s != "" {
				stops = append(stops, s)
			}
		}
		tokens := make([]int, len(raw))
		for i, b := range raw {
			tokens[i] = int(b) % core.VocabSize
		}
		n := int(perFrame%4) + 1
		minTokens := int(perFrame/4) % 8
		delta := newDetokenizer(stops, minTokens, Delta, false)
		cum := newDetokenizer(stops, minTokens, Cumulative, false)
		// A stop string counts only where it ends past the text of the
		// first minTokens tokens.
		guard := len(core.Tokenizer{}.Decode(tokens[:min(minTokens, len(tokens))]))
		counted := func(text, s string) bool {
			from := max(0, guard-len(s)+1)
			return from < len(text) && strings.Contains(text[from:], s)
		}
		var deltas strings.Builder
		var last string
		hit := false
		for i := 0; i < len(tokens) && !hit; i += n {
			frame := tokens[i:min(i+n, len(tokens))]
			s1, took1, hit1 := delta.update(frame)
			s2, took2, hit2 := cum.update(frame)
			if hit1 != hit2 || s1 != s2 || took1 != took2 {
				t.Fatalf("Delta and Cumulative disagree on the stop: %q %v after %d token(s) / %q %v after %d", s1, hit1, took1, s2, hit2, took2)
			}
			hit = hit1
			deltas.WriteString(delta.next(hit, true))
			last = cum.next(hit, false)
			if hit {
				// The frame's tokens up to the took-th complete the stop
				// string, which starts where the text was cut; one fewer
				// do not.
				end := len(last) + len(s1)
				if got := len(core.Tokenizer{}.Decode(tokens[:i+took1])); got < end {
					t.Fatalf("the stop string %q ends at byte %d, past the %d token(s) of the frame said to complete it (%d bytes)", s1, end, took1, got)
				}
				if got := len(core.Tokenizer{}.Decode(tokens[:i+took1-1])); took1 > 1 && got >= end {
					t.Fatalf("the stop string %q ends at byte %d, within %d token(s) of the frame (%d bytes), not %d", s1, end, took1-1, got, took1)
				}
			}
		}
		if !hit {
			deltas.WriteString(delta.next(true, true))
			last = cum.next(true, false)
		}
		if deltas.String() != last {
			t.Fatalf("deltas %q do not concatenate to the final text %q", deltas.String(), last)
		}
		for _, s := range stops {
			if hit && counted(last, s) {
				t.Fatalf("the final text %q still contains the stop string %q past MinTokens %d", last, s, minTokens)
			}
		}
		full := core.Tokenizer{}.Decode(tokens)
		if !strings.HasPrefix(full, last) {
			t.Fatalf("the text %q is not a prefix of the decoded tokens %q", last, full)
		}
		if !hit && len(stops) > 0 {
			for _, s := range stops {
				if counted(full, s) {
					t.Fatalf("%q contains the stop string %q past MinTokens %d, but no stop was found", full, s, minTokens)
				}
			}
		}
	})
}
