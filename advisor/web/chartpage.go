package web

import (
	"fmt"
	"html"
	"strconv"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// chartsHTML is the landing page's charts section: four figures, each with an anchor that a
// finding's evidence link points to.
func chartsHTML(c Charts) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<section id="charts" class="charts" data-evaluated="%s">`, c.Evaluated.UTC().Format(time.RFC3339Nano))
	b.WriteString(`<h2>Charts</h2>`)
	if c.WindowSeconds > 0 {
		fmt.Fprintf(&b, `<p>Over the last %s of history (times in UTC).</p>`, html.EscapeString(formatWindow(c.WindowSeconds)))
	}
	b.WriteString(`<div class="chart-grid">`)
	figure(&b, anchorSync, "Sync latency per wal_sync_method and write pattern (mean, 95% interval)", syncLatencySVG(c.SyncLatency), c.SyncLatency.Missing)
	figure(&b, anchorWAL, "WAL written per second, and the share of WAL writes forced by full WAL buffers", walSVG(c), missingIf(len(c.WAL) == 0, "not enough history yet: WAL rates need two snapshots"))
	figure(&b, anchorDirty, "Dirty and Writeback memory against the kernel's writeback thresholds", dirtySVG(c), missingIf(len(c.Dirty) == 0, "no kernel readings yet"))
	figure(&b, anchorCheckpoints, "Checkpoints started (timed, requested) and their sync time", checkpointsSVG(c), missingIf(len(c.Checkpoints) == 0, "no checkpoint in the history window"))
	b.WriteString(`</div></section>`)
	return b.String()
}

func missingIf(cond bool, why string) string {
	if cond {
		return why
	}
	return ""
}

// figure writes one chart, or why it cannot be drawn yet.
func figure(b *strings.Builder, id, caption, body, missing string) {
	fmt.Fprintf(b, `<figure id="%s" class="chart-figure"><figcaption>%s</figcaption>`, id, html.EscapeString(caption))
	if missing != "" {
		fmt.Fprintf(b, `<p class="chart-missing">%s</p>`, html.EscapeString(missing))
	} else {
		b.WriteString(body)
	}
	b.WriteString(`</figure>`)
}

func formatWindow(secs float64) string {
	return (time.Duration(secs) * time.Second).Round(time.Second).String()
}

// Rows of the sync latency chart.
const (
	syncRowHeight = 26.0
	syncLabelW    = 160.0
)

// syncLatencySVG draws one horizontal bar per method and pattern: the bar to the mean, a whisker
// over the 95% interval, the method in use marked.
func syncLatencySVG(c SyncLatencyChart) string {
	if len(c.Bars) == 0 {
		return ""
	}
	top := 0.0
	for _, bar := range c.Bars {
		top = max(top, bar.CIHighSeconds, bar.MeanSeconds)
	}
	ticks, top := niceTicks(top)
	height := marginTop + syncRowHeight*float64(len(c.Bars)) + marginBelow
	plot := chartWidth - syncLabelW - marginRight - 95 // room for the value label
	x := func(v float64) float64 { return syncLabelW + plot*v/top }
	var b strings.Builder
	svgOpen(&b, "sync_latency", "sync latency per method, in use: "+c.MethodInUse, height)
	for _, t := range ticks {
		fmt.Fprintf(&b, `<line class="grid" x1="%s" y1="%s" x2="%s" y2="%s" stroke="#ddd"/>`, num(x(t)), num(marginTop), num(x(t)), num(height-marginBelow))
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="middle" font-size="12" fill="#333">%s</text>`, num(x(t)), num(height-8), tickLabel(formatSeconds, t))
	}
	for i, bar := range c.Bars {
		y := marginTop + syncRowHeight*float64(i)
		mid := y + syncRowHeight/2
		color, weight, label, value := colorBlue, "normal", syncBarLabel(bar), formatSeconds(bar.MeanSeconds)
		if bar.InUse {
			color, weight, label, value = colorOrange, "bold", "▶ "+label, value+" · in use"
		}
		fmt.Fprintf(&b, `<g class="bar" data-method="%s" data-writes-per-sync="%d" data-direct-io="%t" data-in-use="%t" data-samples="%d" data-mean-seconds="%s" data-ci-low-seconds="%s" data-ci-high-seconds="%s">`,
			html.EscapeString(bar.Method), bar.WritesPerSync, bar.DirectIO, bar.InUse, bar.Samples, num(bar.MeanSeconds), num(bar.CILowSeconds), num(bar.CIHighSeconds))
		fmt.Fprintf(&b, `<title>%s: mean %s, 95%% interval %s to %s, %d samples</title>`, html.EscapeString(label),
			formatSeconds(bar.MeanSeconds), formatSeconds(bar.CILowSeconds), formatSeconds(bar.CIHighSeconds), bar.Samples)
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="end" font-size="12" font-weight="%s" fill="#222">%s</text>`, num(syncLabelW-6), num(mid+4), weight, html.EscapeString(label))
		fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"/>`, num(syncLabelW), num(y+5), num(x(bar.MeanSeconds)-syncLabelW), num(syncRowHeight-10), color)
		lo, hi := x(bar.CILowSeconds), x(bar.CIHighSeconds)
		fmt.Fprintf(&b, `<path class="interval" d="M%s %sH%s M%s %sV%s M%s %sV%s" stroke="#222" stroke-width="1.5" fill="none"/>`,
			num(lo), num(mid), num(hi), num(lo), num(mid-5), num(mid+5), num(hi), num(mid-5), num(mid+5))
		fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="12" font-weight="%s" fill="#222">%s</text>`, num(hi+6), num(mid+4), weight, value)
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

func syncBarLabel(bar SyncBar) string {
	l := bar.Method
	if bar.WritesPerSync != 1 {
		l += " ×" + strconv.Itoa(bar.WritesPerSync)
	}
	if bar.DirectIO {
		l += " direct"
	}
	return l
}

func walSVG(c Charts) string {
	times := make([]time.Time, len(c.WAL))
	rate := series{key: "wal_bytes_per_second", label: "WAL bytes/s", color: colorBlue, values: make([]float64, len(c.WAL))}
	share := series{key: "wal_buffers_full_share", label: "writes forced by full WAL buffers", color: colorRed, values: make([]float64, len(c.WAL))}
	for i, p := range c.WAL {
		times[i], rate.values[i], share.values[i] = p.Time, p.BytesPerSecond, p.BuffersFullShare
	}
	from, to := window(c)
	top := timeChart{kind: "wal_bytes", from: from, to: to, times: times, series: []series{rate}, format: formatBytesPerSecond}
	bottom := timeChart{kind: "wal_buffers_full", from: from, to: to, times: times, series: []series{share}, format: formatShare, minTop: 1, height: 150}
	return top.svg() + bottom.svg() + legend(rate, share)
}

func dirtySVG(c Charts) string {
	times := make([]time.Time, len(c.Dirty))
	dirty := series{key: "dirty_bytes", label: "Dirty", color: colorBlue, values: make([]float64, len(c.Dirty))}
	wb := series{key: "writeback_bytes", label: "Writeback", color: colorGreen, values: make([]float64, len(c.Dirty))}
	bg := series{key: "dirty_background_threshold_bytes", label: "background writeback threshold", color: colorOrange, dashed: true, values: make([]float64, len(c.Dirty))}
	limit := series{key: "dirty_threshold_bytes", label: "throttling threshold", color: colorRed, dashed: true, values: make([]float64, len(c.Dirty))}
	for i, p := range c.Dirty {
		times[i] = p.Time
		dirty.values[i], wb.values[i] = float64(p.DirtyBytes), float64(p.WritebackBytes)
		bg.values[i], limit.values[i] = float64(p.DirtyBackgroundThresholdBytes), float64(p.DirtyThresholdBytes)
	}
	from, to := window(c)
	ch := timeChart{kind: "dirty", from: from, to: to, times: times, series: []series{limit, bg, dirty, wb}, format: collector.FormatBytes}
	return ch.svg() + legend(dirty, wb, bg, limit)
}

// checkpointsSVG draws each interval with checkpoints as a bar of its sync time, with a marker
// per start at the base: blue for timed, orange for requested.
func checkpointsSVG(c Charts) string {
	top := 0.0
	for _, p := range c.Checkpoints {
		top = max(top, p.SyncSeconds)
	}
	// A sync time of 0 (nothing to sync) still needs an axis.
	ticks, top := niceTicks(max(top, 1e-3))
	from, to := window(c)
	ys, xs := yScale{top: top, height: chartHeight}, xScale{from: from, to: to}
	var b strings.Builder
	svgOpen(&b, "checkpoints", "checkpoint starts and sync times", chartHeight)
	axes(&b, ys, xs, ticks, formatSeconds)
	for _, p := range c.Checkpoints {
		x0, x1 := xs.x(p.From), xs.x(p.Time)
		if x1-x0 < 4 {
			x0 = x1 - 4
		}
		color := colorBlue
		if p.Requested > 0 {
			color = colorOrange
		}
		fmt.Fprintf(&b, `<g class="checkpoint" data-time="%s" data-timed="%s" data-requested="%s" data-write-seconds="%s" data-sync-seconds="%s">`,
			p.Time.UTC().Format(time.RFC3339Nano), num(p.Timed), num(p.Requested), num(p.WriteSeconds), num(p.SyncSeconds))
		fmt.Fprintf(&b, `<title>%s: %s timed, %s requested; write %s, sync %s</title>`, p.Time.UTC().Format("15:04:05"),
			num(p.Timed), num(p.Requested), formatSeconds(p.WriteSeconds), formatSeconds(p.SyncSeconds))
		y := ys.y(p.SyncSeconds)
		fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s" fill-opacity="0.8"/>`, num(x0), num(y), num(x1-x0), num(ys.y(0)-y), color)
		fmt.Fprintf(&b, `<path class="start" d="M%s %sl-5 9h10z" fill="%s"/>`, num(x1), num(ys.y(0)), color)
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return b.String() + legend(
		series{label: "sync time, interval with timed checkpoints", color: colorBlue},
		series{label: "sync time, interval with requested checkpoints", color: colorOrange})
}

