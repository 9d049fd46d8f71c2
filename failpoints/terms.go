package failpoints

import (
	"fmt"
	"strconv"
	"strings"
)

// action is what a term does when it is allowed.
type action uint8

const (
	actOff action = iota
	actReturn
	actPanic
)

// term is one link of a chain: its modifiers, and an action.
type term struct {
	mods []modifier // all must allow the term, in order, as pingcap's do
	act  action
	val  string // the value inside return(...) or panic(...), unquoted
	has  bool   // a value was given
	src  string // the term as written, for errors
}

// modifier is a count "N*" (den 0: allowed N more times) or a ratio "K/N*"
// (allowed with probability num/den).
type modifier struct {
	count    int
	num, den int
}

// allow reports whether the modifier lets its term act, counting the
// evaluation down or drawing.
func (m *modifier) allow(draw func(n int) int) bool {
	if m.den > 0 {
		return draw(m.den) < m.num
	}
	if m.count == 0 {
		return false
	}
	m.count--
	return true
}

// chain is a parsed terms string.
type chain struct {
	desc  string
	terms []term
}

// parseChain reads a terms string for a run-scoped set: pingcap's grammar
// less what breaks replay, plus integer-ratio probabilities.
func parseChain(desc string) (*chain, error) {
	c := &chain{desc: desc}
	if strings.TrimSpace(desc) == "" {
		return nil, fmt.Errorf("empty terms: want, say, return(500) or 3*return(500)->off")
	}
	for _, part := range splitChain(desc) { // a quoted value may hold "->"
		t, err := parseTerm(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		t.src = strings.TrimSpace(part)
		c.terms = append(c.terms, t)
	}
	return c, nil
}

func parseTerm(s string) (term, error) {
	var t term
	// Modifiers, as many as are written, each ending at a '*' or '%' before
	// the action's '(': <mod> :: ((<int> "%")|(<int> "*")|(<int> "/" <int> "*"))*
	for {
		i := strings.IndexAny(s, "*%(")
		if i < 0 || s[i] == '(' {
			break
		}
		mod, rest := s[:i], s[i+1:]
		switch {
		case s[i] == '%':
			return t, fmt.Errorf("%s%% draws from pingcap's global math/rand, which would break replay; write an integer ratio drawn from the run's seeded chooser instead, as in 1/4*%s", mod, rest)
		case strings.Contains(mod, "/"):
			k, n, _ := strings.Cut(mod, "/")
			num, err1 := strconv.Atoi(k)
			den, err2 := strconv.Atoi(n)
			if err1 != nil || err2 != nil || num < 0 || den < 1 || num > den {
				return t, fmt.Errorf("bad ratio %q: want K/N* with 0 ≤ K ≤ N and N ≥ 1, as in 1/4*return(500)", mod)
			}
			t.mods = append(t.mods, modifier{num: num, den: den})
		default:
			n, err := strconv.Atoi(mod)
			if err != nil || n < 0 {
				return t, fmt.Errorf("bad count %q: want N* with N ≥ 0, as in 3*return(500)", mod)
			}
			t.mods = append(t.mods, modifier{count: n})
		}
		s = rest
	}
	name, arg, hasArg, closed := cutAction(s)
	if open := strings.IndexByte(s, '('); open >= 0 && strings.HasPrefix(s[open+1:], `"`) {
		// A quote that does not close is no value: it would run as its
		// raw text, where pingcap refuses it.
		if _, err := strconv.Unquote(strings.TrimSuffix(s[open+1:], ")")); err != nil || !closed {
			return t, fmt.Errorf("bad quoted value: want %s(\"TEXT\"), the text a Go string literal", name)
		}
	}
	if !closed {
		return t, fmt.Errorf("unclosed %q: want %s(VALUE)", s, name)
	}
	t.val, t.has = arg, hasArg
	switch name {
	case "off":
		t.act = actOff
	case "return":
		t.act = actReturn
	case "panic":
		t.act = actPanic
	case "sleep":
		return t, fmt.Errorf("sleep waits on the wall clock, which would break replay; give the delay as the value instead, slept on the runtime's clock: return(%s000) for %sms", arg, arg)
	case "pause":
		return t, fmt.Errorf("pause blocks until resumed from outside the run, which would break replay")
	case "":
		return t, fmt.Errorf("no action: want off, return, return(VALUE) or panic")
	default:
		return t, fmt.Errorf("unknown action %q: want off, return, return(VALUE) or panic", name)
	}
	return t, nil
}

// cutAction splits an action from its optional value, as in
// return("5ms"): the action's name, the value unquoted, whether one was
// given, and false when its parenthesis is not closed.
func cutAction(s string) (name, val string, has, closed bool) {
	name, val, has = strings.Cut(s, "(")
	if !has {
		return name, "", false, true
	}
	if !strings.HasSuffix(val, ")") {
		return name, "", true, false
	}
	val = strings.TrimSuffix(val, ")")
	if uq, err := strconv.Unquote(val); err == nil {
		val = uq
	}
	return name, val, true, true
}

// eval walks the chain as pingcap does: the first term its modifier allows
// acts. draw answers the ratio's draws. It reports whether the failpoint
// fired and its value; a panic term panics.
func (c *chain) eval(name string, draw func(n int) int) (string, bool) {
	for i := range c.terms {
		t := &c.terms[i]
		if !t.allowed(draw) {
			continue
		}
		switch t.act {
		case actOff:
			return "", false
		case actPanic:
			panic(InjectedPanic(name, t.val))
		}
		return t.val, true
	}
	return "", false
}

// allowed reports whether every modifier of t lets it act. As in pingcap's
// modifier list, the first that refuses stops the evaluation: a later count
// is not counted down, nor a later ratio drawn.
func (t *term) allowed(draw func(n int) int) bool {
	for i := range t.mods {
		if !t.mods[i].allow(draw) {
			return false
		}
	}
	return true
}

// InjectedPanic is the message of a panic that failpoint name injects, with
// the term's value as what went wrong; a term without one says
// "injected panic".
func InjectedPanic(name, value string) string {
	if value == "" {
		value = "injected panic"
	}
	return fmt.Sprintf("failpoint %s: %s", name, value)
}
