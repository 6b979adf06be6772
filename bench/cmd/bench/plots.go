package main

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"time"

	"github.com/lockguard/lockguard/bench/internal/contenders"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plots writes img/wait_cdf.png and img/throughput.png.
func (r *report) plots(dir string) error {
	if err := r.waitPlot(filepath.Join(dir, "wait_cdf.png")); err != nil {
		return err
	}
	return r.throughputPlot(filepath.Join(dir, "throughput.png"))
}

// waitPlot draws, per contender, the share of acquisitions that waited x or longer (8
// goroutines, first hold, all rounds pooled) on log-log axes, so that the tail of rare long
// waits stays visible; the legend gives the longest wait of any round.
func (r *report) waitPlot(path string) error {
	p := plot.New()
	hold := r.plan.holds[0]
	p.Title.Text = fmt.Sprintf("Wait per acquisition, 8 goroutines on one key, hold %s, %d rounds pooled", fmtDur(hold), r.plan.contendedRounds)
	p.X.Label.Text = "x = wait from Acquire call to lock held (ms, log scale)"
	p.Y.Label.Text = "share of waits of x or longer"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top = false // bottom left: short waits are never rare, so no line passes there
	p.Legend.Left = true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(10), vg.Points(10)
	const minMs = 0.01 // the log axis starts at 10 µs
	minY := 1.0
	for i, name := range contenders.Names {
		c := r.findContended(name, 8, hold)
		if c == nil || c.waits.Len() == 0 {
			continue
		}
		waits := c.waits.Sorted()
		n := len(waits)
		// About 400 evenly spaced ranks, and every one of the last 200 (the tail).
		step := max(1, n/400)
		var xys plotter.XYs
		for j := 0; j < n; j++ {
			if j%step != 0 && j < n-200 {
				continue
			}
			xys = append(xys, plotter.XY{X: math.Max(ms(waits[j]), minMs), Y: float64(n-j) / float64(n)})
		}
		minY = math.Min(minY, 1/float64(n))
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(2)
		l.Dashes = plotutil.Dashes(i)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (max %s)", name, fmtDur(c.maxWait())), l)
	}
	p.Y.Min, p.Y.Max = minY/2, 1
	p.Add(plotter.NewGrid())
	return p.Save(20*vg.Centimeter, 12*vg.Centimeter, path)
}

// throughputPlot draws acquisitions/s against goroutines at the first hold, with the floor.
func (r *report) throughputPlot(path string) error {
	p := plot.New()
	hold := r.plan.holds[0]
	p.Title.Text = fmt.Sprintf("Acquisitions per second on one key, hold %s", fmtDur(hold))
	p.X.Label.Text = "goroutines (log scale)"
	p.Y.Label.Text = "acquisitions/s"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.ConstantTicks(goroutineTicks(r.plan.curve))
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = false
	for i, name := range contenders.Names {
		var xys plotter.XYs
		for _, g := range r.plan.curve {
			if c := r.findContended(name, g, hold); c != nil {
				xys = append(xys, plotter.XY{X: float64(g), Y: c.rate()})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		l.Width = vg.Points(2)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(name, l, s)
	}
	floor := r.contendedFloor(hold)
	fl, err := plotter.NewLine(plotter.XYs{{X: float64(r.plan.curve[0]), Y: floor}, {X: float64(r.plan.curve[len(r.plan.curve)-1]), Y: floor}})
	if err != nil {
		return err
	}
	fl.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	fl.Color = color.Gray{Y: 90}
	p.Add(fl)
	p.Legend.Add(fmt.Sprintf("floor 1/(hold + 1.5 PING) = %.0f/s", floor), fl)
	p.Y.Max = math.Max(p.Y.Max, floor) * 1.5 // room for the legend above the lines
	p.Y.Tick.Marker = integerTicks{}
	p.Add(plotter.NewGrid())
	return p.Save(20*vg.Centimeter, 12*vg.Centimeter, path)
}

func goroutineTicks(gs []int) []plot.Tick {
	ts := make([]plot.Tick, len(gs))
	for i, g := range gs {
		ts[i] = plot.Tick{Value: float64(g), Label: fmt.Sprint(g)}
	}
	return ts
}

// integerTicks are the default ticks labelled without decimals.
type integerTicks struct{}

// Ticks implements plot.Ticker.
func (integerTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = fmt.Sprintf("%.0f", ts[i].Value)
		}
	}
	return ts
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
