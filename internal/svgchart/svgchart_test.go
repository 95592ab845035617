package svgchart

import (
	"encoding/xml"
	"reflect"
	"strings"
	"testing"
)

func TestSegmentsClipTheStepsToTheWindowOrAverageThemIntoBins(t *testing.T) {
	steps := []Step{{T: -50, Values: []float64{1}}, {T: 50, Values: []float64{3}}, {T: 150, Values: []float64{9}}}
	tests := []struct {
		name string
		bins int
		want []segment
	}{
		{name: "every step, clipped to [0, 100]", want: []segment{{0, 50, []float64{1}}, {50, 100, []float64{3}}}},
		{name: "one bin is the time-weighted mean", bins: 1, want: []segment{{0, 100, []float64{2}}}},
		{name: "four bins", bins: 4, want: []segment{{0, 25, []float64{1}}, {25, 50, []float64{1}}, {50, 75, []float64{3}}, {75, 100, []float64{3}}}},
		{name: "a step across a bin edge splits by time", bins: 3, want: []segment{{0, 33, []float64{1}}, {33, 67, []float64{1 + 2*17.0/34}}, {67, 100, []float64{3}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Chart{From: 0, To: 100, Layers: []Layer{{}}, Steps: steps, Bins: tc.bins}
			if got := c.segments(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("segments %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLayersStackInOrder(t *testing.T) {
	c := Chart{Width: 100, Height: 10, From: 0, To: 100, Max: 10,
		Layers: []Layer{{"a", "red"}, {"b", "blue"}},
		Steps:  []Step{{T: 0, Values: []float64{2, 3}}}}
	svg := c.SVG()
	for _, want := range []string{
		`<path fill="red" d="M0.0,8.0 L100.0,8.0 L100.0,10.0 L0.0,10.0 Z"/>`, // 0..2
		`<path fill="blue" d="M0.0,5.0 L100.0,5.0 L100.0,8.0 L0.0,8.0 Z"/>`,  // 2..5, on top of red
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %s:\n%s", want, svg)
		}
	}
	if strings.Contains(svg, "<text") {
		t.Error("a chart without axes has text")
	}
}

func TestAStandaloneChartIsWellFormedWithAxesLegendAndEscapedText(t *testing.T) {
	c := Chart{Width: 1000, Height: 420, From: 0, To: 7200, Max: 24,
		Layers:     []Layer{{"foreign <jobs>", "#4c72b0"}},
		Background: Layer{"idle nodes", "#eeeeee"},
		Steps:      []Step{{T: 0, Values: []float64{12}}},
		Bins:       10,
		Axes:       &Axes{Title: "A & B", YLabel: "nodes (of 24)", Note: "utilisation 50.00%"},
		Attrs:      [][2]string{{"id", `x"y`}}}
	svg := c.SVG()
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("not well-formed XML: %v\n%s", err, svg)
	}
	for _, want := range []string{"A &amp; B", "foreign &lt;jobs&gt;", "idle nodes", "nodes (of 24)", "utilisation 50.00%",
		"time since start (hours)", `id="x&#34;y"`, `>20</text>`, `>2</text>`, `>1.2</text>`} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if c.SVG() != svg {
		t.Error("the same chart drew different bytes")
	}
}

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct {
		span float64
		n    int
		want float64
	}{{24, 6, 5}, {100, 10, 10}, {7, 10, 1}, {0, 6, 1}, {0.5, 10, 0.05}} {
		if got := NiceStep(tc.span, tc.n); got != tc.want {
			t.Errorf("NiceStep(%v, %d) = %v, want %v", tc.span, tc.n, got, tc.want)
		}
	}
}
