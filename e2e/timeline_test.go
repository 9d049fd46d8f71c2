//go:build e2e

package e2e

import (
	"context"
	"errors"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmdst/llmdst/internal/svgtest"
)

// Limits of one browser run.
const (
	browserTimeout = 90 * time.Second
	windowWidth    = 1600
	windowHeight   = 1000
)

// page returns the timeline page of a failing legacy seed: the one make e2e
// drew with the built simrun, or one drawn here.
func page(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LLMDST_E2E_HTML"); p != "" {
		abs, err := filepath.Abs(p)
		require.NoError(t, err)
		_, err = os.Stat(abs)
		require.NoError(t, err, "LLMDST_E2E_HTML names no file")
		return abs
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "simrun")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/simrun").CombinedOutput()
	require.NoError(t, err, "building simrun: %s", out)
	html := filepath.Join(dir, "timeline.html")
	cmd := exec.Command(bin, "run", "-scenario", "abort-reuse", "-seed", "1", "-legacy", "-out", dir, "-html", html)
	out, err = cmd.CombinedOutput()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee) && ee.ExitCode() == 1, "seed 1 of the legacy engine must fail (exit 1): %v\n%s", err, out)
	return html
}

// chromium finds the browser: LLMDST_CHROMIUM, or Debian's chromium on
// PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if c := os.Getenv("LLMDST_CHROMIUM"); c != "" {
		return c
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: run make e2e, which installs Debian's, or set LLMDST_CHROMIUM")
	return ""
}

// browse runs headless Chromium on the page with extra flags and returns
// its standard output.
func browse(t *testing.T, html string, flags ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	defer cancel()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--no-first-run", "--no-default-browser-check",
		"--user-data-dir=" + t.TempDir(),
		"--window-size=" + strconv.Itoa(windowWidth) + "," + strconv.Itoa(windowHeight),
	}
	args = append(append(args, flags...), "file://"+html)
	cmd := exec.CommandContext(ctx, chromium(t), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "chromium %v\n%s", args, stderr.String())
	return out
}

// TestTimelineDOM checks the page as Chromium built it, after its script
// ran: the script's own summary and the drawing itself.
func TestTimelineDOM(t *testing.T) {
	dom := string(browse(t, page(t), "--dump-dom", "--virtual-time-budget=5000"))
	require.Contains(t, dom, `data-ready="1"`, "the page's script did not run to its end")

	// The script counted what the browser drew.
	status := regexp.MustCompile(`<span id="status"[^>]*>`).FindString(dom)
	require.NotEmpty(t, status)
	attr := func(name string) int {
		m := regexp.MustCompile(`data-` + name + `="(\d+)"`).FindStringSubmatch(status)
		require.Len(t, m, 2, "status has no data-%s: %s", name, status)
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		return n
	}
	assert.Equal(t, 3, attr("lanes"), "main, engine-core, output-handler")
	assert.Positive(t, attr("stale"), "a frame of the first abort-a reaches the reused one")
	assert.Greater(t, attr("starve"), 10)
	assert.Greater(t, attr("flows"), attr("stale"))
	assert.Greater(t, attr("runs"), 10)

	// The drawing, parsed from the browser's DOM.
	svg := svgtest.Parse(t, dom)
	for _, lane := range []string{"lane-main", "lane-engine-core", "lane-output-handler"} {
		l := svg.Find(svgtest.ID(lane))
		require.NotNil(t, l, lane)
		assert.True(t, l.HasClass("lane"))
		assert.Positive(t, l.Count(svgtest.Classed("run")), "%s never runs", lane)
	}
	assert.Positive(t, svg.Find(svgtest.ID("lane-output-handler")).Count(svgtest.Classed("starve")), "the starved output handler is shaded")
	assert.Zero(t, svg.Find(svgtest.ID("lane-main")).Count(svgtest.Classed("starve")))
	stale := svg.Find(func(e *svgtest.Element) bool { return strings.HasPrefix(e.Attr("id"), "stale-flow-") })
	require.NotNil(t, stale, "the stale frame's path")
	assert.Equal(t, attr("stale"), svg.Count(func(e *svgtest.Element) bool { return strings.HasPrefix(e.Attr("id"), "stale-flow-") }),
		"the script counted every stale path drawn")
	assert.True(t, stale.HasClass("frame-flow") && stale.HasClass("stale"))
	assert.Positive(t, svg.Find(svgtest.ID("lane-output-handler")).Count(svgtest.Classed("event", "stale")), "the stale delivery's marker")
	assert.Positive(t, svg.Count(svgtest.Classed("switch")))

	// The script scrolled to the stale frame and kept the lane labels in
	// view.
	labels := svg.Find(svgtest.ID("lane-labels"))
	require.NotNil(t, labels)
	m := regexp.MustCompile(`translate\(([\d.]+),0\)`).FindStringSubmatch(labels.Attr("transform"))
	require.Len(t, m, 2, "the labels were not moved: %q", labels.Attr("transform"))
	x, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	assert.Positive(t, x, "the drawing was not scrolled to the stale frame")
}

// TestTimelineScreenshot checks the picture: the window is drawn, in many
// colours, with the stale path's red in view.
func TestTimelineScreenshot(t *testing.T) {
	shot := filepath.Join(t.TempDir(), "timeline.png")
	browse(t, page(t), "--screenshot="+shot, "--hide-scrollbars", "--virtual-time-budget=5000")
	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	b := img.Bounds()
	assert.Equal(t, image.Rect(0, 0, windowWidth, windowHeight), b)
	colours := map[uint32]bool{} // looked up and counted, never ranged
	red := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			r, g, bl = r>>8, g>>8, bl>>8
			colours[r<<16|g<<8|bl] = true
			if r >= 200 && g <= 25 && bl <= 25 { // the stale path's #d50000, not the error box's #c62828
				red++
			}
		}
	}
	assert.Greater(t, len(colours), 50, "the screenshot is nearly blank")
	assert.Greater(t, red, 200, "no stale-frame red in view")
	if dir := os.Getenv("LLMDST_E2E_KEEP"); dir != "" {
		data, err := os.ReadFile(shot)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "timeline.png"), data, 0o644))
	}
}
