package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/jackc/pgx/v5/pgxpool"
	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/idemhq/idem/cmd/idem/internal/broker"
	"github.com/idemhq/idem/internal/config"
)

// composeFile is the part of the compose specification compose.yaml uses.
// Decoding refuses any other key, so a misspelt one (healtcheck,
// depend_on) fails instead of being ignored as compose would ignore it.
type composeFile struct {
	Name     string                    `json:"name"`
	Services map[string]composeService `json:"services"`
	Volumes  map[string]any            `json:"volumes"`
}

type composeService struct {
	Image           string            `json:"image"`
	Command         []string          `json:"command"`
	Environment     map[string]string `json:"environment"`
	Restart         string            `json:"restart"`
	StopGracePeriod string            `json:"stop_grace_period"`
	DependsOn       map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
	Healthcheck *struct {
		Test        []string `json:"test"`
		Interval    string   `json:"interval"`
		Timeout     string   `json:"timeout"`
		Retries     int      `json:"retries"`
		StartPeriod string   `json:"start_period"`
	} `json:"healthcheck"`
	Ports    []string `json:"ports"`
	Volumes  []string `json:"volumes"`
	Profiles []string `json:"profiles"`
	Hostname string   `json:"hostname"`
}

// composeVarRE matches compose's interpolations: $$, ${NAME}, ${NAME:-default},
// ${NAME-default}, ${NAME:?error}, ${NAME?error} and $NAME.
var composeVarRE = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// interpolate replaces s's variables as compose does, from vars.
func interpolate(s string, vars map[string]string) (string, error) {
	var errs []error
	out := composeVarRE.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		sub := composeVarRE.FindStringSubmatch(m)
		name, op, arg := sub[1], sub[2], sub[3]
		if name == "" {
			name = sub[4]
		}
		v, set := vars[name]
		unset := !set || (strings.HasPrefix(op, ":") && v == "")
		switch {
		case !unset:
			return v
		case strings.HasSuffix(op, "-"):
			return arg
		case strings.HasSuffix(op, "?"):
			errs = append(errs, fmt.Errorf("required variable %s is missing: %s", name, arg))
		}
		return ""
	})
	return out, errors.Join(errs...)
}

// interpolateAll interpolates every string of a decoded YAML document.
func interpolateAll(v any, vars map[string]string) (any, error) {
	switch v := v.(type) {
	case string:
		return interpolate(v, vars)
	case map[string]any:
		var errs []error
		for k, e := range v {
			var err error
			v[k], err = interpolateAll(e, vars)
			errs = append(errs, err)
		}
		return v, errors.Join(errs...)
	case []any:
		var errs []error
		for i, e := range v {
			var err error
			v[i], err = interpolateAll(e, vars)
			errs = append(errs, err)
		}
		return v, errors.Join(errs...)
	default:
		return v, nil
	}
}

// loadCompose reads compose.yaml as compose would with vars as its
// environment: anchors and merge keys resolved, x- extensions dropped,
// variables interpolated.
func loadCompose(vars map[string]string) (composeFile, error) {
	var cf composeFile
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		return cf, err
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return cf, err
	}
	for k := range raw {
		if strings.HasPrefix(k, "x-") {
			delete(raw, k)
		}
	}
	if _, err := interpolateAll(raw, vars); err != nil {
		return cf, err
	}
	j, err := json.Marshal(raw)
	if err != nil {
		return cf, err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return cf, dec.Decode(&cf)
}

// dockerfileEnv returns the ENV the Dockerfile gives every container: the
// settings an idem service has before compose adds its own.
func dockerfileEnv(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	var instr strings.Builder
	flush := func() {
		if fields := strings.Fields(instr.String()); len(fields) > 0 && fields[0] == "ENV" {
			for _, kv := range fields[1:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("Dockerfile: ENV %q: want KEY=VALUE", kv)
				}
				env[k] = v
			}
		}
		instr.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			instr.WriteString(cont + " ")
			continue
		}
		instr.WriteString(line)
		flush()
	}
	if len(env) == 0 {
		t.Fatal("Dockerfile: no ENV")
	}
	return env
}

