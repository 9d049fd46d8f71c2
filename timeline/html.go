package timeline

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"strings"
	"time"

	"github.com/llmdst/llmdst/sim"
)

// Options configure Write.
type Options struct {
	// Title is the page's title; "" means "llmdst timeline".
	Title string
	// Header is what identifies the run (scenario, seed, strategy,
	// engine...), shown in order above the drawing.
	Header []Field
	// Error is the run's failure, shown under the header; "" means the run
	// passed.
	Error string
	// Highlight reports whether an annotation ends a path to draw in red —
	// a frame delivered to the wrong incarnation. nil highlights nothing.
	Highlight func(sim.Annotation) bool
	// Notable reports whether an annotation that is not part of a flow is
	// worth a label on the drawing (a request added, aborted, finished);
	// the others get a marker only. nil labels every such annotation.
	// Highlighted annotations are always labelled.
	Notable func(sim.Annotation) bool
	// StepsMax bounds the scheduling decisions drawn; 0 means
	// DefaultStepsMax.
	StepsMax int
	// FlowsMax bounds the routine (not highlighted) flow arrows drawn; 0
	// means DefaultFlowsMax. Highlighted flows are always drawn.
	FlowsMax int
}

// Field is one line of the page's header.
type Field struct{ Key, Value string }

// Geometry of the drawing, in pixels.
const (
	axisHeight   = 46
	footHeight   = 26
	laneHeight   = 44
	barHeight    = 16
	padLeft      = 150 // room for the lane labels
	padRight     = 40
	widthTarget  = 2400.0
	stepWidthMin = 2.0
	stepWidthMax = 14.0
	labelGap     = 72 // between two time labels
)

// Write writes the trace as a self-contained HTML page.
func Write(w io.Writer, tr *sim.Trace, opts Options) error {
	l := plan(tr, opts)
	bw := bufio.NewWriter(w)
	p := &page{w: bw, l: l, opts: opts}
	p.write()
	return bw.Flush()
}

type page struct {
	w     *bufio.Writer
	l     *layout
	opts  Options
	stepW float64
}

func (p *page) printf(format string, args ...any) { fmt.Fprintf(p.w, format, args...) }

func esc(s string) string { return html.EscapeString(s) }

// x is the left edge of a decision's column.
func (p *page) x(step int64) float64 {
	return padLeft + float64(step-p.l.from)*p.stepW
}

// y is the top of a task's lane.
func (p *page) y(task int) float64 {
	return axisHeight + float64(p.l.laneOf[task])*laneHeight
}

// mid is the vertical middle of a task's lane.
func (p *page) mid(task int) float64 { return p.y(task) + laneHeight/2 }

func (p *page) hasLane(task int) bool {
	_, ok := p.l.laneOf[task]
	return ok
}

func (p *page) write() {
	l := p.l
	title := p.opts.Title
	if title == "" {
		title = "llmdst timeline"
	}
	n := float64(l.to - l.from + 1)
	p.stepW = min(max(widthTarget/n, stepWidthMin), stepWidthMax)
	p.printf("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>%s</title>\n<style>%s</style>\n</head>\n<body>\n", esc(title), css)
	p.printf("<h1>%s</h1>\n", esc(title))
	p.header()
	p.notices()
	p.legend()
	p.printf("<div class=\"controls\"><label><input type=\"checkbox\" id=\"show-routine\" checked> routine frame flows</label> <button type=\"button\" id=\"to-stale\">go to the stale frame</button> <span id=\"status\"></span></div>\n")
	p.printf("<div id=\"scroll\" class=\"scroll\">\n")
	p.svg()
	p.printf("</div>\n<script>%s</script>\n</body>\n</html>\n", script)
}

