// Command dashshot draws deploy/grafana/fenceproxy.json as an SVG from a real
// Prometheus: for every timeseries panel it evaluates each target's PromQL
// with /api/v1/query_range over a time window and draws one polyline per
// series, the panels laid out on the dashboard's own 24-column grid. Grafana
// could not be installed on the development machine, so this is an honest
// stand-in for a screenshot: the same queries over real data, drawn by a small
// program, and captioned as such. Standard library only, so the main module
// gains no dependency.
//
//	go run ./scripts/dashshot -prom http://127.0.0.1:9090 -start 1700000000 -end 1700000180 -out docs/dashboard.svg
//
// $instance becomes .* (the dashboard's "All") and $__rate_interval becomes
// -rate-interval (Grafana uses at least 4 scrape intervals).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

type gridPos struct{ H, W, X, Y int }

type target struct {
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
}

type panel struct {
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	GridPos     gridPos  `json:"gridPos"`
	Targets     []target `json:"targets"`
	Panels      []panel  `json:"panels"` // a collapsed row keeps its panels here
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

type dashboard struct {
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

// series is one line of a panel: its legend and its points (NaN breaks the line).
type series struct {
	legend string
	t      []float64 // unix seconds
	v      []float64
}

type config struct {
	dash, prom, out, theme string
	start, end             time.Time
	step, rateInterval     time.Duration
}

func main() {
	var c config
	var start, end string
	flag.StringVar(&c.dash, "dashboard", "deploy/grafana/fenceproxy.json", "Grafana dashboard JSON `file`")
	flag.StringVar(&c.prom, "prom", "http://127.0.0.1:9090", "Prometheus base `URL`")
	flag.StringVar(&start, "start", "", "window start: unix seconds or RFC 3339 (default: end minus 3 minutes)")
	flag.StringVar(&end, "end", "", "window end: unix seconds or RFC 3339 (default: now)")
	flag.DurationVar(&c.step, "step", 2*time.Second, "query resolution")
	flag.DurationVar(&c.rateInterval, "rate-interval", 8*time.Second, "what $__rate_interval stands for (at least 4 scrape intervals)")
	flag.StringVar(&c.out, "out", "docs/dashboard.svg", "SVG `file` to write")
	flag.StringVar(&c.theme, "theme", "dark", "dark or light")
	flag.Parse()
	err := func() error {
		var err error
		if flag.NArg() > 0 {
			return fmt.Errorf("unexpected argument %q", flag.Arg(0))
		}
		if c.end, err = parseTime(end, time.Now()); err != nil {
			return fmt.Errorf("-end: %v", err)
		}
		if c.start, err = parseTime(start, c.end.Add(-3*time.Minute)); err != nil {
			return fmt.Errorf("-start: %v", err)
		}
		if !c.start.Before(c.end) {
			return errors.New("-start must be before -end")
		}
		if c.step <= 0 || c.rateInterval <= 0 {
			return errors.New("-step and -rate-interval must be positive")
		}
		if c.theme != "dark" && c.theme != "light" {
			return errors.New("-theme must be dark or light")
		}
		return run(c)
	}()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dashshot: %v\n", err)
		os.Exit(1)
	}
}

func parseTime(s string, def time.Time) (time.Time, error) {
	if s == "" {
		return def, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Unix(0, int64(f*1e9)), nil
	}
	return time.Parse(time.RFC3339, s)
}

func run(c config) error {
	b, err := os.ReadFile(c.dash)
	if err != nil {
		return err
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("%s: %v", c.dash, err)
	}
	var flat []panel
	for _, p := range d.Panels {
		flat = append(flat, p)
		flat = append(flat, p.Panels...)
	}
	data := make(map[int][]series)
	empty := 0
	for i, p := range flat {
		if p.Type != "timeseries" {
			continue
		}
		for _, t := range p.Targets {
			ss, err := query(c, t)
			if err != nil {
				return fmt.Errorf("panel %q: %v", p.Title, err)
			}
			data[i] = append(data[i], ss...)
		}
		if !hasPoints(data[i]) {
			empty++
			fmt.Fprintf(os.Stderr, "dashshot: panel %q has no data in the window\n", p.Title)
		}
	}
	svg := draw(c, d, flat, data)
	if err := os.WriteFile(c.out, []byte(svg), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "dashshot: wrote %s (%d panels, %d without data)\n", c.out, len(data), empty)
	return nil
}

func hasPoints(ss []series) bool {
	for _, s := range ss {
		for _, v := range s.v {
			if !math.IsNaN(v) {
				return true
			}
		}
	}
	return false
}

// query runs one target's PromQL over the window, with Grafana's variables
// replaced the way the dashboard's "All" selection would.
func query(c config, t target) ([]series, error) {
	expr := strings.ReplaceAll(t.Expr, "$instance", ".*")
	expr = strings.ReplaceAll(expr, "${instance}", ".*")
	expr = strings.ReplaceAll(expr, "$__rate_interval", fmt.Sprintf("%ds", int(c.rateInterval.Seconds())))
	q := url.Values{}
	q.Set("query", expr)
	q.Set("start", strconv.FormatFloat(float64(c.start.UnixMilli())/1000, 'f', 3, 64))
	q.Set("end", strconv.FormatFloat(float64(c.end.UnixMilli())/1000, 'f', 3, 64))
	q.Set("step", strconv.FormatFloat(c.step.Seconds(), 'f', -1, 64))
	cl := http.Client{Timeout: 30 * time.Second}
	resp, err := cl.PostForm(strings.TrimRight(c.prom, "/")+"/api/v1/query_range", q)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d: %.200s", expr, resp.StatusCode, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", expr, r.Error)
	}
	var out []series
	for _, res := range r.Data.Result {
		s := series{legend: legend(t.LegendFormat, res.Metric)}
		for _, pv := range res.Values {
			ts, _ := pv[0].(float64)
			vs, _ := pv[1].(string)
			v, err := strconv.ParseFloat(vs, 64)
			if err != nil || math.IsInf(v, 0) {
				v = math.NaN()
			}
			s.t = append(s.t, ts)
			s.v = append(s.v, v)
		}
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].legend < out[j].legend })
	return out, nil
}