// composeVars is the environment TestCompose gives compose.yaml: the
// variables it requires, with valid values.
var composeVars = map[string]string{
	"POSTGRES_PASSWORD": "6f1c0a9e2b7d4e8f9a0b1c2d3e4f5a6b",
	"IDEM_API_KEYS":     "acme:0123456789abcdef0123",
	"IDEM_IMAGE":        "idem:v1.4.0",
}

// compose.yaml is checked against the real parsers of what it configures:
// idem's flag sets and settings (a renamed flag or an invalid value fails),
// nats-server's command line, pgx's URL parser and idem's --publish parser;
// its health checks run the idem binary; the NATS servers route to each
// other; everything a service waits for has a health check; every volume is
// declared.
//
// Not parallel: nats-server's ConfigureOptions sets a package variable.
func TestCompose(t *testing.T) {
	for name := range composeVars {
		t.Run("requires "+name, func(t *testing.T) {
			vars := maps.Clone(composeVars)
			delete(vars, name)
			if _, err := loadCompose(vars); err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("without %s: %v, want an error naming it (no default secret)", name, err)
			}
		})
	}
	cf, err := loadCompose(composeVars)
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	var idemSvcs, natsSvcs, pgSvcs []string
	for name, s := range cf.Services {
		switch {
		case strings.HasPrefix(s.Image, "rabbitmq:"):
			// Optional: only with its profile, and on a volume (its
			// durable queues and persistent messages outlive a restart).
			if !slices.Equal(s.Profiles, []string{"rabbitmq"}) || !mounts(s, "/var/lib/rabbitmq") || s.Hostname == "" {
				t.Errorf("service %s: profiles %q, volumes %q, hostname %q: want the rabbitmq profile, /var/lib/rabbitmq on a volume and a fixed hostname",
					name, s.Profiles, s.Volumes, s.Hostname)
			}
		case s.Image == composeVars["IDEM_IMAGE"]:
			idemSvcs = append(idemSvcs, name)
		case strings.HasPrefix(s.Image, "nats:"):
			natsSvcs = append(natsSvcs, name)
		case strings.HasPrefix(s.Image, "postgres:"):
			pgSvcs = append(pgSvcs, name)
		default:
			t.Errorf("service %s: unexpected image %q", name, s.Image)
		}
	}
	slices.Sort(natsSvcs)
	if len(pgSvcs) != 1 || len(natsSvcs) != 3 {
		t.Fatalf("want one PostgreSQL and a three-node NATS cluster, got %q and %q", pgSvcs, natsSvcs)
	}

	t.Run("every service", func(t *testing.T) {
		for name, s := range cf.Services {
			if s.Restart != "unless-stopped" && s.Restart != "always" {
				t.Errorf("%s: restart %q, want unless-stopped or always", name, s.Restart)
			}
			if s.Healthcheck == nil || len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD" {
				t.Errorf("%s: no health check of the form [CMD, …]", name)
				continue
			}
			for _, d := range []string{s.Healthcheck.Interval, s.Healthcheck.Timeout, s.Healthcheck.StartPeriod} {
				if _, err := time.ParseDuration(d); err != nil {
					t.Errorf("%s: health check duration %q: %v", name, d, err)
				}
			}
			for dep, c := range s.DependsOn {
				if d, ok := cf.Services[dep]; !ok || d.Healthcheck == nil || c.Condition != "service_healthy" {
					t.Errorf("%s: depends on %s (condition %q): want an existing service with a health check, service_healthy", name, dep, c.Condition)
				}
			}
		}
	})

	t.Run("volumes", func(t *testing.T) {
		used := map[string]bool{}
		for name, s := range cf.Services {
			for _, v := range s.Volumes {
				src, _, _ := strings.Cut(v, ":")
				if _, ok := cf.Volumes[src]; !ok {
					t.Errorf("%s: volume %q is not declared under volumes:", name, src)
				}
				used[src] = true
			}
		}
		for v := range cf.Volumes {
			if !used[v] {
				t.Errorf("volume %s is declared and not used", v)
			}
		}
		if !mounts(cf.Services[pgSvcs[0]], "/var/lib/postgresql/data") {
			t.Errorf("%s: the database is not on a volume", pgSvcs[0])
		}
	})

	pg := cf.Services[pgSvcs[0]]
	natsClients := map[string]bool{} // host:port of every NATS server's clients
	t.Run("nats cluster", func(t *testing.T) {
		clusterPorts := map[string]int{}
		opts := map[string]*natsserver.Options{}
		for _, name := range natsSvcs {
			o := natsOptions(t, name, cf.Services[name].Command)
			opts[name], clusterPorts[name] = o, o.Cluster.Port
			port := o.Port
			if port == 0 {
				port = natsserver.DEFAULT_PORT
			}
			natsClients[fmt.Sprintf("%s:%d", name, port)] = true
		}
		for _, name := range natsSvcs {
			o, s := opts[name], cf.Services[name]
			if o.ServerName != name || !o.JetStream || o.Cluster.Name != opts[natsSvcs[0]].Cluster.Name || o.Cluster.Name == "" {
				t.Errorf("%s: name %q, JetStream %v, cluster %q: want its service name, JetStream, one named cluster",
					name, o.ServerName, o.JetStream, o.Cluster.Name)
			}
			if !mounts(s, o.StoreDir) {
				t.Errorf("%s: JetStream's store %q is not on a volume", name, o.StoreDir)
			}
			var routes []string
			for _, r := range o.Routes {
				routes = append(routes, r.Host)
			}
			var want []string
			for _, other := range natsSvcs {
				if other != name {
					want = append(want, fmt.Sprintf("%s:%d", other, clusterPorts[other]))
				}
			}
			slices.Sort(routes)
			if !slices.Equal(routes, want) {
				t.Errorf("%s: routes %q, want the other servers' cluster ports %q", name, routes, want)
			}
			if u := healthcheckURL(t, name, s.Healthcheck.Test); u == nil || u.Port() != fmt.Sprint(o.HTTPPort) || u.Path != "/healthz" {
				t.Errorf("%s: health check %q does not ask the monitoring port %d's /healthz", name, s.Healthcheck.Test, o.HTTPPort)
			}
		}
	})

	imageEnv := dockerfileEnv(t)
	var serves, relays int
	for _, name := range idemSvcs {
		t.Run(name, func(t *testing.T) {
			s := cf.Services[name]
			for _, dep := range append([]string{pgSvcs[0]}, natsSvcs...) {
				if s.DependsOn[dep].Condition != "service_healthy" {
					t.Errorf("does not wait for %s to be healthy", dep)
				}
			}
			if len(s.Command) == 0 {
				t.Fatal("no command")
			}
			settings := map[string][]string{"serve": config.ServeSettings, "relay": config.RelaySettings}[s.Command[0]]
			if settings == nil {
				t.Fatalf("command %q: want serve or relay", s.Command)
			}
			env := maps.Clone(imageEnv)
			for k, v := range s.Environment {
				env[k] = v
			}
			cfg, err := config.Load(s.Command[0], s.Command[1:], func(k string) string { return env[k] }, settings...)
			if err != nil {
				t.Fatalf("idem %s with %q and its environment: %v", s.Command[0], s.Command[1:], err)
			}
			checkPostgresURL(t, cfg.DB, pgSvcs[0], pg.Environment)
			checkPublishURL(t, cfg.Publish, natsClients)

			var listen string
			switch s.Command[0] {
			case "serve":
				serves++
				listen = cfg.Addr
				if cfg.Relay {
					t.Error("serve runs a relay beside the relay service: want --relay=false")
				}
				_, port, _ := net.SplitHostPort(listen)
				if !slices.ContainsFunc(s.Ports, func(p string) bool { return strings.HasSuffix(p, ":"+port) }) {
					t.Errorf("ports %q publish no host port to the listen port %s", s.Ports, port)
				}
				if grace, err := time.ParseDuration(s.StopGracePeriod); err != nil || grace <= cfg.ShutdownTimeout {
					t.Errorf("stop_grace_period %q: want more than the shutdown timeout %s, or the drain is killed", s.StopGracePeriod, cfg.ShutdownTimeout)
				}
			case "relay":
				relays++
				listen = cfg.MetricsAddr
				if listen == "" {
					t.Fatal("relay without --metrics-addr: no health check or metrics can reach it")
				}
			}
			if host, _, _ := net.SplitHostPort(listen); host != "0.0.0.0" {
				t.Errorf("listens on %s: other containers (Prometheus) cannot reach it", listen)
			}
			checkIdemHealthcheck(t, s.Healthcheck.Test, listen)
		})
	}
	if serves < 2 || relays < 1 {
		t.Errorf("%d serve and %d relay services: want at least two of serve and one relay", serves, relays)
	}
}