func (p *page) header() {
	l := p.l
	p.printf("<table class=\"header\" id=\"header\">\n")
	for _, f := range p.opts.Header {
		p.printf("<tr><th>%s</th><td>%s</td></tr>\n", esc(f.Key), esc(f.Value))
	}
	p.printf("<tr><th>decisions</th><td>%d, over %s of virtual time</td></tr>\n", l.steps, esc(fmtAt(l.end)))
	if p.opts.Error != "" {
		p.printf("<tr><th>result</th><td class=\"fail\">FAIL</td></tr>\n</table>\n<pre class=\"error\" id=\"error\">%s</pre>\n", esc(p.opts.Error))
		return
	}
	p.printf("<tr><th>result</th><td class=\"pass\">passed</td></tr>\n</table>\n")
}

func (p *page) notices() {
	l := p.l
	var ns []string
	if l.from > 0 || l.to < l.steps-1 {
		ns = append(ns, fmt.Sprintf("Long run: only decisions %d–%d of %d are drawn (at most %d); the text trace (-trace FILE.txt) has them all.",
			l.from, l.to, l.steps, l.to-l.from+1))
	}
	if l.flowsLeftOut > 0 {
		ns = append(ns, fmt.Sprintf("%d routine frame flows are not drawn: at most %d are; highlighted flows always are.", l.flowsLeftOut, len(l.flows)-countStale(l.flows)))
	}
	if l.inferred && len(l.starves) > 0 {
		ns = append(ns, "The trace holds no strategy notes (a replay, or a strategy that explains nothing): each stretch in which a task could run but did not while the clock moved on is shaded as starvation.")
	}
	if k := l.lanesLeftOut(); k > 0 {
		ns = append(ns, fmt.Sprintf("%d task(s) with nothing in the drawn decisions have no lane.", k))
	}
	folded := 0
	for _, m := range l.marks {
		if len(m.lines)+m.more > 1 {
			folded++
		}
	}
	if folded > 0 {
		ns = append(ns, fmt.Sprintf("Events of one task at one decision share a marker (%d markers hold several); hover over a marker to read them.", folded))
	}
	if len(ns) == 0 {
		return
	}
	p.printf("<ul class=\"notices\" id=\"notices\">\n")
	for _, n := range ns {
		p.printf("<li>%s</li>\n", esc(n))
	}
	p.printf("</ul>\n")
}

func countStale(fs []flow) int {
	n := 0
	for _, f := range fs {
		if f.stale {
			n++
		}
	}
	return n
}

func (p *page) legend() {
	type item struct{ svg, text string }
	items := []item{
		{`<rect class="run" x="2" y="5" width="26" height="10"/>`, "a task runs"},
		{`<line class="switch" x1="15" y1="1" x2="15" y2="19"/>`, "switch: the baton passes"},
		{`<rect class="starve" x="2" y="1" width="26" height="18"/>`, "starvation window: the strategy withholds the task"},
		{`<path class="wait" d="M10 4 L20 4 L15 12 Z"/>`, "the clock moves on: every runnable task withheld"},
		{`<circle class="event flow-start" cx="15" cy="10" r="3.5"/>`, "frame emitted"},
		{`<path class="frame-flow" d="M2 15 C 12 15, 18 5, 28 5"/>`, "a frame's path to its delivery"},
		{`<path class="frame-flow dropped" d="M2 15 C 12 15, 18 5, 28 5"/>`, "… to its drop (no frontend state)"},
		{`<path class="frame-flow stale" d="M2 15 C 12 15, 18 5, 28 5"/>`, "stale frame: delivered to another incarnation"},
		{`<circle class="event flow-end" cx="15" cy="10" r="3.5"/>`, "frame delivered or dropped"},
		{`<circle class="event routine" cx="15" cy="10" r="3.5"/>`, "routine event (core step, output taken)"},
		{`<rect class="event notable" x="10" y="5" width="9" height="9" transform="rotate(45 14.5 9.5)"/>`, "notable event (add, abort, finish...)"},
		{`<circle class="reach" cx="15" cy="10" r="3.5"/>`, "a situation first reached (a race's window opens)"},
	}
	p.printf("<div class=\"legend\" id=\"legend\">\n")
	for _, it := range items {
		p.printf("<span class=\"item\"><svg width=\"30\" height=\"20\" viewBox=\"0 0 30 20\">%s</svg>%s</span>\n", it.svg, esc(it.text))
	}
	p.printf("</div>\n")
}

