package triage

import (
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// junitMessageMax bounds the failure message attribute, in bytes; the
// whole failure stays in the element's text.
const junitMessageMax = 256

// JUnitCase is one test case of a JUnit report.
type JUnitCase struct {
	Name, Classname string
	// Failure describes the failure; "" means the case passed. Its first
	// line becomes the message attribute, all of it the element's text.
	Failure string
	// Output becomes system-out; "" writes none.
	Output string
	// Time is the case's wall time.
	Time time.Duration
}

type junitSuites struct {
	XMLName  xml.Name   `xml:"testsuites"`
	Tests    int        `xml:"tests,attr"`
	Failures int        `xml:"failures,attr"`
	Time     string     `xml:"time,attr"`
	Suites   []junitSet `xml:"testsuite"`
}

type junitSet struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitTest `xml:"testcase"`
}

type junitTest struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	SystemOut *junitText    `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

type junitText struct {
	Text string `xml:",chardata"`
}

func junitSeconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
}

// JUnitSuite is one suite of a JUnit report: its name and its cases.
type JUnitSuite struct {
	Name  string
	Cases []JUnitCase
}

// WriteJUnit writes cases as one JUnit XML suite named suite, inside a
// testsuites element, with the counts of tests and failures that CI
// systems read. Text is escaped by encoding/xml, which also replaces
// characters XML cannot hold (NUL, ANSI escapes) with U+FFFD.
func WriteJUnit(w io.Writer, suite string, cases []JUnitCase) error {
	return WriteJUnitSuites(w, []JUnitSuite{{Name: suite, Cases: cases}})
}

// WriteJUnitSuites writes several suites in one report, as WriteJUnit
// writes one: the testsuites element counts the tests, failures and time
// of them all.
func WriteJUnitSuites(w io.Writer, suites []JUnitSuite) error {
	doc := junitSuites{Suites: make([]junitSet, 0, len(suites))}
	var all time.Duration
	for _, s := range suites {
		set := junitSet{Name: s.Name, Tests: len(s.Cases), Cases: make([]junitTest, 0, len(s.Cases))}
		var total time.Duration
		for _, c := range s.Cases {
			t := junitTest{Name: c.Name, Classname: c.Classname, Time: junitSeconds(c.Time)}
			if c.Failure != "" {
				set.Failures++
				msg, _, _ := strings.Cut(c.Failure, "\n")
				if len(msg) > junitMessageMax {
					msg = strings.ToValidUTF8(msg[:junitMessageMax], "") + "…"
				}
				t.Failure = &junitFailure{Message: msg, Type: "failure", Text: c.Failure}
			}
			if c.Output != "" {
				t.SystemOut = &junitText{Text: c.Output}
			}
			total += c.Time
			set.Cases = append(set.Cases, t)
		}
		set.Time = junitSeconds(total)
		all += total
		doc.Tests += set.Tests
		doc.Failures += set.Failures
		doc.Suites = append(doc.Suites, set)
	}
	doc.Time = junitSeconds(all)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return fmt.Errorf("junit: %w", err)
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("junit: %w", err)
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return fmt.Errorf("junit: %w", err)
	}
	return nil
}
