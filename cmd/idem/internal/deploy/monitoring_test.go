package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/cmd/idem/internal/server"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/config"
	"github.com/idemhq/idem/internal/storage"
	"github.com/idemhq/idem/webhook"
)

// The pieces of PromQL that name no metric, removed before the names are
// read: strings, label matchers, ranges, grouping label lists, Grafana
// variables.
var (
	promqlStringRE   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlMatchersRE = regexp.MustCompile(`\{[^}]*\}`)
	promqlRangeRE    = regexp.MustCompile(`\[[^\]]*\]`)
	promqlGroupingRE = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promqlVarRE      = regexp.MustCompile(`\$\{?\w+\}?`)
	promqlTokenRE    = regexp.MustCompile(`[0-9][0-9a-zA-Z_.]*|[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// promqlSelectorRE and promqlMatcherRE read a selector's label matchers.
	promqlSelectorRE = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	promqlMatcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
)

// promqlKeywords are identifiers of the language, not metrics.
var promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true, "start": true, "end": true}

// promqlNames returns the metric names an expression reads: the
// identifiers left once strings, matchers, ranges, grouping lists and
// variables are gone, minus numbers, keywords and functions (an
// identifier followed by '(').
func promqlNames(expr string) []string {
	s := promqlStringRE.ReplaceAllString(expr, `""`)
	for _, re := range []*regexp.Regexp{promqlMatchersRE, promqlRangeRE, promqlGroupingRE, promqlVarRE} {
		s = re.ReplaceAllString(s, " ")
	}
	var names []string
	for _, loc := range promqlTokenRE.FindAllStringIndex(s, -1) {
		tok := s[loc[0]:loc[1]]
		if tok[0] >= '0' && tok[0] <= '9' || promqlKeywords[tok] {
			continue
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue
		}
		if !slices.Contains(names, tok) {
			names = append(names, tok)
		}
	}
	return names
}

func TestPromQLNames(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string][]string{
		`sum by (route, code) (rate(idem_http_request_duration_seconds_count{job=~"$job"}[$__rate_interval]))`: {"idem_http_request_duration_seconds_count"},
		`(sum(idem_outbox_relay_shards) or vector(0)) < 64`:                                                    {"idem_outbox_relay_shards"},
		`histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m])))`:                                           {"x_bucket"},
		`a / on(instance) group_left b offset 5m > bool 1e3`:                                                   {"a", "b"},
		`sum(rate(y{outcome="a{b}"}[5m])) by (outcome) / ignoring (outcome) sum(rate(y[5m]))`:                  {"y"},
		"idem_ready == 0": {"idem_ready"},
		"vector(1)":       nil,
	} {
		if got := promqlNames(expr); !slices.Equal(got, want) {
			t.Errorf("promqlNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// scrape is what one /metrics answer held: each series name with the label
// names seen on it.
type scrape map[string]map[string]bool

func parseScrape(body []byte) scrape {
	s := scrape{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		// name{label="value",…} value: values may hold spaces (routes do).
		name, labels := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
			if line[i] == '{' {
				labels = line[i:max(strings.LastIndexByte(line, '}'), i)]
			}
		}
		if s[name] == nil {
			s[name] = map[string]bool{}
		}
		for _, m := range promqlMatcherRE.FindAllStringSubmatch(labels, -1) {
			s[name][m[1]] = true
		}
	}
	return s
}

// labelValues are the values idem gives the labels alerts and panels
// select on, from the constants that produce them.
var labelValues = map[string]map[string][]string{
	"idem_http_idempotency_outcomes_total": {"outcome": {
		string(idemhttp.KindFirst), string(idemhttp.KindReplayed), string(idemhttp.KindReused),
		string(idemhttp.KindInFlight), string(idemhttp.KindMissingKey), string(idemhttp.KindInvalidKey),
		string(idemhttp.KindInvalidBody), string(idemhttp.KindBodyTooLarge), string(idemhttp.KindUnavailable),
		string(idemhttp.KindHandlerError), string(idemhttp.KindError), string(idemhttp.KindExpired)}},
	"idem_webhook_deliveries_total": {"outcome": {"first", "replayed", "in_flight", "challenge", "handler_failed", "unavailable", "error",
		"rejected_" + webhook.CodeSignatureMissing, "rejected_" + webhook.CodeSignatureInvalid, "rejected_" + webhook.CodeTimestampStale,
		"rejected_" + webhook.CodeMalformedBody, "rejected_" + webhook.CodeEventIDMissing, "rejected_" + webhook.CodeBodyTooLarge}},
}

// targetLabels are added by Prometheus to every series it scrapes.
var targetLabels = map[string]bool{"job": true, "instance": true}

// literalAlternation is a regex matcher that is a plain list of values.
var literalAlternation = regexp.MustCompile(`^[a-z_]+(\|[a-z_]+)*$`)

// checkExpr returns what is wrong with expr against a scrape: a metric
// name idem does not expose, a label it does not put on that metric, a
// value it never gives that label.
func checkExpr(expr string, sc scrape) []string {
	var problems []string
	names := promqlNames(expr)
	if len(names) == 0 {
		problems = append(problems, "reads no metric")
	}
	for _, n := range names {
		if sc[n] == nil {
			problems = append(problems, fmt.Sprintf("metric %s is not exposed", n))
		}
	}
	hasLabel := func(metrics []string, label string) bool {
		return targetLabels[label] || slices.ContainsFunc(metrics, func(m string) bool { return sc[m][label] })
	}
	for _, sel := range promqlSelectorRE.FindAllStringSubmatch(expr, -1) {
		for _, m := range promqlMatcherRE.FindAllStringSubmatch(sel[2], -1) {
			label, op, value := m[1], m[2], m[3]
			if !hasLabel([]string{sel[1]}, label) {
				problems = append(problems, fmt.Sprintf("%s has no label %s", sel[1], label))
				continue
			}
			allowed := labelValues[sel[1]][label]
			if allowed == nil || (op != "=" && op != "=~") || (op == "=~" && !literalAlternation.MatchString(value)) {
				continue
			}
			for v := range strings.SplitSeq(value, "|") {
				if !slices.Contains(allowed, v) {
					problems = append(problems, fmt.Sprintf("%s{%s} is never %q", sel[1], label, v))
				}
			}
		}
	}
	stripped := promqlStringRE.ReplaceAllString(expr, `""`)
	for _, g := range promqlGroupingRE.FindAllStringSubmatch(stripped, -1) {
		for l := range strings.SplitSeq(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !hasLabel(names, l) {
				problems = append(problems, fmt.Sprintf("no metric of the expression has label %s", l))
			}
		}
	}
	return problems
}

// alertRules is the part of a Prometheus rules file the tests read.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readAlerts(t *testing.T) alertRules {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var r alertRules
	if err := yaml.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// dashboardQueries returns every PromQL expression of the dashboard: its
// panels' targets (rows' panels included) and the metric its variables
// read (label_values(METRIC, label)).
func dashboardQueries(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("grafana", "idem.json"))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	queries := map[string]string{}
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatal(err)
			}
			for i, tg := range p.Targets {
				queries[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValuesRE := regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*\w+\s*\)$`)
	for _, v := range d.Templating.List {
		if v.Definition == "" {
			continue
		}
		m := labelValuesRE.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("variable %s: %q: want label_values(METRIC, label)", v.Name, v.Definition)
		}
		queries["variable "+v.Name] = m[1]
	}
	if len(queries) < 10 {
		t.Fatalf("the dashboard has %d queries: it was not read", len(queries))
	}
	return queries
}