// mounts reports whether s mounts a named volume at dir.
func mounts(s composeService, dir string) bool {
	return slices.ContainsFunc(s.Volumes, func(v string) bool {
		parts := strings.Split(v, ":")
		return len(parts) >= 2 && parts[1] == dir && !strings.ContainsAny(parts[0][:1], "/.~")
	})
}

// natsOptions parses a NATS service's command line as nats-server does.
func natsOptions(t *testing.T, name string, command []string) *natsserver.Options {
	t.Helper()
	args := command
	if len(args) > 0 && args[0] == "nats-server" {
		args = args[1:]
	}
	fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	noop := func() {}
	o, err := natsserver.ConfigureOptions(fs, args, noop, noop, noop)
	if err != nil || o == nil {
		t.Fatalf("%s: nats-server %q: %v", name, command, err)
	}
	return o
}

// healthcheckURL is the URL a [CMD, tool, …, URL] health check asks: its
// --url value, or else its last argument.
func healthcheckURL(t *testing.T, name string, test []string) *url.URL {
	t.Helper()
	raw := test[len(test)-1]
	if i := slices.Index(test, "--url"); i >= 0 && i+1 < len(test) {
		raw = test[i+1]
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		t.Errorf("%s: health check %q: no URL", name, test)
		return nil
	}
	return u
}

