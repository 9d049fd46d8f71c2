package engine

import (
	"strings"
	"unicode/utf8"

	"github.com/llmdst/llmdst/core"
)

// detokenizer turns a request's tokens into text incrementally and finds
// stop strings in it, as vLLM's IncrementalDetokenizer does: a stop string
// is searched only where the new text could complete one, the text is cut
// before it, and while the request runs the last len(longest stop)−1
// characters are held back, since they could still become a stop string
// (characters, as vLLM counts them with Python's len, not bytes: a stop
// string "é" holds nothing back).
// The stop string found is the one a request decoded token by token finds,
// however its tokens come in steps (several a step, with speculative
// decoding): the first token that completes any decides, and of those it
// completes the earliest in the text wins (vLLM takes the first in its
// list, which can leave an earlier stop string in the text: the output
// would then show a stop string; and it searches a step's text as a whole,
// so that what it finds depends on how the tokens were grouped). As in
// vLLM, no stop string is looked for until the request has more than
// MinTokens tokens, and then only one that ends in the text after them.
type detokenizer struct {
	tok       core.Tokenizer
	stops     []string
	minTokens int
	decoded   int    // tokens decoded so far
	holdback  int    // characters of the text held back while the request runs
	keep      bool   // keep the text: some output needs more than the newest pieces
	text      []byte // everything decoded so far, cut before a stop string
	emitted   int    // bytes of text handed out in Delta outputs
	pending   string // Delta without text kept: the newest frame's text
}

// newDetokenizer returns the detokenizer of a request; batched says that
// Delta outputs may skip frames (Config.StreamInterval), so that the text
// of several frames is kept for the next one.
func newDetokenizer(stops []string, minTokens int, kind OutputKind, batched bool) detokenizer {
	d := detokenizer{stops: stops, minTokens: minTokens}
	for _, s := range stops {
		d.holdback = max(d.holdback, utf8.RuneCountInString(s)-1)
	}
	d.keep = kind != Delta || len(stops) > 0 || batched
	return d
}

// update decodes new tokens and reports the stop string they complete,
// and how many of them it took: those after the token that completes it
// (several tokens a step, with speculative decoding) are past the stop.
func (d *detokenizer) update(tokens []int) (stop string, took int, hit bool) {
	if !d.keep {
		if len(tokens) == 1 {
			d.pending = d.tok.Piece(tokens[0])
		} else {
			d.pending = d.tok.Decode(tokens)
		}
		return "", len(tokens), false
	}
	checkFrom := len(d.text) // a stop string must end after this
	for i, t := range tokens {
		d.text = append(d.text, d.tok.Piece(t)...)
		d.decoded++
		if d.decoded <= d.minTokens {
			checkFrom = len(d.text)
			continue
		}
		if len(d.text) == checkFrom {
			continue // no text yet that a stop string could end in
		}
		// Token by token: the first that completes a stop string ends
		// the request, and the tokens after it are past the stop.
		if stop, took, hit = d.stopIn(checkFrom, len(d.text), i+1); hit {
			return stop, took, true
		}
	}
	return "", len(tokens), false
}

// stopIn looks for a stop string that ends in the text after checkFrom and
// by end, the end of the took-th new token's text: of those it finds, the
// earliest in the text, before which the text is then cut.
func (d *detokenizer) stopIn(checkFrom, end, took int) (stop string, _ int, hit bool) {
	cut := -1
	for _, s := range d.stops {
		from := max(0, checkFrom-len(s)+1)
		if i := strings.Index(string(d.text[from:end]), s); i >= 0 && (cut < 0 || from+i < cut) {
			cut, stop = from+i, s
		}
	}
	if cut < 0 {
		return "", took, false
	}
	d.text = d.text[:cut]
	return stop, took, true
}

// next returns the text of the next output: all of it, or what is new for
// Delta, less the held-back tail unless the request finished.
func (d *detokenizer) next(finished, delta bool) string {
	if !d.keep {
		t := d.pending
		d.pending = ""
		return t
	}
	end := len(d.text)
	if !finished {
		end = d.heldFrom()
	}
	if !delta {
		return string(d.text[:end])
	}
	if d.emitted >= end {
		return ""
	}
	t := string(d.text[d.emitted:end])
	d.emitted = end
	return t
}

// heldFrom returns where the held-back tail of the text begins: holdback
// characters before its end, or 0 when the text is shorter.
func (d *detokenizer) heldFrom() int {
	end := len(d.text)
	for n := 0; n < d.holdback && end > 0; n++ {
		_, size := utf8.DecodeLastRune(d.text[:end])
		end -= size
	}
	return end
}
