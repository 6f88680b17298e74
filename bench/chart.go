package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// whiskers are the points of one mode with their min..p95 spread.
type whiskers struct {
	plotter.XYs
	plotter.YErrors
}

// SaveChart draws the report's medians per target, cold and warm, on a
// log-scale latency axis, with whiskers from the minimum to p95. The file
// name's extension picks the format (.svg, .png, .pdf).
func (r *Report) SaveChart(path string) error {
	var names []string
	index := map[string]int{}
	for _, x := range r.Results {
		if x.Error != "" {
			continue
		}
		if _, ok := index[x.Name]; !ok {
			index[x.Name] = len(names)
			names = append(names, x.Label())
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("nothing to chart: no target was measured")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("airlock start-up latency, circles cold, triangles warm (%s, %d cores, %s)", short(r.Machine.CPU), r.Machine.Cores, r.Machine.kvmWords())
	p.Y.Label.Text = "median per run (bars: min to p95)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = durTicks{}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	p.X.Tick.Label.Rotation = math.Pi / 4
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
	p.Add(plotter.NewGrid())
	modes := []struct {
		mode   string
		offset float64
		color  color.Color
		shape  draw.GlyphDrawer
	}{
		{"cold", -0.15, color.RGBA{R: 200, G: 60, B: 40, A: 255}, draw.CircleGlyph{}},
		{"warm", 0.15, color.RGBA{R: 30, G: 90, B: 200, A: 255}, draw.TriangleGlyph{}},
	}
	for _, m := range modes {
		var w whiskers
		for _, x := range r.Results {
			if x.Mode != m.mode || x.Error != "" || x.P50 <= 0 {
				continue
			}
			w.XYs = append(w.XYs, plotter.XY{X: float64(index[x.Name]) + m.offset, Y: x.P50})
			w.YErrors = append(w.YErrors, struct{ Low, High float64 }{Low: x.P50 - x.Min, High: max(x.P95-x.P50, 0)})
		}
		if len(w.XYs) == 0 {
			continue
		}
		s, err := plotter.NewScatter(w.XYs)
		if err != nil {
			return err
		}
		s.GlyphStyle.Color, s.GlyphStyle.Shape, s.GlyphStyle.Radius = m.color, m.shape, vg.Points(3.5)
		e, err := plotter.NewYErrorBars(w)
		if err != nil {
			return err
		}
		e.LineStyle.Color = m.color
		p.Add(e, s)
	}
	width := vg.Length(max(6, 0.6*float64(len(names)))) * vg.Inch
	if err := p.Save(width, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	return nil
}

func short(cpu string) string {
	cpu = strings.Join(strings.Fields(cpu), " ")
	if len(cpu) > 40 {
		return cpu[:40] + "…"
	}
	return cpu
}

// durTicks puts a labelled tick at every power of ten of microseconds.
type durTicks struct{}

func (durTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		v := math.Pow(10, e)
		out = append(out, plot.Tick{Value: v, Label: Dur(v)})
		for k := 2.0; k < 10; k++ {
			out = append(out, plot.Tick{Value: k * v})
		}
	}
	return out
}