// headingAnchors returns the GitHub anchors of docs/operations.md's headings.
func headingAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for line := range strings.SplitSeq(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimSpace(strings.TrimLeft(h, "#"))
			anchors[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
		}
	}
	return anchors
}

// promtool returns promtool's path, failing t (never skipping it) when it
// is missing: scripts/test installs it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: scripts/test installs it (apt-get install prometheus) when run as root; " +
			"install Debian's prometheus package and run the tests again")
	}
	return p
}

// The alert rules are valid for Prometheus (promtool check rules), fire
// and stay silent as their unit tests say (promtool test rules), and each
// says how bad it is, what it means, and where its runbook is.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	pt := promtool(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		command(t, nil, "prometheus", pt, args...)
	}
	anchors := headingAnchors(t)
	r := readAlerts(t)
	var n int
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			n++
			if d, err := time.ParseDuration(rule.For); err != nil || d <= 0 {
				t.Errorf("%s: for %q: every alert waits before it fires", rule.Alert, rule.For)
			}
			if s := rule.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", rule.Alert, s)
			}
			if rule.Annotations["summary"] == "" || rule.Annotations["description"] == "" {
				t.Errorf("%s: want summary and description annotations", rule.Alert)
			}
			const docs = "https://github.com/idemhq/idem/blob/main/docs/operations.md#"
			anchor, ok := strings.CutPrefix(rule.Annotations["runbook_url"], docs)
			if !ok || anchor != strings.ToLower(rule.Alert) || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q: want %s%s, a heading of docs/operations.md", rule.Alert,
					rule.Annotations["runbook_url"], docs, strings.ToLower(rule.Alert))
			}
		}
	}
	if n < 6 {
		t.Fatalf("%d alert rules: alerts.yaml was not read", n)
	}
}

