// Package svgplot draws simple line charts as standalone SVG documents, with no dependency:
// one or more panels side by side, each with axes, ticks, axis labels, a legend and one
// polyline (with point markers) per series. The x axis, or the y axis, can be logarithmic
// (for geometric sweeps).
package svgplot

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// Point is one (x, y) observation.
type Point struct{ X, Y float64 }

// Series is one line.
type Series struct {
	Name   string
	Points []Point
}

// Panel is one chart.
type Panel struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
	// YZero makes a linear y axis start at 0 (default: at the nice value below the minimum).
	YZero  bool
	Series []Series
}

// Figure is a titled grid of panels.
type Figure struct {
	Title  string
	Note   string // one line under the title (e.g. the machine and the run)
	Panels []Panel
	Cols   int // panels per row (default: all in one row, at most 2)
}

const (
	panelW, panelH = 520, 340
	marginL        = 78
	marginR        = 18
	marginT        = 34
	marginB        = 52
	headerH        = 54
)

// Palette is the series colors, in order.
var Palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// Render returns the figure as an SVG document.
func (f Figure) Render() []byte {
	cols := f.Cols
	if cols <= 0 {
		cols = min(max(len(f.Panels), 1), 2)
	}
	rows := (len(f.Panels) + cols - 1) / cols
	w, h := cols*panelW, headerH+rows*panelH
	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="22" text-anchor="middle" font-size="16" font-weight="bold">%s</text>`+"\n", w/2, esc(f.Title))
	if f.Note != "" {
		fmt.Fprintf(&b, `<text x="%d" y="42" text-anchor="middle" font-size="11" fill="#555555">%s</text>`+"\n", w/2, esc(f.Note))
	}
	for i, p := range f.Panels {
		x0 := (i % cols) * panelW
		y0 := headerH + (i/cols)*panelH
		p.render(&b, x0, y0)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func esc(s string) string { return html.EscapeString(s) }

// axis maps data values to pixels.
type axis struct {
	log      bool
	lo, hi   float64 // data range (log10 of it when log)
	p0, p1   float64 // pixel range
	ticks    []float64
	tickText []string
}

func (a axis) pos(v float64) float64 {
	if a.log {
		v = math.Log10(v)
	}
	if a.hi == a.lo {
		return (a.p0 + a.p1) / 2
	}
	return a.p0 + (v-a.lo)/(a.hi-a.lo)*(a.p1-a.p0)
}

// newAxis builds an axis over the values (non-positive values are dropped on a log axis).
func newAxis(vals []float64, log, zero bool, p0, p1 float64) axis {
	a := axis{log: log, p0: p0, p1: p1}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) || (log && v <= 0) {
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if math.IsInf(lo, 1) { // no data
		lo, hi = 0, 1
		if log {
			lo, hi = 1, 10
		}
	}
	if log {
		l, h := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if h == l {
			h = l + 1
		}
		a.lo, a.hi = l, h
		for e := l; e <= h; e++ {
			a.ticks = append(a.ticks, math.Pow(10, e))
			a.tickText = append(a.tickText, Human(math.Pow(10, e)))
		}
		return a
	}
	if zero && lo > 0 {
		lo = 0
	}
	if hi == lo {
		if hi == 0 {
			hi = 1
		} else {
			lo, hi = lo-math.Abs(lo)*0.1, hi+math.Abs(hi)*0.1
		}
	}
	step := niceStep((hi - lo) / 5)
	// A value a hair past a tick (30.02 minutes) does not open a whole new step.
	a.lo = math.Floor(lo/step+1e-3) * step
	a.hi = math.Ceil(hi/step-1e-3) * step
	for v := a.lo; v <= a.hi+step/2; v += step {
		a.ticks = append(a.ticks, v)
		a.tickText = append(a.tickText, Human(v))
	}
	return a
}

// niceStep rounds a raw step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// Human formats a tick value compactly: 1500 -> "1.5k", 2000000 -> "2M", 0.25 -> "0.25".
func Human(v float64) string {
	av := math.Abs(v)
	trim := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	round := func(x float64) float64 { return math.Round(x*1000) / 1000 }
	switch {
	case av >= 1e9:
		return trim(round(v/1e9)) + "G"
	case av >= 1e6:
		return trim(round(v/1e6)) + "M"
	case av >= 1e3:
		return trim(round(v/1e3)) + "k"
	case av == 0:
		return "0"
	case av < 0.01:
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
	return trim(math.Round(v*1000) / 1000)
}

func (p Panel) render(b *bytes.Buffer, x0, y0 int) {
	left, right := float64(x0+marginL), float64(x0+panelW-marginR)
	top, bottom := float64(y0+marginT), float64(y0+panelH-marginB)
	var xs, ys []float64
	for _, s := range p.Series {
		for _, pt := range s.Points {
			xs, ys = append(xs, pt.X), append(ys, pt.Y)
		}
	}
	ax := newAxis(xs, p.LogX, false, left, right)
	ay := newAxis(ys, p.LogY, p.YZero, bottom, top)
	fmt.Fprintf(b, `<g class="panel">`+"\n")
	fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="13" font-weight="bold">%s</text>`+"\n", (left+right)/2, y0+20, esc(p.Title))
	// grid and ticks
	for i, t := range ax.ticks {
		x := ax.pos(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", x, top, x, bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333333">%s</text>`+"\n", x, bottom+16, esc(ax.tickText[i]))
	}
	for i, t := range ay.ticks {
		y := ay.pos(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", left, y, right, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#333333">%s</text>`+"\n", left-6, y+4, esc(ay.tickText[i]))
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333333"/>`+"\n", left, top, right-left, bottom-top)
	// axis labels
	xl := p.XLabel
	if p.LogX {
		xl += " (log scale)"
	}
	yl := p.YLabel
	if p.LogY {
		yl += " (log scale)"
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (left+right)/2, bottom+38, esc(xl))
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="middle" transform="rotate(-90 %d %.1f)">%s</text>`+"\n", x0+16, (top+bottom)/2, x0+16, (top+bottom)/2, esc(yl))
	// series, then the legend on a white box above them, in the corner that hides the
	// fewest points
	var legend bytes.Buffer
	wmax := 0
	for _, s := range p.Series {
		wmax = max(wmax, len([]rune(s.Name)))
	}
	lw, lh := 34+float64(wmax)*6.6, float64(16*len(p.Series)+4)
	var projected [][2]float64
	for _, s := range p.Series {
		var prev *[2]float64
		for _, pt := range s.Points {
			if (p.LogX && pt.X <= 0) || (p.LogY && pt.Y <= 0) || math.IsNaN(pt.X) || math.IsNaN(pt.Y) {
				continue
			}
			q := [2]float64{ax.pos(pt.X), ay.pos(pt.Y)}
			if prev != nil { // sample the segment too, so a line crossing the box counts
				for k := 1; k < 8; k++ {
					f := float64(k) / 8
					projected = append(projected, [2]float64{prev[0] + f*(q[0]-prev[0]), prev[1] + f*(q[1]-prev[1])})
				}
			}
			projected = append(projected, q)
			prev = &q
		}
	}
	lx, ly0 := left+4, top+3
	best := -1
	for _, c := range [][2]float64{{left + 4, top + 3}, {right - 4 - lw, top + 3}, {left + 4, bottom - 3 - lh}, {right - 4 - lw, bottom - 3 - lh}} {
		n := 0
		for _, q := range projected {
			if q[0] >= c[0] && q[0] <= c[0]+lw && q[1] >= c[1] && q[1] <= c[1]+lh {
				n++
			}
		}
		if best < 0 || n < best {
			best, lx, ly0 = n, c[0], c[1]
		}
	}
	if len(p.Series) > 0 {
		fmt.Fprintf(&legend, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="#ffffff" fill-opacity="0.85" stroke="#cccccc"/>`+"\n",
			lx, ly0, lw, lh)
	}
	for i, s := range p.Series {
		color := Palette[i%len(Palette)]
		var pts []string
		for _, pt := range s.Points {
			if (p.LogX && pt.X <= 0) || (p.LogY && pt.Y <= 0) || math.IsNaN(pt.X) || math.IsNaN(pt.Y) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", ax.pos(pt.X), ay.pos(pt.Y)))
		}
		fmt.Fprintf(b, `<polyline class="series" data-name="%s" fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", esc(s.Name), color, strings.Join(pts, " "))
		if len(s.Points) <= 60 {
			for _, xy := range pts {
				x, y, _ := strings.Cut(xy, ",")
				fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", x, y, color)
			}
		}
		// legend entry
		ly := ly0 + 14 + float64(i)*16
		fmt.Fprintf(&legend, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", lx+4, ly-4, lx+22, ly-4, color)
		fmt.Fprintf(&legend, `<text x="%.1f" y="%.1f" fill="#111111">%s</text>`+"\n", lx+26, ly, esc(s.Name))
	}
	b.Write(legend.Bytes())
	b.WriteString("</g>\n")
}
