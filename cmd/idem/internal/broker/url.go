package broker

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/idemhq/idem/outbox"
	"github.com/idemhq/idem/outbox/cloudevent"
)

// hostList is a broker URL with a list of hosts:
// scheme://[userinfo@]host:port[,[scheme://]host:port…][?query].
type hostList struct {
	// user is the URL's userinfo; nil when it has none.
	user *url.Userinfo
	// hosts are host:port, without credentials.
	hosts []string
	// schemes are the schemes the URL names (a host after the first may
	// repeat one).
	schemes map[string]bool
	query   url.Values
}

// maxHosts bounds the host list of one URL.
const maxHosts = 32

// parseHostList parses a URL whose hosts are comma-separated. url.Parse
// cannot read a host list (nor an IPv6 host inside one), so each host is
// parsed on its own. what names a host in errors ("NATS server"); schemes
// are the schemes a host may start with. Credentials may be given once, or
// repeated identically on several hosts: they are the client's, not a
// host's. Errors never show them.
func parseHostList(publishURL, what string, schemes ...string) (hostList, error) {
	l := hostList{schemes: map[string]bool{}}
	hosts, query, _ := strings.Cut(publishURL, "?")
	for h := range strings.SplitSeq(hosts, ",") {
		h = strings.TrimSpace(h)
		if scheme, rest, ok := strings.Cut(h, "://"); ok && slices.Contains(schemes, scheme) {
			l.schemes[scheme] = true
			h = rest
		}
		u, err := url.Parse("x://" + h)
		if err != nil || h == "" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.Fragment != "" {
			return l, fmt.Errorf("--publish: %s %q: want host:port, comma-separated", what, redactHost(h))
		}
		if len(l.hosts) == maxHosts {
			return l, fmt.Errorf("--publish: more than %d %ss", maxHosts, what)
		}
		l.hosts = append(l.hosts, u.Host)
		if u.User == nil {
			continue
		}
		if u.User.Username() == "" {
			return l, fmt.Errorf("--publish: %s %q: credentials before @ are empty", what, redactHost(h))
		}
		if l.user != nil && l.user.String() != u.User.String() {
			return l, fmt.Errorf("--publish: the %ss name different credentials; give them once, before the first host", what)
		}
		l.user = u.User
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return l, fmt.Errorf("--publish: query: %w", err)
	}
	l.query = q
	return l, nil
}

// checkOptions refuses a query key the URL kind does not know, or one
// given twice: a misspelt option (tls_cafile) silently ignored would leave
// a connection unencrypted or unauthenticated.
func checkOptions(q url.Values, kind string, known []string) error {
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(known, k) {
			return fmt.Errorf("--publish: unknown %s option %q (want %s)", kind, k, strings.Join(known, ", "))
		}
		if len(q[k]) > 1 {
			return fmt.Errorf("--publish: %s option %q given %d times", kind, k, len(q[k]))
		}
	}
	return nil
}

// routePrefix starts a route table entry's query key: route.TYPE=DEST.
const routePrefix = "route."

// parseRoutes reads route=TEMPLATE and route.TYPE=DEST (removing the
// latter from q, so that checkOptions sees only fixed keys). With route
// entries and no template, a type without an entry is unroutable: its
// messages become dead letters.
func parseRoutes(q url.Values) (outbox.Routes, error) {
	var r outbox.Routes
	for k, vs := range q {
		typ, ok := strings.CutPrefix(k, routePrefix)
		if !ok {
			continue
		}
		if typ == "" || len(vs) != 1 || vs[0] == "" {
			return r, fmt.Errorf("--publish: %s: want one route.TYPE=DESTINATION", k)
		}
		if r.Table == nil {
			r.Table = map[string]string{}
		}
		r.Table[typ] = vs[0]
		delete(q, k)
	}
	if q.Has("route") && q.Get("route") == "" {
		return r, errors.New("--publish: route: want a template, e.g. route={tenant}.{type}")
	}
	r.Template = q.Get("route")
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("--publish: %w", err)
	}
	return r, nil
}

// parseCloudEvents reads format= (idem, cloudevents,
// cloudevents-structured, both) and ce_source=; absent, they are the
// publisher's defaults.
func parseCloudEvents(q url.Values) (cloudevent.Config, error) {
	c := cloudevent.Config{Source: q.Get("ce_source")}
	if s := q.Get("format"); s != "" {
		f, err := cloudevent.ParseFormat(s)
		if err != nil {
			return c, fmt.Errorf("--publish: %w", err)
		}
		c.Format = f
	}
	if err := c.WithDefaults().Validate(); err != nil {
		return c, fmt.Errorf("--publish: %w", err)
	}
	return c, nil
}

