// Command svgplot draws scripts/bench.sh's results as an SVG of grouped bars:
// one panel per section (passthrough, lock cycles, hot lock, memory), one group
// per test, one bar per system, each panel on its own scale. Standard library
// only, so the main module gains no dependency.
//
//	go run ./scripts/svgplot -in docs/bench/latest.tsv -out docs/bench/latest.svg
//
// Input: the TSV bench.sh writes. Lines starting with # are comments (the
// first "# title: …" one becomes the plot's title); the header row names the
// columns, of which section, test, system, value and unit are used. Sections,
// tests and systems keep the order of their first appearance. A row whose
// system is "target" is drawn as a dashed line across its group, not a bar.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"html"
	"math"
	"os"
	"strconv"
	"strings"
)

type row struct {
	section, test, system, unit string
	value                       float64
}

// palette: one colour per system, in order of first appearance.
var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1", "#edc948", "#9c755f"}

var sectionTitles = map[string]string{
	"passthrough": "Passthrough: redis-benchmark, 50 clients (requests/s)",
	"distinct":    "Locks, distinct resources: acquire+release cycles/s, 50 clients",
	"hot":         "Hot lock, 50 clients on one resource: handoffs/s",
	"scale":       "fenceproxy resident memory (MiB; dashed: target)",
}

func main() {
	in := flag.String("in", "docs/bench/latest.tsv", "results `file` (TSV)")
	out := flag.String("out", "docs/bench/latest.svg", "SVG `file` to write")
	sections := flag.String("sections", "passthrough,distinct,hot,scale", "sections to draw, in this order (comma-separated)")
	flag.Parse()
	if err := run(*in, *out, strings.Split(*sections, ",")); err != nil {
		fmt.Fprintf(os.Stderr, "svgplot: %v\n", err)
		os.Exit(1)
	}
}

func run(in, out string, sections []string) error {
	all, title, err := read(in)
	if err != nil {
		return err
	}
	var rows []row
	for _, sec := range sections {
		for _, r := range all {
			if r.section == sec {
				rows = append(rows, r)
			}
		}
	}
	if len(rows) == 0 {
		return errors.New(in + ": no rows")
	}
	svg := draw(rows, title)
	return os.WriteFile(out, []byte(svg), 0o644)
}

func read(path string) ([]row, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	var (
		rows  []row
		title string
		col   map[string]int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			if t, ok := strings.CutPrefix(line, "# title: "); ok && title == "" {
				title = t
			}
			continue
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if col == nil {
			col = map[string]int{}
			for i, name := range f {
				col[name] = i
			}
			for _, need := range []string{"section", "test", "system", "value", "unit"} {
				if _, ok := col[need]; !ok {
					return nil, "", fmt.Errorf("%s: header has no %q column", path, need)
				}
			}
			continue
		}
		get := func(name string) string {
			if i := col[name]; i < len(f) {
				return f[i]
			}
			return ""
		}
		v, err := strconv.ParseFloat(get("value"), 64)
		if err != nil || math.IsNaN(v) {
			continue // a missing figure ("-") draws no bar
		}
		rows = append(rows, row{get("section"), get("test"), get("system"), get("unit"), v})
	}
	return rows, title, sc.Err()
}

