package props

import (
	"fmt"
	"strconv"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/engine"
)

// The text a caller receives is checked against vLLM's rules
// (vllm/v1/engine/detokenizer.py, output_processor.py), worked out here
// from the tokenizer's pieces and the request's parameters alone:
//
//   - The text is the concatenation of the pieces of the output tokens,
//     less a final stop token (EOS unless ignored, or one of StopTokenIDs)
//     that the core finished the request on.
//   - Stop strings are looked for once the request has more than MinTokens
//     tokens, and only where they end in the text of those later tokens. The
//     first token whose text completes one ends the request: reason stop, no
//     later tokens, the text cut before the stop string (the earliest
//     starting one, when that token completes several).
//   - A running request's text holds back its last len(longest stop)−1
//     characters (Python's len), which could still begin a stop string; a
//     finished request's is whole. The toy vocabulary's text is ASCII, so
//     they are as many bytes.
//   - Cumulative and FinalOnly outputs carry the text so far; Delta outputs
//     the text since the previous one, so that they concatenate to it.
//
// The core emits one token per frame, so a stop string is looked for after
// each token, as the frontend does after each frame.

// checkText checks the text of output ev of in, whose received tokens the
// caller holds once it took ev.
func (c *Checker) checkText(in *incarnation, ev *core.Event) {
	o := &in.text
	if o.bad {
		return
	}
	n := len(in.received)
	stopToken := ev.Finished && ev.Reason == core.FinishStop && c.endsOnStopToken(in)
	textTokens := n
	if stopToken {
		textTokens--
	}
	for o.fed < textTokens && o.stopAt == 0 {
		c.decodeNext(in)
	}
	end := o.textLen
	switch {
	case o.stopAt > 0 && n > o.stopAt:
		c.textFail(in, "its text reached the stop string at token %d (%s), yet it received %d tokens", o.stopAt, c.stopDetail(in), n)
		return
	case o.stopAt > 0 && !(ev.Finished && ev.Reason == core.FinishStop):
		c.textFail(in, "its text reached the stop string at token %d (%s), yet its output says finished=%v, reason %q", o.stopAt, c.stopDetail(in), ev.Finished, ev.Reason)
		return
	case o.stopAt > 0:
		end = o.cut
	case ev.Finished && ev.Reason == core.FinishStop && !stopToken:
		c.textFail(in, "it finished for stop after %d tokens, but no stop token ended it and no stop string of %q ends in its text %s after its first %d tokens (MinTokens)",
			n, in.params.Stop, clipText(c.decode(in.received, 0, o.textLen)), in.params.MinTokens)
		return
	case !ev.Finished:
		end = max(0, end-o.hold)
	}
	if in.params.Output != engine.Delta {
		at := textCursor{}
		if len(ev.Text) != end || !at.match(in.received, ev.Text) {
			c.textFail(in, "an output's text is %s, want %s: %s", clipText(ev.Text), clipText(c.decode(in.received, 0, end)), c.why(in, n, ev.Finished))
		}
		return
	}
	if end < o.got {
		// A running request's text only grows, and a stop string is cut
		// where it begins: in the held-back tail, which no caller has had.
		c.textFail(in, "its Delta outputs gave %d bytes of text, %s, but its text ends at byte %d", o.got, clipText(c.decode(in.received, 0, o.got)), end)
		return
	}
	if len(ev.Text) != end-o.got || !o.at.match(in.received, ev.Text) {
		c.textFail(in, "a Delta output's text is %s, want %s after the %d bytes received before it: %s", clipText(ev.Text), clipText(c.decode(in.received, o.got, end)), o.got, c.why(in, n, ev.Finished))
		return
	}
	o.got = end
}

// endsOnStopToken reports whether the core finished in on its last token:
// EOS (the engine's is core.EOSTokenID) unless ignored, or a stop token,
// once MinTokens allow a stop.
func (c *Checker) endsOnStopToken(in *incarnation) bool {
	n := len(in.received)
	if n == 0 || n < in.params.MinTokens {
		return false
	}
	return in.sampling.StopsOn(in.received[n-1], core.EOSTokenID)
}