func (p *page) svg() {
	l := p.l
	width := p.x(l.to+1) + padRight
	height := axisHeight + float64(len(l.lanes))*laneHeight + footHeight
	p.printf("<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" data-steps=\"%d\" data-from=\"%d\" data-to=\"%d\">\n",
		width, height, width, height, l.steps, l.from, l.to)
	p.printf("<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"5\" markerHeight=\"5\" orient=\"auto-start-reverse\"><path d=\"M0 0 L10 5 L0 10 Z\" class=\"arrowhead\"/></marker>" +
		"<marker id=\"arrow-stale\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"5\" markerHeight=\"5\" orient=\"auto-start-reverse\"><path d=\"M0 0 L10 5 L0 10 Z\" class=\"arrowhead-stale\"/></marker>" +
		"<pattern id=\"hatch\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\" patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" class=\"hatch-bg\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" class=\"hatch-line\"/></pattern></defs>\n")
	p.axis(height)
	for _, t := range l.lanes {
		p.lane(t, width)
	}
	p.switchLines()
	p.flowArrows()
	p.labels()
	p.printf("</svg>\n")
}

// axis draws virtual time above the lanes and decisions below them.
func (p *page) axis(height float64) {
	l := p.l
	p.printf("<g id=\"axis\" class=\"axis\">\n")
	p.printf("<text class=\"axis-title\" x=\"4\" y=\"14\">virtual time</text><text class=\"axis-title\" x=\"4\" y=\"%.0f\">decision</text>\n", height-8)
	lastLabel := -1e9
	for _, tk := range l.ticks {
		x := p.x(tk.step)
		label := x-lastLabel >= labelGap
		p.printf("<line class=\"tick\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>", x, axisHeight-8, x, axisHeight)
		if label {
			lastLabel = x
			p.printf("<line class=\"grid\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.0f\"/><text class=\"time\" x=\"%.1f\" y=\"%d\">%s<title>virtual time %s from decision %d</title></text>",
				x, axisHeight, x, height-footHeight, x+2, axisHeight-12, esc(fmtAt(tk.at)), esc(fmtAt(tk.at)), tk.step)
		}
		p.printf("\n")
	}
	for _, wt := range l.waits {
		x := p.x(wt.step) + p.stepW/2
		p.printf("<path class=\"wait\" d=\"M%.1f %d L%.1f %d L%.1f %d Z\"><title>decision %d, %s: every runnable task withheld: the clock moves on by %s</title></path>\n",
			x-4, axisHeight-7, x+4, axisHeight-7, x, axisHeight-1, wt.step, esc(fmtAt(wt.at)), esc(wt.by.String()))
	}
	for _, n := range l.notes {
		if n.task >= 0 && p.hasLane(n.task) {
			continue // drawn on its lane
		}
		x := p.x(n.step) + p.stepW/2
		p.printf("<circle class=\"%s\" cx=\"%.1f\" cy=\"%d\" r=\"3\"><title>decision %d, %s: %s</title></circle>\n", n.class(), x, axisHeight-4, n.step, esc(fmtAt(n.at)), esc(n.text))
	}
	// Decisions below the lanes.
	every := int64(1)
	for mult := 0; float64(every)*p.stepW < 80; mult++ {
		every = []int64{1, 2, 5}[mult%3] * pow10(mult/3)
	}
	for s := (l.from + every - 1) / every * every; s <= l.to; s += every {
		x := p.x(s)
		p.printf("<line class=\"tick\" x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\"/><text class=\"step\" x=\"%.1f\" y=\"%.0f\">%d</text>\n",
			x, height-footHeight, x, height-footHeight+5, x+2, height-footHeight+16, s)
	}
	p.printf("</g>\n")
}

