package operations

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// dashboardPanel is what the test reads of a Grafana panel.
type dashboardPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

var (
	promName    = regexp.MustCompile(`\b(?:fenceproxy|go|process)_[a-zA-Z0-9_]+\b`)
	promMatched = regexp.MustCompile(`\b((?:fenceproxy|go|process)_[a-zA-Z0-9_]+)\{([^}]*)\}`)
	promEqual   = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"`)
)

// TestGrafanaDashboard: deploy/grafana/fenceproxy.json parses as a Grafana
// dashboard whose data source is a variable, and every metric its queries
// name, with every label value they match on exactly, is served by a real
// proxy's /metrics after the lock family has been used, or by a tier of
// three's (so a renamed or removed metric breaks this test, not the
// dashboard in silence); and a row for the tier shows its Raft state.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana/fenceproxy.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID        string           `json:"uid"`
		Title      string           `json:"title"`
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("fenceproxy.json: %v", err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Fatalf("dashboard has no uid or title")
	}
	var exprs []string
	hasDatasourceVar := false
	for _, v := range dash.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			hasDatasourceVar = true
		}
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				exprs = append(exprs, s)
			}
		}
	}
	if !hasDatasourceVar {
		t.Fatalf("no templating variable datasource of type datasource (prometheus)")
	}
	ids := map[int]bool{}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: bad gridPos", p.Title)
			}
			if p.Type != "row" {
				if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q: data source is not the ${datasource} variable", p.Title)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no queries", p.Title)
				}
			}
			for _, tg := range p.Targets {
				exprs = append(exprs, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	checkTierRow(t, dash.Panels)

	// A proxy whose every labelled series the dashboard matches on has
	// appeared at least once.
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0,
		Args: []string{"--slowlock-held-longer-than", "0", "--max-waiters", "0"}})
	c := testenv.Dial(t, p.Addr)
	for _, args := range [][]string{
		{"LOCK.ACQUIRE", "d", "a", "60000"},
		{"LOCK.ACQUIRE", "d", "b", "60000"},
		{"LOCK.ACQUIRE", "d", "b", "60000", "WAIT", "100"}, // queuefull
		{"LOCK.ACQUIRE", "d", "a", "0"},                    // error
		{"LOCK.RENEW", "d", "a", "60000"},
		{"LOCK.RENEW", "d", "a", "0"},
		{"FENCE.CHECK", "d", "1"},
		{"FENCE.CHECK", "d", "0"},
		{"LOCK.RELEASE", "d", "a"}, // held, as --slowlock-held-longer-than is 0
		{"LOCK.RELEASE", "", "a"},
		{"SET", "k", "v"},
	} {
		c.Do(args...)
	}
	_, body := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/metrics")
	// A tier of three serves the fenceproxy_tier_* series: every node its
	// role, term and indexes, the leader its peers' health and lag.
	tier := testenv.StartTier(t, testenv.TierOptions{Backend: master.Addr})
	leader := tier.Nodes[tier.Leader(t)]
	testenv.Dial(t, leader.Addr).Do("LOCK.ACQUIRE", "t", "a", "60000")
	// A peer's lag is served once the peer has reported its progress to
	// the leader (within a second of the election).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, b := testenv.HTTPGet(t, "http://"+leader.MetricsAddr+"/metrics")
		if strings.Count(b, "\nfenceproxy_tier_peer_lag{") == 2 || time.Now().After(deadline) {
			break
		}
	}
	for _, n := range tier.Nodes {
		_, b := testenv.HTTPGet(t, "http://"+n.MetricsAddr+"/metrics")
		body += "\n" + b
	}
	var series []string // sample lines
	for _, line := range strings.Split(body, "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			series = append(series, line)
		}
	}
	served := func(name string, matchers [][]string) bool {
		for _, s := range series {
			if !strings.HasPrefix(s, name+"{") && !strings.HasPrefix(s, name+" ") {
				continue
			}
			ok := true
			for _, m := range matchers {
				ok = ok && strings.Contains(s, m[1]+`="`+m[2]+`"`)
			}
			if ok {
				return true
			}
		}
		return false
	}
	used := map[string]bool{}
	for _, e := range exprs {
		names := promName.FindAllString(e, -1)
		if len(names) == 0 {
			t.Errorf("query %q names no fenceproxy, go or process metric", e)
		}
		for _, n := range names {
			used[strings.TrimSuffix(n, "_bucket")] = true
			if !served(n, nil) {
				t.Errorf("query %q: metric %s is not served by /metrics", e, n)
			}
		}
		for _, m := range promMatched.FindAllStringSubmatch(e, -1) {
			eq := promEqual.FindAllStringSubmatch(m[2], -1)
			if !served(m[1], eq) {
				t.Errorf("query %q: no series %s{%s} in /metrics", e, m[1], m[2])
			}
		}
	}
	// Metrics with no panel yet: reported, not failed (a branch adding a
	// metric need not add its panel in the same change).
	var unused []string
	seen := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE fenceproxy_"); ok {
			name = "fenceproxy_" + strings.Fields(name)[0]
			if !used[name] && !seen[name] {
				seen[name] = true
				unused = append(unused, name)
			}
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Logf("fenceproxy metrics on no dashboard panel: %s", strings.Join(unused, ", "))
	}
	t.Logf("%d queries checked against /metrics", len(exprs))
}

// tierMetrics are what the dashboard's tier row must show (issue 14: role,
// term, leader, commit and applied index, each peer's health and lag).
var tierMetrics = []string{
	"fenceproxy_tier_role", "fenceproxy_tier_ready", "fenceproxy_tier_term",
	"fenceproxy_tier_commit_index", "fenceproxy_tier_applied_index",
	"fenceproxy_tier_peer_lag", "fenceproxy_tier_peer_healthy",
}

// checkTierRow: the dashboard has a row for the tier, and the panels under
// it (up to the next row) query every metric in tierMetrics.
func checkTierRow(t *testing.T, panels []dashboardPanel) {
	t.Helper()
	inTier, found := false, false
	queried := map[string]bool{}
	for _, p := range panels {
		if p.Type == "row" {
			inTier = strings.HasPrefix(p.Title, "Tier")
			found = found || inTier
			continue
		}
		if !inTier {
			continue
		}
		for _, tg := range p.Targets {
			for _, n := range promName.FindAllString(tg.Expr, -1) {
				queried[n] = true
			}
		}
	}
	if !found {
		t.Fatalf("no dashboard row titled Tier...")
	}
	for _, m := range tierMetrics {
		if !queried[m] {
			t.Errorf("the tier row has no panel querying %s", m)
		}
	}
}
