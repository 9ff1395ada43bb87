package telemetry_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v4"

	"github.com/orderlyhq/orderly/telemetry"
)

// metricNames returns the names of every metric of telemetry.Metrics, with the series a
// histogram exposes (_bucket, _sum, _count).
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	m := telemetry.NewMetrics()
	names := map[string]bool{}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok {
			continue
		}
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			name := fqName.FindStringSubmatch(d.String())[1]
			names[name] = true
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[name+suffix] = true
			}
		}
	}
	return names
}

var metricRef = regexp.MustCompile(`\borderly_[a-z0-9_]+`)

// checkExprs fails for every orderly_* name in expr that telemetry does not export.
func checkExprs(t *testing.T, where string, exprs []string, names map[string]bool) {
	t.Helper()
	refs := 0
	for _, e := range exprs {
		for _, ref := range metricRef.FindAllString(e, -1) {
			refs++
			if !names[ref] {
				t.Errorf("%s: %q names %s, which package telemetry does not export", where, e, ref)
			}
		}
	}
	if refs == 0 {
		t.Errorf("%s: no orderly_* metric named at all", where)
	}
}

// TestDashboardNamesRealMetrics checks that every panel query of the Grafana dashboard
// names metrics that exist, and that the file is a dashboard (uid, panels with targets).
func TestDashboardNamesRealMetrics(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../deploy/grafana/orderly.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if d.UID == "" || len(d.Panels) < 10 {
		t.Fatalf("dashboard uid %q with %d panels, want a uid and the panels", d.UID, len(d.Panels))
	}
	names := metricNames(t)
	for _, p := range d.Panels {
		var exprs []string
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
		checkExprs(t, "panel "+p.Title, exprs, names)
	}
}

// TestAlertRules checks the alert rules: with promtool when it is installed (Debian's
// prometheus package), and always by parsing the YAML: every rule has a name, an expression
// naming real metrics, a severity and a summary; the alerts docs/operations/metrics-and-dashboards.md promises exist.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	const path = "../deploy/prometheus/alerts.yaml"
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
			t.Errorf("promtool check rules: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not installed (apt-get install prometheus): checking the YAML only")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("alerts YAML: %v", err)
	}
	names := metricNames(t)
	seen := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			seen[r.Alert] = true
			if r.Alert == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %+v: want alert, severity and summary", r)
			}
			checkExprs(t, "alert "+r.Alert, []string{r.Expr}, names)
		}
	}
	for _, want := range []string{"OrderlyTimerMissedOrders", "OrderlyDeadLetters", "OrderlyClockOffset", "OrderlyReconciliationFindings"} {
		if !seen[want] {
			t.Errorf("alert %s is missing", want)
		}
	}
}