func (p *page) lane(t int, width float64) {
	l := p.l
	y := p.y(t)
	name := l.tasks[t]
	p.printf("<g id=\"%s\" class=\"lane\" data-task=\"%s\" data-task-id=\"%d\">\n", l.laneIDs[t], esc(name), t)
	p.printf("<rect class=\"lane-bg\" x=\"0\" y=\"%.0f\" width=\"%.0f\" height=\"%d\"/>\n", y, width, laneHeight)
	for _, s := range l.starves {
		if s.task != t {
			continue
		}
		x0, x1 := p.x(s.from), p.x(s.to)
		class := "starve"
		if s.inferred {
			class += " inferred"
		}
		p.printf("<rect class=\"%s\" x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%d\"><title>%s\ndecisions %d–%d, %s → %s; the shading ends because %s</title></rect>\n",
			class, x0, y+1, max(x1-x0, 1), laneHeight-2, esc(s.text), s.from, s.to, esc(fmtAt(s.at)), esc(fmtAt(s.until)), esc(s.ended))
	}
	for _, r := range l.runs {
		if r.task != t {
			continue
		}
		x0, x1 := p.x(r.from), p.x(r.to)
		p.printf("<rect class=\"run\" x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%d\"><title>%s #%d runs, decisions %d–%d from %s (since %s, until %s)</title></rect>\n",
			x0, y+(laneHeight-barHeight)/2, max(x1-x0, p.stepW/2), barHeight, esc(name), t, r.from, r.to, esc(fmtAt(r.at)), esc(r.since), esc(r.end))
	}
	for _, n := range l.notes {
		if n.task != t {
			continue
		}
		x := p.x(n.step) + p.stepW/2
		p.printf("<circle class=\"%s\" cx=\"%.1f\" cy=\"%.0f\" r=\"3\"><title>decision %d, %s: %s</title></circle>\n", n.class(), x, y+5, n.step, esc(fmtAt(n.at)), esc(n.text))
	}
	lastLabel := 0.0
	for _, m := range l.marks {
		if m.task != t {
			continue
		}
		p.marker(m, y, &lastLabel)
	}
	p.printf("</g>\n")
}

func (p *page) marker(m *mark, y float64, lastLabel *float64) {
	cx, cy := p.x(m.step)+p.stepW/2, y+laneHeight/2
	class := "event"
	switch {
	case m.stale:
		class += " stale"
	case m.notable:
		class += " notable"
	case m.flowStart:
		class += " flow-start"
	case m.flowEnd:
		class += " flow-end"
	default:
		class += " routine"
	}
	for _, k := range m.kinds {
		class += " ev-" + slug(k)
	}
	var tip strings.Builder
	fmt.Fprintf(&tip, "decision %d, %s", m.step, fmtAt(m.at))
	for _, line := range m.lines {
		tip.WriteString("\n")
		tip.WriteString(line)
	}
	if m.more > 0 {
		fmt.Fprintf(&tip, "\n… and %d more", m.more)
	}
	if m.notable || m.stale {
		p.printf("<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" transform=\"rotate(45 %.1f %.1f)\"><title>%s</title></rect>\n",
			class, cx-4, cy-4, cx, cy, esc(tip.String()))
		if m.label != "" && cx >= *lastLabel {
			*lastLabel = cx + 8 + 5.5*float64(len([]rune(m.label)))
			p.printf("<text class=\"event-label\" x=\"%.1f\" y=\"%.0f\">%s</text>\n", cx+6, y+10, esc(m.label))
		}
		return
	}
	r := 2.5
	if len(m.lines)+m.more > 1 {
		r = 3.5
	}
	p.printf("<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\"><title>%s</title></circle>\n", class, cx, cy, r, esc(tip.String()))
}

