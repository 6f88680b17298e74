package server

import (
	"fmt"
	"math"
)

// The start-up latency chart: per tier, the server's start-up histogram
// drawn as bars over a logarithmic time axis, computed here and drawn by
// the template as SVG (no script, no inline style).

const (
	chartW     = 720.0
	chartLeft  = 180.0 // room for the tier names and counts
	chartRight = 20.0
	chartRow   = 34.0
	chartTop   = 28.0
	chartAxis  = 34.0
	chartMinS  = 1e-5 // 10 µs
	chartMaxS  = 100.0
)

type chartBar struct {
	X, Y, W, H float64
	Title      string
}

type chartRowView struct {
	Tier   string
	Y      float64
	Count  int64
	Median string
	Bars   []chartBar
}

type chartTick struct {
	X     float64
	Label string
}

type chartView struct {
	W, H, Left, Right, AxisY float64
	Rows                     []chartRowView
	Ticks                    []chartTick
}

// xOf places a duration in seconds on the log axis.
func xOf(sec float64) float64 {
	sec = math.Min(math.Max(sec, chartMinS), chartMaxS)
	span := math.Log10(chartMaxS) - math.Log10(chartMinS)
	return chartLeft + (math.Log10(sec)-math.Log10(chartMinS))/span*(chartW-chartLeft-chartRight)
}

func secondsLabel(sec float64) string {
	switch {
	case sec < 1e-3:
		return fmt.Sprintf("%g µs", math.Round(sec*1e6))
	case sec < 1:
		return fmt.Sprintf("%g ms", math.Round(sec*1e3*1000)/1000)
	}
	return fmt.Sprintf("%g s", sec)
}

func (s *Server) latencyChart() chartView {
	cv := chartView{W: chartW, Left: chartLeft, Right: chartW - chartRight}
	for i, tier := range sortedKeys(&s.metrics.startup) {
		h := hist(&s.metrics.startup, tier)
		y := chartTop + float64(i)*chartRow
		row := chartRowView{Tier: tier, Y: y + chartRow/2}
		var counts [len(histogram{}.counts)]int64
		var peak int64
		for b := range counts {
			counts[b] = h.counts[b].Load()
			row.Count += counts[b]
			peak = max(peak, counts[b])
		}
		if row.Count == 0 {
			continue
		}
		var cum int64
		for b, n := range counts {
			lo, hi := chartMinS, chartMaxS
			if b > 0 {
				lo = buckets[b-1]
			}
			if b < len(buckets) {
				hi = buckets[b]
			}
			if cum < (row.Count+1)/2 && cum+n >= (row.Count+1)/2 {
				row.Median = "median ≤ " + secondsLabel(hi)
				if b == len(buckets) {
					row.Median = "median > " + secondsLabel(lo)
				}
			}
			cum += n
			if n == 0 {
				continue
			}
			bh := math.Max(2, (chartRow-8)*float64(n)/float64(peak))
			x0, x1 := xOf(lo), xOf(hi)
			row.Bars = append(row.Bars, chartBar{X: x0, W: math.Max(1, x1-x0-1), Y: y + chartRow - 4 - bh, H: bh,
				Title: fmt.Sprintf("%s: %d runs from %s to %s", tier, n, secondsLabel(lo), secondsLabel(hi))})
		}
		cv.Rows = append(cv.Rows, row)
	}
	rows := max(1, len(cv.Rows))
	for i := range cv.Rows {
		cv.Rows[i].Y = chartTop + float64(i)*chartRow + chartRow/2
	}
	// Re-place the bars of rows after a skipped (empty) one.
	for i := range cv.Rows {
		top := chartTop + float64(i)*chartRow
		for j := range cv.Rows[i].Bars {
			b := &cv.Rows[i].Bars[j]
			b.Y = top + chartRow - 4 - b.H
		}
	}
	cv.AxisY = chartTop + float64(rows)*chartRow
	cv.H = cv.AxisY + chartAxis
	for e := -5; e <= 2; e++ {
		sec := math.Pow(10, float64(e))
		cv.Ticks = append(cv.Ticks, chartTick{X: xOf(sec), Label: secondsLabel(sec)})
	}
	return cv
}