// decodeNext decodes the next received token into the oracle and looks for
// a stop string that its piece completes.
func (c *Checker) decodeNext(in *incarnation) {
	o := &in.text
	i := o.fed
	piece := c.tok.Piece(in.received[i])
	before := o.textLen
	o.fed++
	o.textLen += len(piece)
	if o.fed <= in.params.MinTokens || len(piece) == 0 || len(in.params.Stop) == 0 {
		return
	}
	// The window: the new piece and, before it, at least reach bytes of
	// the text (or all of it), enough for any stop string that ends in the
	// piece.
	j := i
	for from := before; j > 0 && before-from < o.reach; {
		j--
		from -= len(c.tok.Piece(in.received[j]))
	}
	w := c.window[:0]
	for _, t := range in.received[j : i+1] {
		w = append(w, c.tok.Piece(t)...)
	}
	c.window = w
	wStart := o.textLen - len(w) // where the window begins in the text
	cut := -1
	for _, s := range in.params.Stop {
		if s == "" {
			continue
		}
		// A stop string must end in the new piece, after byte before.
		for k := max(0, before-len(s)+1-wStart); k+len(s) <= len(w); k++ {
			if string(w[k:k+len(s)]) == s {
				if cut < 0 || wStart+k < cut {
					cut = wStart + k
				}
				break
			}
		}
	}
	if cut >= 0 {
		o.stopAt, o.cut = o.fed, cut
	}
}

// match reports whether s is the text from the cursor on, and moves the
// cursor past it.
func (at *textCursor) match(toks []int, s string) bool {
	var tok core.Tokenizer
	for len(s) > 0 {
		if at.tok >= len(toks) {
			return false
		}
		p := tok.Piece(toks[at.tok])
		n := min(len(p)-at.off, len(s))
		if p[at.off:at.off+n] != s[:n] {
			return false
		}
		s = s[n:]
		if at.off += n; at.off == len(p) {
			at.tok, at.off = at.tok+1, 0
		}
	}
	return true
}

// decode returns bytes [from, to) of the text of toks, for a violation's
// message.
func (c *Checker) decode(toks []int, from, to int) string {
	t := c.tok.Decode(toks)
	to = min(to, len(t))
	return t[min(from, to):to]
}

// why says where an output's expected text comes from.
func (c *Checker) why(in *incarnation, n int, finished bool) string {
	o := &in.text
	w := fmt.Sprintf("the text of %d tokens", o.fed)
	if o.fed < n {
		w += fmt.Sprintf(" (the %d received less the stop token)", n)
	}
	switch {
	case o.stopAt > 0:
		w += fmt.Sprintf(" is %s, cut at byte %d before a stop string of %q", clipText(c.decode(in.received, 0, o.textLen)), o.cut, in.params.Stop)
	case !finished && o.hold > 0:
		w += fmt.Sprintf(" is %s, less %d characters held back while it runs (stop strings %q)", clipText(c.decode(in.received, 0, o.textLen)), o.hold, in.params.Stop)
	}
	return w
}

func (c *Checker) stopDetail(in *incarnation) string {
	t := c.decode(in.received, 0, in.text.textLen)
	return fmt.Sprintf("text %s, stop strings %q, cut at byte %d", clipText(t), in.params.Stop, in.text.cut)
}

func (c *Checker) textFail(in *incarnation, format string, args ...any) {
	in.text.bad = true
	c.fail(DeltasConcatenate, "%q (incarnation %d, %s): "+format, append([]any{in.id, in.n, in.params.Output}, args...)...)
}

// textShownMax bounds the text a violation shows.
const textShownMax = 120

func clipText(s string) string {
	if len(s) <= textShownMax {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:textShownMax]) + "…"
}
