package svgplot

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

type parsed struct {
	polylines map[string]int // series name -> number of points
	texts     []string
	root      string
}

// parse checks that doc is well-formed XML and collects the polylines and texts.
func parse(t *testing.T, doc []byte) parsed {
	t.Helper()
	p := parsed{polylines: map[string]int{}}
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var inText bool
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if p.root == "" {
				p.root = el.Name.Local
			}
			inText = el.Name.Local == "text"
			if el.Name.Local == "polyline" {
				var name, points string
				for _, a := range el.Attr {
					switch a.Name.Local {
					case "data-name":
						name = a.Value
					case "points":
						points = a.Value
					}
				}
				p.polylines[name] = len(strings.Fields(points))
			}
		case xml.CharData:
			if inText {
				p.texts = append(p.texts, string(el))
			}
		case xml.EndElement:
			inText = false
		}
	}
	return p
}

func TestRenderValidDocumentWithPoints(t *testing.T) {
	f := Figure{
		Title: "Throughput & p99 <vs> backlog",
		Note:  "2 CPUs",
		Panels: []Panel{
			{Title: "throughput", XLabel: "ready backlog", YLabel: "jobs/s", LogX: true, YZero: true, Series: []Series{
				{Name: "tenure", Points: []Point{{1e4, 12000}, {1e5, 11800}, {1e6, 11000}, {5e6, 9000}}},
			}},
			{Title: "claim p99", XLabel: "ready backlog", YLabel: "ms", LogX: true, LogY: true, Series: []Series{
				{Name: "client p99", Points: []Point{{1e4, 2}, {1e5, 2.5}, {1e6, 3}, {5e6, 0}}}, // y=0 dropped on log y
				{Name: "server mean", Points: []Point{{1e4, 0.5}, {1e5, 0.6}}},
			}},
		},
	}
	doc := f.Render()
	p := parse(t, doc)
	if p.root != "svg" {
		t.Fatalf("root element %q, want svg", p.root)
	}
	if got := p.polylines["tenure"]; got != 4 {
		t.Errorf("tenure polyline has %d points, want 4", got)
	}
	if got := p.polylines["client p99"]; got != 3 {
		t.Errorf("client p99 polyline has %d points, want 3 (the 0 is off a log axis)", got)
	}
	if got := p.polylines["server mean"]; got != 2 {
		t.Errorf("server mean polyline has %d points, want 2", got)
	}
	all := strings.Join(p.texts, "|")
	for _, want := range []string{"Throughput & p99 <vs> backlog", "ready backlog (log scale)", "jobs/s", "10k", "1M", "10M", "tenure", "server mean", "ms (log scale)"} {
		if !strings.Contains(all, want) {
			t.Errorf("text %q missing from %s", want, all)
		}
	}
}

func TestAxisMapsMonotonically(t *testing.T) {
	a := newAxis([]float64{10, 1000, 5e6}, true, false, 100, 500)
	if a.lo != 1 || a.hi != 7 {
		t.Fatalf("log axis decades [%v, %v], want [1, 7]", a.lo, a.hi)
	}
	if a.pos(10) != 100 || a.pos(1e7) != 500 {
		t.Errorf("log axis ends map to %v and %v, want 100 and 500", a.pos(10), a.pos(1e7))
	}
	l := newAxis([]float64{3, 47}, false, true, 300, 0) // y axis: pixels go up
	if l.lo != 0 || l.hi < 47 || l.pos(0) != 300 || l.pos(l.hi) != 0 {
		t.Errorf("linear axis %+v", l)
	}
	if l.pos(10) <= l.pos(20) {
		t.Error("a larger value must be higher on a y axis")
	}
}

func TestHuman(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 1500: "1.5k", 2e6: "2M", 1e4: "10k", 0.25: "0.25", 12: "12", 3e9: "3G", 0.002: "0.002"} {
		if got := Human(v); got != want {
			t.Errorf("Human(%v) = %q, want %q", v, got, want)
		}
	}
	if niceStep(0.7) != 1 || niceStep(3) != 5 || niceStep(12) != 20 || niceStep(0.03) != 0.05 {
		t.Error("niceStep rounds wrongly")
	}
}
