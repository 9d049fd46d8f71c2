// Package svgtest reads the SVG drawing of a timeline page as XML, for
// tests that check what the page draws: the page as timeline writes it, or
// the DOM a browser built from it.
//
// Usage:
//
//	svg := svgtest.Parse(t, page)
//	stale := svg.All(svgtest.Classed("frame-flow", "stale"))
package svgtest

import (
	"encoding/xml"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Element is an SVG element as encoding/xml reads it.
type Element struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Children []Element  `xml:",any"`
	Text     string     `xml:",chardata"`
}

// Parse returns the page's drawing, the <svg id="timeline"> element; it
// must be well-formed XML.
func Parse(t testing.TB, page string) *Element {
	t.Helper()
	start := strings.Index(page, `<svg id="timeline"`)
	require.GreaterOrEqual(t, start, 0, "the page has no timeline")
	end := strings.Index(page[start:], "</svg>")
	require.Positive(t, end)
	var root Element
	require.NoError(t, xml.Unmarshal([]byte(page[start:start+end+len("</svg>")]), &root))
	return &root
}

// Attr returns the value of the attribute name, or "".
func (e *Element) Attr(name string) string {
	for _, a := range e.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// HasClass reports whether c is one of e's classes.
func (e *Element) HasClass(c string) bool {
	for _, x := range strings.Fields(e.Attr("class")) {
		if x == c {
			return true
		}
	}
	return false
}

// All returns e and its descendants that match, in document order.
func (e *Element) All(match func(*Element) bool) []*Element {
	var out []*Element
	if match(e) {
		out = append(out, e)
	}
	for i := range e.Children {
		out = append(out, e.Children[i].All(match)...)
	}
	return out
}

// Find returns the first of All, or nil.
func (e *Element) Find(match func(*Element) bool) *Element {
	if all := e.All(match); len(all) > 0 {
		return all[0]
	}
	return nil
}

// Count returns how many of e and its descendants match.
func (e *Element) Count(match func(*Element) bool) int { return len(e.All(match)) }

// Title returns the text of e's <title> child, its tooltip.
func (e *Element) Title() string {
	for _, c := range e.Children {
		if c.XMLName.Local == "title" {
			return c.Text
		}
	}
	return ""
}

// Classed matches the elements that have every one of classes.
func Classed(classes ...string) func(*Element) bool {
	return func(e *Element) bool {
		for _, c := range classes {
			if !e.HasClass(c) {
				return false
			}
		}
		return true
	}
}

// ID matches the element whose id is want.
func ID(want string) func(*Element) bool {
	return func(e *Element) bool { return e.Attr("id") == want }
}
