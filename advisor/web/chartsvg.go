package web

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// The charts are inline SVG drawn here, on the server: the landing page needs no script, no
// external asset and no second request, so it works the same behind TLS, basic auth and a
// proxy that serves nothing but the daemon. Every chart scales to its container (a viewBox and
// width 100%), which is what keeps a 420-pixel-wide screen from scrolling sideways.
//
// Each drawn figure carries its value in a data-* attribute, formatted as the JSON API formats
// it, so that a test (or a curious reader of the source) can check the picture against
// /api/v1/charts; and a <title>, which a browser shows on hover.

// Drawing area of every chart, in viewBox units.
const (
	chartWidth  = 480.0
	chartHeight = 220.0
	marginLeft  = 70.0
	marginRight = 14.0
	marginTop   = 12.0
	marginBelow = 26.0
)

// Colours: one per series, readable on white and told apart by people with the common colour
// vision deficiencies (Okabe-Ito).
const (
	colorBlue   = "#0072b2"
	colorOrange = "#e69f00"
	colorGreen  = "#009e73"
	colorRed    = "#d55e00"
	colorGrey   = "#666666"
)

// series is one line over a time chart's times.
type series struct {
	key, label, color string
	dashed            bool
	values            []float64
}

// timeChart is a line chart over time.
type timeChart struct {
	kind     string
	from, to time.Time
	times    []time.Time
	series   []series
	format   func(float64) string
	// minTop is the lowest top of the y axis (a ratio chart always reaches 100%).
	minTop float64
	// height is the chart's height in viewBox units (0: chartHeight).
	height float64
}

// svgOpen starts an SVG that scales to its container's width.
func svgOpen(b *strings.Builder, kind, label string, height float64) {
	fmt.Fprintf(b, `<svg class="chart" data-chart="%s" viewBox="0 0 %s %s" width="100%%" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`,
		kind, num(chartWidth), num(height), html.EscapeString(label))
}

// yScale maps values in [0, top] to the drawing area of a chart of the given height.
type yScale struct{ top, height float64 }

func (s yScale) y(v float64) float64 {
	plot := s.height - marginTop - marginBelow
	return marginTop + plot*(1-v/s.top)
}

// xScale maps times in [from, to] to the drawing area's width.
type xScale struct{ from, to time.Time }

func (s xScale) x(t time.Time) float64 {
	span := s.to.Sub(s.from).Seconds()
	plot := chartWidth - marginLeft - marginRight
	if span <= 0 {
		return marginLeft + plot
	}
	return marginLeft + plot*t.Sub(s.from).Seconds()/span
}