var labelRef = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

func legend(format string, m map[string]string) string {
	if format == "" || format == "__auto" {
		var parts []string
		for k, v := range m {
			parts = append(parts, k+"="+strconv.Quote(v))
		}
		sort.Strings(parts)
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return labelRef.ReplaceAllStringFunc(format, func(s string) string {
		return m[labelRef.FindStringSubmatch(s)[1]]
	})
}

// Layout: the dashboard's 24-column grid, one grid row ~30 px as in Grafana.
const (
	colW     = 60.0
	rowH     = 30.0
	gap      = 4.0
	captionH = 46.0
	margin   = 8.0
)

type theme struct{ bg, panel, border, text, dim, grid string }

var themes = map[string]theme{
	"dark":  {"#111217", "#181b1f", "#2c3235", "#ccccdc", "#8e8e9e", "#2c3235"},
	"light": {"#f4f5f5", "#ffffff", "#d8d9da", "#24292e", "#6e6e7e", "#e8e9ea"},
}

// Grafana's classic palette, one colour per series in order.
var palette = []string{"#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#705da0", "#37872d", "#fade2a"}

func draw(c config, d dashboard, flat []panel, data map[int][]series) string {
	th := themes[c.theme]
	bottom := 0
	for _, p := range flat {
		if e := p.GridPos.Y + p.GridPos.H; e > bottom {
			bottom = e
		}
	}
	W := 24*colW + 2*margin
	H := captionH + float64(bottom)*rowH + margin
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Helvetica, Arial, sans-serif">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="%s"/>`+"\n", th.bg)
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="14" fill="%s">%s</text>`+"\n", margin, th.text,
		esc("fenceproxy dashboard (deploy/grafana/fenceproxy.json) rendered by scripts/dashshot from a real Prometheus — not Grafana's own rendering"))
	fmt.Fprintf(&b, `<text x="%.0f" y="38" font-size="11" fill="%s">%s</text>`+"\n", margin, th.dim,
		esc(fmt.Sprintf("%s · window %s – %s UTC (%s) · step %s · $instance = .* · $__rate_interval = %s",
			c.end.UTC().Format("2006-01-02"), c.start.UTC().Format("15:04:05"), c.end.UTC().Format("15:04:05"),
			c.end.Sub(c.start).Round(time.Second), c.step, c.rateInterval)))
	for i, p := range flat {
		x := margin + float64(p.GridPos.X)*colW
		y := captionH + float64(p.GridPos.Y)*rowH
		w := float64(p.GridPos.W) * colW
		h := float64(p.GridPos.H) * rowH
		switch p.Type {
		case "row":
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="15" font-weight="bold" fill="%s">%s</text>`+"\n", x+2, y+h/2+5, th.text, esc(p.Title))
		case "timeseries":
			drawPanel(&b, th, c, p, data[i], x+gap/2, y+gap/2, w-gap, h-gap)
		default:
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="%s"/>`+"\n", x+gap/2, y+gap/2, w-gap, h-gap, th.panel, th.border)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="12" fill="%s">%s (panel type %s not drawn)</text>`+"\n", x+10, y+20, th.dim, esc(p.Title), esc(p.Type))
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func drawPanel(b *strings.Builder, th theme, c config, p panel, ss []series, x, y, w, h float64) {
	fmt.Fprintf(b, `<g><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="2" fill="%s" stroke="%s"/>`+"\n", x, y, w, h, th.panel, th.border)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="13" font-weight="bold" fill="%s">%s</text>`+"\n", x+8, y+18, th.text, esc(p.Title))
	unit := p.FieldConfig.Defaults.Unit

	// Legend rows at the bottom: entries flow left to right and wrap.
	type item struct {
		x, y  float64
		text  string
		color string
	}
	var items []item
	lx, line := 0.0, 0
	for k, s := range ss {
		tw := 14 + 6.2*float64(len([]rune(s.legend))) + 14
		if lx > 0 && lx+tw > w-16 {
			lx, line = 0, line+1
		}
		items = append(items, item{lx, float64(line), s.legend, palette[k%len(palette)]})
		lx += tw
	}
	legendH := 0.0
	if len(items) > 0 {
		legendH = float64(line+1) * 14
	}
	px, py := x+58, y+28
	pw, ph := w-58-12, h-28-20-legendH-6
	tmin, tmax := float64(c.start.UnixMilli())/1000, float64(c.end.UnixMilli())/1000

	vmin, vmax := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		for _, v := range s.v {
			if !math.IsNaN(v) {
				vmin, vmax = math.Min(vmin, v), math.Max(vmax, v)
			}
		}
	}
	if math.IsInf(vmin, 1) {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="13" text-anchor="middle" fill="%s">No data</text></g>`+"\n", x+w/2, y+h/2, th.dim)
		return
	}
	// Bytes are ticked in binary units (0, 16, 32 MiB), not in round byte counts.
	div := 1.0
	if unit == "bytes" {
		for _, d := range []float64{1 << 30, 1 << 20, 1 << 10} {
			if math.Max(math.Abs(vmin), math.Abs(vmax)) >= d {
				div = d
				break
			}
		}
	}
	lo := math.Min(0, vmin/div)
	hi, tick := niceMax(vmax/div, lo)
	ys := func(v float64) float64 { return py + ph - (v/div-lo)/(hi-lo)*ph }
	xs := func(t float64) float64 { return px + (t-tmin)/(tmax-tmin)*pw }

	// Y grid and labels.
	for v := lo; v <= hi+tick/2; v += tick {
		yy := ys(v * div)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", px, yy, px+pw, yy, th.grid)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="end" fill="%s">%s</text>`+"\n", px-4, yy+3, th.dim, esc(format(v, unit, tick, div)))
	}
	// X ticks: round minutes or half-minutes, whichever gives about 4-6 labels.
	span := tmax - tmin
	xstep := 30.0
	for _, st := range []float64{10, 15, 30, 60, 120, 300, 600, 1800, 3600} {
		if span/st <= 6 {
			xstep = st
			break
		}
	}
	for t := math.Ceil(tmin/xstep) * xstep; t <= tmax; t += xstep {
		xx := xs(t)
		if xx < px+24 || xx > px+pw-24 {
			continue // its label would run into the y axis labels or off the panel
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", xx, py, xx, py+ph, th.grid)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle" fill="%s">%s</text>`+"\n", xx, py+ph+13, th.dim, time.Unix(int64(t), 0).UTC().Format("15:04:05"))
	}
	// One polyline per unbroken run of points.
	for k, s := range ss {
		col := palette[k%len(palette)]
		var pts []string
		flush := func() {
			if len(pts) == 1 {
				var cx, cy float64
				fmt.Sscanf(pts[0], "%f,%f", &cx, &cy)
				fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="1.5" fill="%s"/>`+"\n", cx, cy, col)
			} else if len(pts) > 1 {
				fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", col, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for j, v := range s.v {
			if math.IsNaN(v) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xs(s.t[j]), ys(v)))
		}
		flush()
	}
	for _, it := range items {
		ix, iy := x+10+it.x, py+ph+22+it.y*14
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="10" height="3" fill="%s"/>`+"\n", ix, iy+2, it.color)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10.5" fill="%s">%s</text>`+"\n", ix+14, iy+7, th.text, esc(it.text))
	}
	b.WriteString("</g>\n")
}

