package triage

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parsed mirrors the JUnit schema independently of the writer's types.
type parsed struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Time     string   `xml:"time,attr"`
	Suites   []struct {
		Name     string `xml:"name,attr"`
		Tests    int    `xml:"tests,attr"`
		Failures int    `xml:"failures,attr"`
		Time     string `xml:"time,attr"`
		Cases    []struct {
			Name      string `xml:"name,attr"`
			Classname string `xml:"classname,attr"`
			Time      string `xml:"time,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			SystemOut *string `xml:"system-out"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func TestWriteJUnitParsesBack(t *testing.T) {
	cases := []JUnitCase{
		{Name: "A round 1 copy 1", Classname: "A: ./t", Time: 1500 * time.Millisecond},
		{Name: "A round 1 copy 2", Classname: "A: ./t", Failure: "CHECK( a < b && c > \"d\" )\nreproduce: X='1' ./t", Output: "\x1b[31mred\x1b[0m\x00 & <tags>\n", Time: 250 * time.Millisecond},
		{Name: "A round 1 copy 3", Classname: "A: ./t", Failure: strings.Repeat("long ", 100)},
	}
	var b bytes.Buffer
	require.NoError(t, WriteJUnit(&b, "stress <A>", cases))
	require.True(t, strings.HasPrefix(b.String(), xml.Header))

	var got parsed
	require.NoError(t, xml.Unmarshal(b.Bytes(), &got), b.String())
	assert.Equal(t, 3, got.Tests)
	assert.Equal(t, 2, got.Failures)
	require.Len(t, got.Suites, 1)
	s := got.Suites[0]
	assert.Equal(t, "stress <A>", s.Name)
	assert.Equal(t, 3, s.Tests)
	assert.Equal(t, 2, s.Failures)
	assert.Equal(t, "1.750", s.Time)
	require.Len(t, s.Cases, 3)

	assert.Equal(t, "A round 1 copy 1", s.Cases[0].Name)
	assert.Equal(t, "1.500", s.Cases[0].Time)
	assert.Nil(t, s.Cases[0].Failure)
	assert.Nil(t, s.Cases[0].SystemOut)

	require.NotNil(t, s.Cases[1].Failure)
	assert.Equal(t, `CHECK( a < b && c > "d" )`, s.Cases[1].Failure.Message, "the first line is the message")
	assert.Equal(t, cases[1].Failure, s.Cases[1].Failure.Text)
	require.NotNil(t, s.Cases[1].SystemOut)
	assert.Equal(t, "\uFFFD[31mred\uFFFD[0m\uFFFD & <tags>\n", *s.Cases[1].SystemOut, "characters XML cannot hold are replaced")

	require.NotNil(t, s.Cases[2].Failure)
	assert.LessOrEqual(t, len(s.Cases[2].Failure.Message), junitMessageMax+len("…"))
	assert.Equal(t, cases[2].Failure, s.Cases[2].Failure.Text, "the text keeps all of it")
}

func TestWriteJUnitEmpty(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteJUnit(&b, "none", nil))
	var got parsed
	require.NoError(t, xml.Unmarshal(b.Bytes(), &got))
	assert.Equal(t, 0, got.Tests)
	require.Len(t, got.Suites, 1)
	assert.Empty(t, got.Suites[0].Cases)
}

// TestWriteJUnitSuitesCountsThemAll: each suite keeps its own counts and
// time, and the testsuites element adds them up.
func TestWriteJUnitSuitesCountsThemAll(t *testing.T) {
	suites := []JUnitSuite{
		{Name: "sweep a", Cases: []JUnitCase{{Name: "seeds", Time: time.Second}, {Name: "seed 3", Failure: "boom"}}},
		{Name: "sweep b", Cases: []JUnitCase{{Name: "seeds", Time: 500 * time.Millisecond}}},
		{Name: "sweep c", Cases: []JUnitCase{{Name: "seed 1", Failure: "x"}, {Name: "seed 2", Failure: "y"}}},
	}
	var b bytes.Buffer
	require.NoError(t, WriteJUnitSuites(&b, suites))
	var got parsed
	require.NoError(t, xml.Unmarshal(b.Bytes(), &got), b.String())
	assert.Equal(t, 5, got.Tests)
	assert.Equal(t, 3, got.Failures)
	assert.Equal(t, "1.500", got.Time)
	require.Len(t, got.Suites, 3)
	for i, want := range []struct {
		name            string
		tests, failures int
		time            string
	}{{"sweep a", 2, 1, "1.000"}, {"sweep b", 1, 0, "0.500"}, {"sweep c", 2, 2, "0.000"}} {
		s := got.Suites[i]
		assert.Equal(t, want.name, s.Name)
		assert.Equal(t, want.tests, s.Tests, want.name)
		assert.Equal(t, want.failures, s.Failures, want.name)
		assert.Equal(t, want.time, s.Time, want.name)
		assert.Len(t, s.Cases, want.tests, want.name)
	}
}

func TestWriteJUnitReportsWriteErrors(t *testing.T) {
	assert.EqualError(t, WriteJUnit(&failingWriter{}, "s", nil), "junit: disk full")
}
