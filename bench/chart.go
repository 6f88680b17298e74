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
	order := chartOrder(r.Results)
	index := map[string]int{}
	label := map[string]string{}
	for _, x := range r.Results {
		label[x.Name] = x.Label()
	}
	names := make([]string, len(order))
	for i, n := range order {
		index[n] = i
		names[i] = label[n]
	}
	if len(names) == 0 {
		return fmt.Errorf("nothing to chart: no target was measured")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("airlock start-up latency, each tier beside its raw engine and peers (%s, %d cores, %s)", short(r.Machine.CPU), r.Machine.Cores, r.Machine.kvmWords())
	p.Legend.Top, p.Legend.Left = true, true
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
		legend string
		offset float64
		color  color.Color
		shape  draw.GlyphDrawer
	}{
		{"cold", "cold: a fresh instance", -0.15, color.RGBA{R: 200, G: 60, B: 40, A: 255}, draw.CircleGlyph{}},
		{"warm", "warm: a live instance or its pool", 0.15, color.RGBA{R: 30, G: 90, B: 200, A: 255}, draw.TriangleGlyph{}},
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
		p.Legend.Add(m.legend+" (median, bars min to p95)", s)
	}
	// Room above the highest p95 and below the lowest minimum, so that
	// no whisker ends on the frame.
	lo, hi := math.Inf(1), 0.0
	for _, x := range r.Results {
		if x.Error == "" && x.P50 > 0 {
			lo, hi = min(lo, x.Min, x.P50), max(hi, x.P95, x.P50)
		}
	}
	if hi > 0 {
		p.Y.Min, p.Y.Max = lo/2, hi*2
	}
	width := vg.Length(max(6, 0.6*float64(len(names)))) * vg.Inch
	if err := p.Save(width, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	return nil
}

// chartOrder lists the measured targets as the chart shows them: each
// tier followed by its raw engine and its peers (as compareAll paired
// them), then whatever no tier was compared with.
func chartOrder(results []Result) []string {
	var order []string
	placed := map[string]bool{}
	measured := map[string]bool{}
	for _, x := range results {
		if x.Error == "" {
			measured[x.Name] = true
		}
	}
	place := func(name string) {
		if measured[name] && !placed[name] {
			placed[name] = true
			order = append(order, name)
		}
	}
	for _, x := range results {
		if x.Type != TypeTier || placed[x.Name] || !measured[x.Name] {
			continue
		}
		place(x.Name)
		// Cold and warm rows of a tier may name different companions.
		for _, y := range results {
			if y.Name != x.Name {
				continue
			}
			place(y.Raw)
			for _, peer := range y.Peers {
				place(peer.Name)
			}
		}
	}
	for _, x := range results {
		place(x.Name)
	}
	return order
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