// order returns the distinct keys in order of first appearance.
func order(rows []row, key func(row) string) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rows {
		if k := key(r); !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

const (
	width    = 960
	panelH   = 250
	marginL  = 70
	marginR  = 190 // legend
	plotTop  = 34
	plotBot  = 44
	titleH   = 40
	fontFace = "font-family=\"Helvetica,Arial,sans-serif\""
)

func draw(rows []row, title string) string {
	sections := order(rows, func(r row) string { return r.section })
	systems := order(rows, func(r row) string {
		if r.system == "target" {
			return ""
		}
		return r.system
	})
	colour := map[string]string{}
	i := 0
	for _, s := range systems {
		if s != "" {
			colour[s] = palette[i%len(palette)]
			i++
		}
	}
	height := titleH + len(sections)*panelH + 10
	var b strings.Builder
	fmt.Fprintf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" %s font-size=\"12\">\n",
		width, height, width, height, fontFace)
	fmt.Fprintf(&b, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n")
	if title != "" {
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"24\" font-size=\"13\" font-weight=\"bold\">%s</text>\n", marginL, esc(title))
	}
	for si, sec := range sections {
		var secRows []row
		for _, r := range rows {
			if r.section == sec {
				secRows = append(secRows, r)
			}
		}
		panel(&b, sec, secRows, colour, titleH+si*panelH)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func panel(b *strings.Builder, sec string, rows []row, colour map[string]string, y0 int) {
	tests := order(rows, func(r row) string { return r.test })
	var systems []string
	for _, s := range order(rows, func(r row) string { return r.system }) {
		if s != "target" {
			systems = append(systems, s)
		}
	}
	top := 0.0
	for _, r := range rows {
		top = max(top, r.value)
	}
	yMax, step := niceScale(top)
	x0, x1 := float64(marginL), float64(width-marginR)
	py0, py1 := float64(y0+plotTop), float64(y0+panelH-plotBot) // top and bottom of the plot area
	yOf := func(v float64) float64 { return py1 - (py1-py0)*v/yMax }

	t := sectionTitles[sec]
	if t == "" {
		t = sec
	}
	fmt.Fprintf(b, "<text x=\"%.0f\" y=\"%d\" font-size=\"13\" font-weight=\"bold\">%s</text>\n", x0, y0+20, esc(t))
	for v := 0.0; v <= yMax*1.0001; v += step {
		y := yOf(v)
		fmt.Fprintf(b, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x0, y, x1, y)
		fmt.Fprintf(b, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%s</text>\n", x0-6, y+4, short(v))
	}
	fmt.Fprintf(b, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#333\"/>\n", x0, py1, x1, py1)

	groupW := (x1 - x0) / float64(max(1, len(tests)))
	barW := min(48, groupW*0.8/float64(max(1, len(systems))))
	for ti, test := range tests {
		gx := x0 + groupW*float64(ti)
		var present []string
		for _, s := range systems {
			if find(rows, test, s) != nil {
				present = append(present, s)
			}
		}
		left := gx + (groupW-barW*float64(len(present)))/2
		for k, s := range present {
			r := find(rows, test, s)
			x := left + barW*float64(k)
			y := yOf(r.value)
			fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s, %s: %s %s</title></rect>\n",
				x+1, y, barW-2, py1-y, colour[s], esc(test), esc(s), strconv.FormatFloat(r.value, 'f', -1, 64), esc(r.unit))
			fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\" fill=\"#333\">%s</text>\n",
				x+barW/2, y-3, short(r.value))
		}
		if tr := find(rows, test, "target"); tr != nil {
			y := yOf(tr.value)
			fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c00\" stroke-dasharray=\"5,3\"/>\n",
				gx+4, y, gx+groupW-4, y)
			fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"10\" fill=\"#c00\">target %s</text>\n",
				gx+groupW-4, y-3, short(tr.value))
		}
		fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", gx+groupW/2, py1+16, esc(test))
	}
	for k, s := range systems {
		ly := py0 + float64(k)*18
		fmt.Fprintf(b, "<rect x=\"%.0f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", x1+16, ly, colour[s])
		fmt.Fprintf(b, "<text x=\"%.0f\" y=\"%.1f\">%s</text>\n", x1+34, ly+10, esc(s))
	}
}

func find(rows []row, test, system string) *row {
	for i := range rows {
		if rows[i].test == test && rows[i].system == system {
			return &rows[i]
		}
	}
	return nil
}

// niceScale returns an axis maximum at or above top and a grid step: 1, 2 or
// 5 times a power of ten, about five lines.
func niceScale(top float64) (yMax, step float64) {
	if top <= 0 {
		return 1, 0.25
	}
	raw := top / 5
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		step = m * p
		if step >= raw {
			break
		}
	}
	yMax = math.Ceil(top*1.08/step) * step
	return yMax, step
}

// short formats 123456 as 123k, 1234 as 1.2k, 12.5 as 12.5.
func short(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 0, 64) + "k"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	case v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

func esc(s string) string { return html.EscapeString(s) }
