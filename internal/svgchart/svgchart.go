// Package svgchart draws stacked step-area charts as SVG: the simulator's
// plot (`harvest sim --plot`) and the status page's utilisation chart.
// Values are step functions of time (each step holds until the next);
// layers stack in order, each band as high as its own value. It is pure:
// the same chart always gives the same bytes.
package svgchart

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Layer is one band of the stack, drawn above the layers before it.
type Layer struct {
	Name, Color string
}

// Step gives every layer's value from T until the next step (the last
// step until Chart.To). Values has one entry per layer.
type Step struct {
	T      int64
	Values []float64
}

// Axes decorate a standalone chart: value and time axes with ticks, a
// legend below and a title above.
type Axes struct {
	Title  string // top left, bold
	Note   string // top right
	YLabel string // beside the value axis
}

// Chart is a stacked step-area chart over [From, To] (seconds).
type Chart struct {
	Width, Height int
	From, To      int64
	// Max is the value at the top of the plot area.
	Max    float64
	Layers []Layer
	Steps  []Step
	// Background fills the plot area behind the layers (Color "" =
	// none) and, named, has a legend entry of its own.
	Background Layer
	// Bins > 0 averages the values over that many equal spans of time,
	// time-weighted, so that a long trace stays a small file; 0 draws
	// every step as it is.
	Bins int
	// Axes, if set, draws axes, ticks, legend and title around the
	// plot; without, the plot fills the whole SVG (for a page that has
	// its own legend).
	Axes *Axes
	// Attrs are extra attributes of the <svg> element, written first and
	// in order (id, role, aria-label, style).
	Attrs [][2]string
}

// segment is a span of time with every layer's value over it.
type segment struct {
	t0, t1 int64
	values []float64
}

// segments clips the steps to [From, To], or averages them into bins.
func (c Chart) segments() []segment {
	var segs []segment
	for i, s := range c.Steps {
		end := c.To
		if i+1 < len(c.Steps) {
			end = min(c.Steps[i+1].T, c.To)
		}
		if t0 := max(s.T, c.From); t0 < end {
			segs = append(segs, segment{t0, end, s.Values})
		}
	}
	if c.Bins <= 0 || len(segs) == 0 {
		return segs
	}
	span := float64(c.To - c.From)
	binned := make([]segment, c.Bins)
	edge := func(k int) int64 { return c.From + int64(math.Round(span*float64(k)/float64(c.Bins))) }
	for k := range binned {
		binned[k] = segment{edge(k), edge(k + 1), make([]float64, len(c.Layers))}
	}
	for _, s := range segs {
		k := int(float64(s.t0-c.From) / span * float64(c.Bins))
		for k = min(max(k, 0), c.Bins-1); k < c.Bins && binned[k].t0 < s.t1; k++ {
			b := &binned[k]
			overlap := min(s.t1, b.t1) - max(s.t0, b.t0)
			if overlap <= 0 || b.t1 <= b.t0 {
				continue
			}
			w := float64(overlap) / float64(b.t1-b.t0)
			for l := range b.values {
				if l < len(s.values) {
					b.values[l] += w * s.values[l]
				}
			}
		}
	}
	return binned
}

// margins of the plot area inside the SVG.
func (c Chart) margins() (left, right, top, bottom float64) {
	if c.Axes == nil {
		return 0, 0, 0, 0
	}
	return 70, 20, 40, 90
}

// WriteSVG writes the chart as one <svg> element.
func (c Chart) WriteSVG(w io.Writer) error {
	bw := bufio.NewWriter(w)
	c.write(bw)
	return bw.Flush()
}

// SVG returns the chart as one <svg> element.
func (c Chart) SVG() string {
	var b strings.Builder
	bw := bufio.NewWriter(&b)
	c.write(bw)
	bw.Flush()
	return b.String()
}

