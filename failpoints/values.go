package failpoints

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// delayUsMax is the longest delay, in microseconds, that a time.Duration
// holds.
const delayUsMax = math.MaxInt64 / int64(time.Microsecond)

var errDelay = errors.New(`the delay must be a whole number of microseconds ≥ 0 or a quoted duration such as "2ms"`)

// parseDelay reads a delay value: microseconds, or a Go duration; empty
// means 1ms. It says what is wrong with a value it cannot read.
func parseDelay(v string) (time.Duration, error) {
	if v == "" {
		return time.Millisecond, nil
	}
	if us, err := strconv.ParseInt(v, 10, 64); err == nil {
		switch {
		case us < 0:
			return 0, errDelay
		case us > delayUsMax:
			return 0, fmt.Errorf("the delay must be at most %d microseconds, the longest a time.Duration holds", delayUsMax)
		}
		return time.Duration(us) * time.Microsecond, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return d, nil
	}
	return 0, errDelay
}

// checkDelay is the value check of the delay failpoints.
func checkDelay(v string) error {
	_, err := parseDelay(v)
	return err
}

// checkNoValue is the value check of the failpoints that only fire:
// their terms are a bare return.
func checkNoValue(v string) error {
	if v != "" {
		return errors.New("this failpoint takes no value: write return alone")
	}
	return nil
}

// checkValues checks the value of each return term against p's terms, so
// that a value p cannot take is refused when p is armed rather than run as
// something else.
func (p *Point) checkValues(terms []term) error {
	if p.checkValue == nil {
		return nil
	}
	for _, t := range terms {
		if t.act != actReturn || !t.has {
			continue
		}
		if err := p.checkValue(t.val); err != nil {
			return fmt.Errorf("%s: %s: %w", p.Name, t.src, err)
		}
	}
	return nil
}

// readPingcap reads the return terms of a terms string in pingcap's full
// grammar, skipping its modifiers, so that a failpoint armed in the
// process-wide set has its values checked as a run set's are. It reads
// only what it needs and leaves the rest, and any syntax error, to
// pingcap's parser.
func readPingcap(desc string) []term {
	var ts []term
	for _, part := range splitChain(desc) {
		src := strings.TrimSpace(part)
		s := src
		// <mod> :: ((<float>|<int> "%")|(<int> "*"))*
		for {
			i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
			if i <= 0 || (s[i] != '%' && s[i] != '*') {
				break
			}
			s = s[i+1:]
		}
		name, arg, hasArg, closed := cutAction(s)
		if name != "return" || !hasArg || !closed {
			continue
		}
		ts = append(ts, term{act: actReturn, val: arg, has: true, src: src})
	}
	return ts
}

// splitChain splits a terms string at each "->" outside a quoted value.
func splitChain(desc string) []string {
	var parts []string
	quoted, start := false, 0
	for i := 0; i < len(desc); i++ {
		switch {
		case quoted && desc[i] == '\\':
			i++
		case desc[i] == '"':
			quoted = !quoted
		case !quoted && strings.HasPrefix(desc[i:], "->"):
			parts = append(parts, desc[start:i])
			start = i + 2
			i++
		}
	}
	return append(parts, desc[start:])
}