// monitoringWebhooks is the webhook endpoint the traffic of
// TestMonitoringNames delivers to.
const monitoringWebhooks = `
webhooks:
  stripe-main:
    provider: stripe
    secrets: [whsec_monitoring_test]
    tenant: acme
`

// startServer runs the service as `idem serve` does on its defaults
// (SQLite, the embedded NATS server, the relay inside), on a loopback port,
// until t ends; it returns the base URL.
func startServer(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg := config.Default()
	cfg.DB = "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	cfg.Webhooks = []byte(monitoringWebhooks)
	d, err := storage.Open(ctx, cfg.DB)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(ctx, cfg, d, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
		_ = d.Close()
	})
	return "http://" + ln.Addr().String()
}

// request sends one request and returns the status and body.
func request(t *testing.T, method, url, body string, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// Every metric, label and label value the alert rules and the dashboard
// read is one a running server exposes: a misspelt or renamed metric fails
// here instead of leaving an alert that can never fire.
func TestMonitoringNames(t *testing.T) {
	t.Parallel()
	u := startServer(t)
	post := func(path, key, body string, want int) {
		t.Helper()
		header := []string{"Content-Type", "application/json"}
		if key != "" {
			header = append(header, "Idempotency-Key", key)
		}
		if status, b := request(t, "POST", u+path, body, header...); status != want {
			t.Fatalf("POST %s: %d, want %d: %s", path, status, want, b)
		}
	}
	// Traffic that gives the labelled series a value: first arrivals, a
	// replay, a request without a key, a transfer whose event the relay
	// publishes, and a webhook delivery with a forged signature.
	post("/v1/accounts", "acct-a", `{"id":"a","currency":"EUR"}`, http.StatusCreated)
	post("/v1/accounts", "acct-b", `{"id":"b","currency":"EUR"}`, http.StatusCreated)
	transfer := `{"id":"t1","debit_account_id":"a","credit_account_id":"b","amount":5,"currency":"EUR"}`
	post("/v1/transfers", "tr-1", transfer, http.StatusCreated)
	post("/v1/transfers", "tr-1", transfer, http.StatusCreated) // replayed
	post("/v1/transfers", "", transfer, http.StatusBadRequest)  // missing_key
	forged := fmt.Sprintf("t=%d,v1=%064x", time.Now().Unix(), 0)
	if status, b := request(t, "POST", u+"/v1/webhooks/stripe-main", `{"id":"evt_1","type":"invoice.paid"}`,
		"Stripe-Signature", forged); status != http.StatusBadRequest && status != http.StatusUnauthorized {
		t.Fatalf("forged webhook: %d %s", status, b)
	}

	// The relay publishes the transfer's event; wait (bounded) for it.
	var body []byte
	publishedRE := regexp.MustCompile(`(?m)^idem_outbox_published_total (\S+)$`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body = request(t, "GET", u+"/metrics", "")
		if m := publishedRE.FindSubmatch(body); m != nil {
			if v, _ := strconv.ParseFloat(string(m[1]), 64); v > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay published nothing within 30s:\n%s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sc := parseScrape(body)
	for _, want := range []string{`idem_webhook_deliveries_total{endpoint="stripe-main",outcome="rejected_signature_invalid"} 1`,
		`idem_http_idempotency_outcomes_total{outcome="replayed"} 1`} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("the traffic left no %s", want)
		}
	}

	exprs := map[string]string{}
	for _, g := range readAlerts(t).Groups {
		for _, r := range g.Rules {
			exprs["alert "+r.Alert] = r.Expr
		}
	}
	for where, q := range dashboardQueries(t) {
		exprs["dashboard "+where] = q
	}
	for where, expr := range exprs {
		for _, p := range checkExpr(expr, sc) {
			t.Errorf("%s: %s\n\t%s", where, p, strings.TrimSpace(expr))
		}
	}

	// The check itself: a misspelt name, label or value is caught.
	for _, bad := range []string{
		`max(idem_outbox_oldest_unsent_age_second) > 60`,
		`sum by (rout) (rate(idem_http_request_duration_seconds_count[5m]))`,
		`rate(idem_http_idempotency_outcomes_total{outcome="inflight"}[5m])`,
		`rate(idem_webhook_deliveries_total{outcome=~"rejected_signature_invalid|rejected_sig"}[5m])`,
		`rate(idem_webhook_deliveries_total{endpont="stripe-main"}[5m])`,
	} {
		if len(checkExpr(bad, sc)) == 0 {
			t.Errorf("checkExpr found nothing wrong with %q", bad)
		}
	}
}