// tlsOptions are the query keys of TLS, for every broker that has it.
var tlsOptions = []string{"tls", "tls_ca", "tls_cert", "tls_key"}

// TLS is the TLS a publish URL asks for. The server's certificate is
// always verified: against CAFile when set, else the system's roots.
type TLS struct {
	// Enabled is set by tls=true, a tls:// NATS URL, or any file below.
	Enabled bool
	// CAFile (tls_ca) holds the PEM certificates of the CAs to trust
	// instead of the system's.
	CAFile string
	// CertFile and KeyFile (tls_cert, tls_key) are a PEM client
	// certificate and its key, for servers that verify clients (mTLS).
	// Both or neither.
	CertFile, KeyFile string
}

// parseTLS reads the TLS options; on is what the scheme says.
func parseTLS(q url.Values, on bool) (TLS, error) {
	t := TLS{Enabled: on, CAFile: q.Get("tls_ca"), CertFile: q.Get("tls_cert"), KeyFile: q.Get("tls_key")}
	for _, k := range []string{"tls_ca", "tls_cert", "tls_key"} {
		if q.Has(k) && q.Get(k) == "" {
			return t, fmt.Errorf("--publish: %s: want a file path", k)
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return t, fmt.Errorf("--publish: tls_cert and tls_key go together (a client certificate and its key)")
	}
	files := t.CAFile != "" || t.CertFile != ""
	if q.Has("tls") {
		b, err := strconv.ParseBool(q.Get("tls"))
		if err != nil {
			return t, fmt.Errorf("--publish: tls %q: want true or false", q.Get("tls"))
		}
		if !b && (on || files) {
			return t, fmt.Errorf("--publish: tls=false contradicts a tls:// URL or a tls_ca / tls_cert file")
		}
		t.Enabled = b
	}
	t.Enabled = t.Enabled || files
	return t, nil
}

// maxSecretBytes bounds a password or token file.
const maxSecretBytes = 4096

// readSecret reads a password or token file that the query option names.
// A trailing newline (as editors and `echo` leave) is not part of the
// secret.
func readSecret(option, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--publish: %s: %w", option, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretBytes+1))
	if err != nil {
		return "", fmt.Errorf("--publish: %s: %w", option, err)
	}
	if len(b) > maxSecretBytes {
		return "", fmt.Errorf("--publish: %s %s: larger than %d bytes; want the secret alone", option, path, maxSecretBytes)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("--publish: %s %s is empty", option, path)
	}
	return s, nil
}

// checkFile fails when the file an option names cannot be read, so the
// error names the option rather than coming from deep in a client library.
func checkFile(option, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--publish: %s: %w", option, err)
	}
	return f.Close()
}

// Redact is publishURL fit for a log line or an error message: every
// host's credentials are hidden, and so are a webhook URL's path and the
// values of query keys that are not this package's options (a webhook
// receiver may take its token in either). It hides too much rather than
// too little: anything before the last @ of a host, even in a path.
func Redact(publishURL string) string {
	hosts, query, hasQuery := strings.Cut(publishURL, "?")
	parts := strings.Split(hosts, ",")
	for i, p := range parts {
		scheme, rest, ok := strings.Cut(p, "://")
		if !ok {
			scheme, rest = "", p
		} else {
			scheme += "://"
		}
		rest = redactHost(rest)
		if s := strings.ToLower(scheme); s == "http://" || s == "https://" {
			if host, path, ok := strings.Cut(rest, "/"); ok && path != "" {
				rest = host + "/…"
			}
		}
		parts[i] = scheme + rest
	}
	out := strings.Join(parts, ",")
	if !hasQuery {
		return out
	}
	pairs := strings.Split(query, "&")
	for i, pair := range pairs {
		k, v, ok := strings.Cut(pair, "=")
		if key, err := url.QueryUnescape(k); ok && v != "" && (err != nil || !publicOptions[key] && !strings.HasPrefix(key, routePrefix)) {
			pairs[i] = k + "=…"
		}
	}
	return out + "?" + strings.Join(pairs, "&")
}

// publicOptions are the query keys whose values are not secrets: file
// paths and settings.
var publicOptions = map[string]bool{
	"stream": true, "duplicates": true, "replicas": true, "topic": true, "sasl": true,
	"tls": true, "tls_ca": true, "tls_cert": true, "tls_key": true,
	"creds": true, "nkey": true, "password_file": true, "token_file": true,
	"exchange": true, "exchange_kind": true, "declare": true, "route": true, "format": true, "ce_source": true,
}

// redactHost hides the credentials in a host for an error message.
func redactHost(h string) string {
	if at := strings.LastIndex(h, "@"); at >= 0 {
		return "…@" + h[at+1:]
	}
	return h
}