// window is the time the charts span: the history window ending at the evaluation.
func window(c Charts) (time.Time, time.Time) {
	to := c.Evaluated
	return to.Add(-time.Duration(c.WindowSeconds * float64(time.Second))), to
}

// chartsCSS styles the charts and turns the findings table into cards on a narrow screen, so
// that nothing scrolls sideways at 420 pixels.
const chartsCSS = `
section.charts .chart-grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 30rem), 1fr)); gap: 1.5rem 2rem; }
section.charts figure { margin: 0; min-width: 0; }
section.charts figcaption { font-weight: bold; margin-bottom: 0.3rem; }
section.charts svg.chart { display: block; height: auto; max-width: 100%; }
ul.legend { list-style: none; padding: 0; margin: 0.3rem 0 0 0; display: flex; flex-wrap: wrap; gap: 0.3rem 1rem; font-size: 0.9rem; }
ul.legend .swatch { display: inline-block; width: 1.5rem; margin-right: 0.4rem; vertical-align: middle; }
p.chart-missing { color: #666; font-style: italic; }
main { overflow-wrap: break-word; }
table.findings td ul.evidence { margin: 0; padding-left: 1rem; }
@media (max-width: 700px) {
  table.findings, table.findings tbody, table.findings tr, table.findings td { display: block; width: auto; }
  table.findings thead { display: none; }
  table.findings tr { border: 1px solid #ccc; margin-bottom: 0.8rem; padding: 0.3rem; }
  table.findings td { border: none; padding: 0.15rem 0.3rem; }
  table.findings td:nth-child(2)::before { content: "severity: "; color: #666; font-weight: normal; }
  table.findings td:nth-child(3)::before { content: "setting: "; color: #666; }
  table.findings td:nth-child(4)::before { content: "current → recommended: "; color: #666; }
  table.findings td:nth-child(5)::before { content: "action: "; color: #666; }
  table.findings td:nth-child(7)::before { content: "evidence: "; color: #666; }
}
`