// niceMax returns an axis top at or above max and the tick step for about 4 steps from lo.
func niceMax(max, lo float64) (float64, float64) {
	r := max - lo
	if r <= 0 {
		r = math.Max(math.Abs(max), 1)
	}
	raw := r / 4
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	var step float64
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	return lo + math.Ceil((max-lo)/step)*step + func() float64 {
		if max-lo <= 0 {
			return step * 4
		}
		return 0
	}(), step
}

// format writes an axis value in the panel's Grafana unit.
// For bytes, v and tick are already in units of div.
func format(v float64, unit string, tick, div float64) string {
	if v == 0 {
		return "0"
	}
	switch unit {
	case "s":
		switch {
		case tick >= 1:
			return trim(v, tick) + " s"
		case tick >= 1e-3:
			return trim(v*1e3, tick*1e3) + " ms"
		default:
			return trim(v*1e6, tick*1e6) + " µs"
		}
	case "bytes":
		return trim(v, tick) + " " + map[float64]string{1: "B", 1 << 10: "KiB", 1 << 20: "MiB", 1 << 30: "GiB"}[div]
	case "percentunit":
		return trim(v*100, tick*100) + "%"
	case "reqps":
		return si(v, tick) + " req/s"
	default:
		return si(v, tick)
	}
}

func si(v, tick float64) string {
	switch {
	case tick >= 1e6:
		return trim(v/1e6, tick/1e6) + "M"
	case tick >= 1e3:
		return trim(v/1e3, tick/1e3) + "k"
	}
	return trim(v, tick)
}

// trim prints v with as many decimals as the tick step needs.
func trim(v, tick float64) string {
	d := 0
	for d < 4 && math.Abs(tick*math.Pow(10, float64(d))-math.Round(tick*math.Pow(10, float64(d)))) > 1e-9 {
		d++
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}

func esc(s string) string { return html.EscapeString(s) }