// labels names the lanes, on top of everything; the script keeps them in
// view while the drawing scrolls.
func (p *page) labels() {
	l := p.l
	p.printf("<g id=\"lane-labels\">\n")
	for _, t := range l.lanes {
		y := p.y(t)
		p.printf("<rect class=\"label-bg\" x=\"0\" y=\"%.0f\" width=\"%d\" height=\"%d\"/><text class=\"lane-label\" x=\"6\" y=\"%.0f\">%s #%d<title>task %d: %s</title></text>\n",
			y+1, padLeft-24, laneHeight-2, y+laneHeight/2+4, esc(shorten(l.tasks[t], 18)), t, t, esc(l.tasks[t]))
	}
	p.printf("</g>\n")
}

// switchLines draws each switch as a thin line from the lane of the task
// that handed the baton on to the lane of the one that got it.
func (p *page) switchLines() {
	l := p.l
	p.printf("<g id=\"switches\">\n")
	for _, s := range l.switches {
		if !p.hasLane(s.from) || !p.hasLane(s.to) {
			continue
		}
		x := p.x(s.step)
		p.printf("<line class=\"switch\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"><title>decision %d, %s: at %s, %s #%d → %s #%d runs</title></line>\n",
			x, p.mid(s.from), x, p.mid(s.to), s.step, esc(fmtAt(s.at)), esc(s.point), esc(l.tasks[s.from]), s.from, esc(l.tasks[s.to]), s.to)
	}
	p.printf("</g>\n")
}

// flowArrows draws the flows, the highlighted ones last so that they lie
// on top.
func (p *page) flowArrows() {
	l := p.l
	p.printf("<g id=\"flows\">\n")
	for pass := 0; pass < 2; pass++ {
		for _, f := range l.flows {
			if f.stale != (pass == 1) || !p.hasLane(f.fromTask) || !p.hasLane(f.toTask) {
				continue
			}
			x0, y0 := p.x(f.fromStep)+p.stepW/2, p.mid(f.fromTask)
			x1, y1 := p.x(f.toStep)+p.stepW/2, p.mid(f.toTask)
			class, marker, id := "frame-flow", "arrow", ""
			if strings.Contains(f.kind, "drop") {
				class += " dropped"
			}
			if f.clipped {
				class += " clipped"
			}
			if f.stale {
				class += " stale"
				marker = "arrow-stale"
				id = fmt.Sprintf(" id=\"stale-flow-%d\"", f.id)
				p.printf("<circle class=\"stale stale-origin\" cx=\"%.1f\" cy=\"%.1f\" r=\"6\"><title>the stale frame %d is emitted here</title></circle>\n", x0, y0, f.id)
			}
			dx := max((x1-x0)/2, 12)
			p.printf("<path%s class=\"%s\" data-frame=\"%d\" d=\"M%.1f %.1f C%.1f %.1f, %.1f %.1f, %.1f %.1f\" marker-end=\"url(#%s)\"><title>%s</title></path>\n",
				id, class, f.id, x0, y0, x0+dx, y0, x1-dx, y1, x1, y1, marker, esc(f.text))
		}
	}
	p.printf("</g>\n")
}

func pow10(n int) int64 {
	x := int64(1)
	for range n {
		x *= 10
	}
	return x
}

// fmtAt writes a virtual time as "+26.9ms".
func fmtAt(d time.Duration) string { return "+" + d.String() }