func checkPostgresURL(t *testing.T, db, host string, pgEnv map[string]string) {
	t.Helper()
	pc, err := pgxpool.ParseConfig(db)
	if err != nil {
		t.Fatalf("--db: %v", err)
	}
	cc := pc.ConnConfig
	if cc.Host != host || cc.Port != 5432 || cc.User != pgEnv["POSTGRES_USER"] ||
		cc.Password != pgEnv["POSTGRES_PASSWORD"] || cc.Database != pgEnv["POSTGRES_DB"] {
		t.Errorf("--db names %s@%s:%d/%s, want the %s service's user and database", cc.User, cc.Host, cc.Port, cc.Database, host)
	}
}

func checkPublishURL(t *testing.T, publish string, natsClients map[string]bool) {
	t.Helper()
	n, err := broker.ParseNATS(publish)
	if err != nil {
		t.Fatalf("--publish: %v", err)
	}
	got := map[string]bool{}
	for _, s := range n.Servers {
		got[strings.TrimPrefix(s, "nats://")] = true
	}
	if fmt.Sprint(got) != fmt.Sprint(natsClients) {
		t.Errorf("--publish lists %v, want every NATS server %v", got, natsClients)
	}
	if n.Config.Replicas != len(natsClients) {
		t.Errorf("--publish: replicas %d, want one per server (%d)", n.Config.Replicas, len(natsClients))
	}
}

// checkIdemHealthcheck checks that an idem service's health check asks its
// own listener's /readyz, then runs it with the idem binary against a
// stand-in listener: exit 0 when that answers 200, 1 when it answers 503.
func checkIdemHealthcheck(t *testing.T, test []string, listen string) {
	t.Helper()
	if len(test) < 3 || test[1] != "/idem" || test[2] != "healthcheck" {
		t.Fatalf("health check %q: want [CMD, /idem, healthcheck, …]", test)
	}
	i := slices.Index(test, "--url")
	if i < 0 || i+1 >= len(test) {
		t.Fatalf("health check %q: want an explicit --url", test)
	}
	u, err := url.Parse(test[i+1])
	_, port, _ := net.SplitHostPort(listen)
	if err != nil || u.Hostname() != "127.0.0.1" || u.Port() != port || u.Path != "/readyz" {
		t.Fatalf("health check asks %q, want http://127.0.0.1:%s/readyz (the process's own listener)", test[i+1], port)
	}
	for _, c := range []struct {
		status, exit int
	}{{http.StatusOK, 0}, {http.StatusServiceUnavailable, 1}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != u.Path {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(c.status)
		}))
		args := slices.Clone(test[2:])
		args[i-1] = srv.URL + u.Path
		out, err := exec.Command(idemBinary(t), args...).CombinedOutput()
		srv.Close()
		exit := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			exit = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if exit != c.exit {
			t.Errorf("idem %q against a %d: exit %d, want %d: %s", args, c.status, exit, c.exit, out)
		}
	}
}
