package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/llmdst/llmdst/core"
	"github.com/llmdst/llmdst/scenario"
	"github.com/llmdst/llmdst/sim"
	"github.com/llmdst/llmdst/timeline"
)

// writeHTML writes a run's timeline page to file.
func writeHTML(file string, sp *spec, o *outcome, schedFile string) error {
	header := []timeline.Field{
		{Key: "scenario", Value: sp.scenario.Name},
		{Key: "seed", Value: strconv.FormatUint(o.seed, 10)},
		{Key: "strategy", Value: o.strategy},
		{Key: "engine", Value: sp.engineName()},
	}
	for _, c := range sp.configStrings() {
		header = append(header, timeline.Field{Key: "config", Value: c})
	}
	header = append(header, timeline.Field{Key: "trace hash", Value: fmt.Sprintf("%016x", o.res.TraceHash)})
	label := "run again"
	if schedFile != "" {
		label = "replay"
	}
	header = append(header, timeline.Field{Key: label, Value: sp.reproducer(o.seed, o.strategy, isNondeterministic(o.err), schedFile)})
	opts := timeline.Options{
		Title:     fmt.Sprintf("%s seed %d, %s", sp.scenario.Name, o.seed, sp.engineWords()),
		Header:    header,
		Highlight: scenario.IsStaleDelivery,
		Notable:   notableEvent,
	}
	if o.failed() {
		opts.Error = o.err.Error()
	}
	return writeFile(file, func(w io.Writer) error {
		return timeline.Write(w, o.res.Trace, opts)
	})
}

// notableEvent reports whether an engine annotation that is not a frame
// deserves a label on the timeline: everything but the core's steps and
// the outputs a client takes before the final one.
func notableEvent(a sim.Annotation) bool {
	switch a.Kind() {
	case core.EventStep.String():
		return false
	case core.EventOutput.String():
		return strings.Contains(a.String(), " finished ")
	}
	return true
}