const css = `
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:18px;margin:0 0 8px}
table.header{border-collapse:collapse;margin-bottom:8px}
table.header th{text-align:left;padding:1px 12px 1px 0;color:#555;font-weight:normal}
table.header td{font-family:ui-monospace,Menlo,Consolas,monospace}
.fail{color:#c62828;font-weight:bold}.pass{color:#2e7d32;font-weight:bold}
pre.error{background:#fdecea;border-left:4px solid #c62828;padding:6px 10px;white-space:pre-wrap;margin:6px 0}
ul.notices{background:#fff8e1;border-left:4px solid #f9a825;padding:6px 10px 6px 28px;margin:6px 0}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;margin:8px 0}
.legend .item{display:inline-flex;align-items:center;gap:4px}
.controls{margin:6px 0}
#status{color:#555;margin-left:12px}
.scroll{overflow-x:auto;border:1px solid #ddd}
svg text{font:11px system-ui,sans-serif;fill:#333}
.lane-bg{fill:#fafafa;stroke:#eee}
.lane:nth-of-type(even) .lane-bg{fill:#f3f5f8}
.lane-label{font-weight:600}
.label-bg{fill:#fff;opacity:.85}
.axis-title{fill:#777}
.time{fill:#333}.step{fill:#777;font-size:10px}
.tick{stroke:#999}.grid{stroke:#e3e3e3}
.run{fill:#5b8def;stroke:#3a6fd0;stroke-width:.5}
.switch{stroke:#9aa;stroke-width:.8;stroke-dasharray:2 2}
.starve{fill:url(#hatch);stroke:#f0a040;stroke-width:.6}
.hatch-bg{fill:#fff3e0}.hatch-line{stroke:#f6b26b;stroke-width:2}
.wait{fill:#8e24aa}
.strategy{fill:#f57c00}
.reach{fill:#2e7d32;stroke:#fff;stroke-width:1}
.event{stroke:#fff;stroke-width:.6}
.flow-start{fill:#1565c0}.flow-end{fill:#43a047}.routine{fill:#9e9e9e}.notable{fill:#ff8f00;stroke:#6d4c00}
.event-label{font-size:10px;fill:#6d4c00}
.frame-flow{fill:none;stroke:#90a4ae;stroke-width:.8;opacity:.7}
.frame-flow.dropped{stroke-dasharray:3 2;opacity:.45}
.frame-flow:hover{stroke:#000;opacity:1;stroke-width:2}
.arrowhead{fill:#90a4ae}.arrowhead-stale{fill:#d50000}
.frame-flow.stale{stroke:#d50000;stroke-width:3;opacity:1}
.event.stale{fill:#d50000;stroke:#fff}
.stale-origin{fill:none;stroke:#d50000;stroke-width:2}
.hide-routine .frame-flow:not(.stale){display:none}
`

// script summarises what is drawn, scrolls to the first stale frame and
// toggles routine flows; the page reads without it.
const script = `
(function(){
  var svg=document.getElementById('timeline');
  function n(sel){return svg.querySelectorAll(sel).length;}
  var counts={lanes:n('.lane'),runs:n('.run'),switches:n('.switch'),flows:n('.frame-flow'),stale:n('.frame-flow.stale'),starve:n('.starve'),events:n('.event')};
  var st=document.getElementById('status');
  for(var k in counts){st.setAttribute('data-'+k,counts[k]);}
  st.textContent=counts.lanes+' lanes, '+counts.runs+' running stretches, '+counts.switches+' switches, '+counts.events+' event markers, '+
    counts.flows+' frame flows ('+counts.stale+' stale), '+counts.starve+' starvation windows';
  var box=document.getElementById('scroll');
  var labels=document.getElementById('lane-labels');
  box.addEventListener('scroll',function(){labels.setAttribute('transform','translate('+box.scrollLeft+',0)');});
  function toStale(){
    var s=svg.querySelector('.event.stale')||svg.querySelector('.frame-flow.stale');
    if(!s){return;}
    var b=s.getBBox();
    box.scrollLeft=Math.max(0,b.x+b.width-box.clientWidth*2/3);
    labels.setAttribute('transform','translate('+box.scrollLeft+',0)');
  }
  var btn=document.getElementById('to-stale');
  if(counts.stale===0){btn.disabled=true;}
  btn.addEventListener('click',toStale);
  document.getElementById('show-routine').addEventListener('change',function(e){
    svg.classList.toggle('hide-routine',!e.target.checked);
  });
  toStale();
  document.body.setAttribute('data-ready','1');
})();
`
