package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunAndReplayWriteTheTimeline(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "seed1.html")
	code, out, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-out", dir, "-html", page)
	require.Equal(t, 1, code, out)
	assert.Contains(t, out, "timeline: "+page)
	data, err := os.ReadFile(page)
	require.NoError(t, err)
	html := string(data)
	drawing := svgPart(html)
	for _, want := range []string{
		`id="lane-main"`, `id="lane-engine-core"`, `id="lane-output-handler"`,
		`class="starve"`, `class="run"`, `class="switch"`,
		`id="stale-flow-`, `class="frame-flow stale"`,
		"abort-reuse seed 1, legacy engine",
		"starve:output-handler",
		"simrun replay " + filepath.Join(dir, "abort-reuse-legacy-seed1.schedule"),
		"no-cross-incarnation-delivery",
	} {
		assert.True(t, strings.Contains(html, want), "the timeline has no %s", want)
	}
	assert.False(t, strings.Contains(drawing, "inferred"), "a run with strategy notes draws them")

	// The replay draws the same run. Its trace has no strategy notes, so
	// the starvation it shades is inferred from the clock moving on while
	// the output handler could run.
	again := filepath.Join(dir, "replay.html")
	code, out, _ = simrun(t, "replay", "-html", again, filepath.Join(dir, "abort-reuse-legacy-seed1.schedule"))
	require.Equal(t, 1, code, out)
	data, err = os.ReadFile(again)
	require.NoError(t, err)
	replayed := svgPart(string(data))
	for _, want := range []string{`id="lane-output-handler"`, `id="stale-flow-`, `class="starve inferred"`} {
		assert.True(t, strings.Contains(replayed, want), "the replay's timeline has no %s", want)
	}
	assert.True(t, strings.Contains(string(data), "holds no strategy notes"))
	// It offers the replay of the file it drew, not a run of the seed,
	// which shows another run when the file was shrunk or edited.
	file := filepath.Join(dir, "abort-reuse-legacy-seed1.schedule")
	assert.True(t, strings.Contains(string(data), "<tr><th>replay</th><td>simrun replay "+file+"</td></tr>"), "the replay's page offers no replay of its file")
	assert.False(t, strings.Contains(string(data), "simrun run "), "the replay's page offers a run of the seed")
}

func TestTimelineOfAPassingRun(t *testing.T) {
	page := filepath.Join(t.TempDir(), "ok.html")
	code, out, _ := simrun(t, "run", "-scenario", "abort-reuse", "-seed", "1", "-html", page)
	require.Equal(t, 0, code, out)
	data, err := os.ReadFile(page)
	require.NoError(t, err)
	html := string(data)
	drawing := svgPart(html)
	assert.True(t, strings.Contains(html, `class="pass">passed`))
	assert.True(t, strings.Contains(html, "simrun run -scenario abort-reuse -seed 1"))
	assert.False(t, strings.Contains(drawing, `class="frame-flow stale"`), "the fixed engine delivers no stale frame")
	assert.True(t, strings.Contains(drawing, `class="frame-flow"`))
}

func svgPart(page string) string {
	start := strings.Index(page, `<svg id="timeline"`)
	end := strings.LastIndex(page, "</svg>")
	if start < 0 || end < start {
		return ""
	}
	return page[start:end]
}