func (c Chart) write(bw *bufio.Writer) {
	width, height := float64(c.Width), float64(c.Height)
	left, right, top, bottom := c.margins()
	pw, ph := width-left-right, height-top-bottom
	span := float64(max(c.To-c.From, 1))
	maxV := c.Max
	if maxV <= 0 {
		maxV = 1
	}
	x := func(t int64) float64 { return left + pw*float64(t-c.From)/span }
	y := func(v float64) float64 { return top + ph - ph*min(v, maxV)/maxV }

	bw.WriteString("<svg")
	for _, a := range c.Attrs {
		fmt.Fprintf(bw, ` %s="%s"`, a[0], html.EscapeString(a[1]))
	}
	fmt.Fprintf(bw, ` xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d"`, c.Width, c.Height, c.Width, c.Height)
	if c.Axes != nil {
		bw.WriteString(` font-family="sans-serif" font-size="12"`)
	}
	bw.WriteString(">\n")
	if c.Axes != nil {
		fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
		fmt.Fprintf(bw, `<text x="%.0f" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(c.Axes.Title))
	}
	if c.Background.Color != "" {
		fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", left, top, pw, ph, html.EscapeString(c.Background.Color))
	}
	segs := c.segments()
	base := make([]float64, len(segs))
	for l, layer := range c.Layers {
		if len(segs) == 0 {
			break
		}
		fmt.Fprintf(bw, `<path fill="%s" d="`, html.EscapeString(layer.Color))
		for k, s := range segs {
			v := base[k]
			if l < len(s.values) {
				v += s.values[l]
			}
			cmd := "L"
			if k == 0 {
				cmd = "M"
			}
			fmt.Fprintf(bw, "%s%.1f,%.1f L%.1f,%.1f ", cmd, x(s.t0), y(v), x(s.t1), y(v))
		}
		for k := len(segs) - 1; k >= 0; k-- {
			fmt.Fprintf(bw, "L%.1f,%.1f L%.1f,%.1f ", x(segs[k].t1), y(base[k]), x(segs[k].t0), y(base[k]))
		}
		bw.WriteString("Z\"/>\n")
		for k, s := range segs {
			if l < len(s.values) {
				base[k] += s.values[l]
			}
		}
	}
	if c.Axes != nil {
		c.writeAxes(bw, x, y, left, top, pw, ph)
	}
	bw.WriteString("</svg>\n")
}

func (c Chart) writeAxes(bw *bufio.Writer, x func(int64) float64, y func(float64) float64, left, top, pw, ph float64) {
	width, height := float64(c.Width), float64(c.Height)
	fmt.Fprintf(bw, `<g stroke="black" fill="none"><path d="M%.1f,%.1f V%.1f H%.1f"/></g>`+"\n", left, top, top+ph, left+pw)
	// Ticks are multiples of the step (not sums, which drift: 0.2 added
	// ten times is not 2), printed with at most 6 digits.
	step := NiceStep(c.Max, 6)
	for i := 0; float64(i)*step <= c.Max+1e-9; i++ {
		v := float64(i) * step
		fmt.Fprintf(bw, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/><text x="%.1f" y="%.1f" text-anchor="end">%.6g</text>`+"\n", left-5, left, y(v), y(v), left-8, y(v)+4, v)
	}
	span := float64(max(c.To-c.From, 1))
	unit, uname := 3600.0, "hours"
	if span > 4*86400 {
		unit, uname = 86400, "days"
	}
	tstep := NiceStep(span/unit, 10)
	for i := 0; float64(i)*tstep <= span/unit+1e-9; i++ {
		t := float64(i) * tstep
		px := x(c.From + int64(math.Round(t*unit)))
		fmt.Fprintf(bw, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/><text x="%.1f" y="%.1f" text-anchor="middle">%.6g</text>`+"\n", px, px, top+ph, top+ph+5, px, top+ph+18, t)
	}
	fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle">time since start (%s)</text>`+"\n", left+pw/2, top+ph+36, uname)
	fmt.Fprintf(bw, `<text transform="translate(18,%.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", top+ph/2, html.EscapeString(c.Axes.YLabel))
	legend := c.Layers
	if c.Background.Name != "" {
		legend = append(legend[:len(legend):len(legend)], c.Background)
	}
	lx := left
	for _, l := range legend {
		fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="14" height="14" fill="%s" stroke="#888"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
			lx, height-26, html.EscapeString(l.Color), lx+20, height-14, html.EscapeString(l.Name))
		lx += 40 + 7*float64(len(l.Name))
	}
	if c.Axes.Note != "" {
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", width-20, 22.0, html.EscapeString(c.Axes.Note))
	}
}

// NiceStep returns a step of 1, 2 or 5 times a power of ten that cuts
// span into about n ticks.
func NiceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}