// axes draws the y axis with its ticks and grid, and the x axis with its first, middle and last
// time (UTC).
func axes(b *strings.Builder, ys yScale, xs xScale, ticks []float64, format func(float64) string) {
	right := chartWidth - marginRight
	for _, t := range ticks {
		y := ys.y(t)
		fmt.Fprintf(b, `<line class="grid" x1="%s" y1="%s" x2="%s" y2="%s" stroke="#ddd"/>`, num(marginLeft), num(y), num(right), num(y))
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="end" font-size="12" fill="#333">%s</text>`, num(marginLeft-6), num(y+4), html.EscapeString(tickLabel(format, t)))
	}
	base := ys.y(0)
	fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333"/>`, num(marginLeft), num(base), num(right), num(base))
	mid := xs.from.Add(xs.to.Sub(xs.from) / 2)
	for i, t := range []time.Time{xs.from, mid, xs.to} {
		anchor := [...]string{"start", "middle", "end"}[i]
		fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="%s" font-size="12" fill="#333">%s</text>`,
			num(xs.x(t)), num(ys.height-8), anchor, t.UTC().Format("15:04:05"))
	}
}

// svg draws the chart; thresholds are dashed series.
func (c timeChart) svg() string {
	var b strings.Builder
	top := c.minTop
	for _, s := range c.series {
		for _, v := range s.values {
			top = max(top, v)
		}
	}
	ticks, top := niceTicks(top)
	height := c.height
	if height == 0 {
		height = chartHeight
	}
	ys, xs := yScale{top: top, height: height}, xScale{from: c.from, to: c.to}
	labels := make([]string, 0, len(c.series))
	for _, s := range c.series {
		labels = append(labels, s.label)
	}
	svgOpen(&b, c.kind, strings.Join(labels, ", ")+" over time", height)
	axes(&b, ys, xs, ticks, c.format)
	for _, s := range c.series {
		values := make([]string, len(s.values))
		points := make([]string, len(s.values))
		for i, v := range s.values {
			values[i] = num(v)
			points[i] = num(xs.x(c.times[i])) + "," + num(ys.y(v))
		}
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		last := ""
		if n := len(s.values); n > 0 {
			last = ": " + c.format(s.values[n-1]) + " at " + c.times[n-1].UTC().Format("15:04:05")
		}
		fmt.Fprintf(&b, `<polyline class="series" data-series="%s" data-values="%s" points="%s" fill="none" stroke="%s" stroke-width="2"%s><title>%s</title></polyline>`,
			s.key, strings.Join(values, " "), strings.Join(points, " "), s.color, dash, html.EscapeString(s.label+last))
		if len(s.values) == 1 {
			// One reading makes no line: show it as a dot.
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`, num(xs.x(c.times[0])), num(ys.y(s.values[0])), s.color)
		}
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// legend is the chart's key, in HTML so that it wraps on a narrow screen.
func legend(items ...series) string {
	var b strings.Builder
	b.WriteString(`<ul class="legend">`)
	for _, s := range items {
		style := "solid"
		if s.dashed {
			style = "dashed"
		}
		fmt.Fprintf(&b, `<li><span class="swatch" style="border-top: 3px %s %s"></span>%s</li>`, style, s.color, html.EscapeString(s.label))
	}
	b.WriteString(`</ul>`)
	return b.String()
}

// niceTicks returns 0 and about four round steps up to at least top (1, 2 or 5 times a power
// of ten), and the axis top they reach.
func niceTicks(top float64) ([]float64, float64) {
	if !(top > 0) || math.IsInf(top, 0) {
		top = 1
	}
	raw := top / 4
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	step := pow * 10
	for _, m := range []float64{1, 2, 5} {
		if m*pow >= raw {
			step = m * pow
			break
		}
	}
	var ticks []float64
	for v := 0.0; ; v += step {
		ticks = append(ticks, v)
		if v >= top*(1-1e-9) {
			return ticks, v
		}
	}
}

// num formats a number as encoding/json does for a float64 of that value (shortest exact
// form), so that data-* attributes compare equal to the API's figures.
func num(v float64) string {
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		s := strconv.FormatFloat(v, 'e', -1, 64)
		// encoding/json writes e-07 as e-7.
		if n := len(s); n >= 4 && s[n-4] == 'e' && s[n-3] == '-' && s[n-2] == '0' {
			s = s[:n-2] + s[n-1:]
		}
		return s
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func formatBytesPerSecond(v float64) string { return collector.FormatBytes(v) + "/s" }

// formatSeconds prints a duration from microseconds to seconds.
func formatSeconds(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a < 1e-3:
		return strconv.FormatFloat(v*1e6, 'f', decimals(v*1e6), 64) + " µs"
	case a < 1:
		return strconv.FormatFloat(v*1e3, 'f', decimals(v*1e3), 64) + " ms"
	}
	return strconv.FormatFloat(v, 'f', decimals(v), 64) + " s"
}

func formatShare(v float64) string {
	return strconv.FormatFloat(v*100, 'f', decimals(v*100), 64) + "%"
}

// decimals keeps about three significant digits.
func decimals(v float64) int {
	switch a := math.Abs(v); {
	case a == 0 || a >= 100:
		return 0
	case a >= 10:
		return 1
	}
	return 2
}

// tickLabel formats an axis tick without trailing zeros: ticks are round, "2 ms" reads faster
// than "2.00 ms" and leaves room between the labels of a narrow axis.
func tickLabel(format func(float64) string, v float64) string {
	text := format(v)
	end := strings.IndexFunc(text, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != '-' })
	if end < 0 {
		end = len(text)
	}
	number, rest := text[:end], text[end:]
	if strings.Contains(number, ".") {
		number = strings.TrimRight(strings.TrimRight(number, "0"), ".")
	}
	return number + rest
}
