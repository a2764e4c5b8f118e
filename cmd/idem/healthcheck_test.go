package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// healthcheck exits 0 on a 2xx answer and 1 (errUnhealthy) on anything
// else, so that a container runtime reads the verdict; a misuse is an
// error of its own (exit 2), not a verdict.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"status":"ok","migration":3}` + "\n"))
	}))
	defer ok.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"unavailable","reason":"database unreachable"}`))
	}))
	defer down.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // nothing listens there any more

	cases := []struct {
		name       string
		args       []string
		wantErr    error // nil, errUnhealthy, or errMisuse
		wantStdout string
		wantStderr string
	}{
		{"2xx", []string{"--url", ok.URL + "/readyz"}, nil, `"status":"ok"`, ""},
		{"503", []string{"--url", down.URL + "/readyz"}, errUnhealthy, "", "503 Service Unavailable"},
		{"refused", []string{"--url", gone.URL + "/readyz", "--timeout", "10s"}, errUnhealthy, "", "refused"},
		{"not http", []string{"--url", "ftp://example.com/x"}, errMisuse, "", ""},
		{"unknown flag", []string{"--uri", ok.URL}, errMisuse, "", ""},
		{"stray argument", []string{ok.URL}, errMisuse, "", ""},
		{"timeout out of bounds", []string{"--url", ok.URL, "--timeout", "2m"}, errMisuse, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"healthcheck"}, c.args...), &stdout, &stderr)
			switch {
			case c.wantErr == nil && err != nil:
				t.Fatalf("err %v, want none (stderr %q)", err, stderr.String())
			case c.wantErr == errUnhealthy && !errors.Is(err, errUnhealthy):
				t.Fatalf("err %v, want the unhealthy verdict", err)
			case c.wantErr == errMisuse && (err == nil || errors.Is(err, errUnhealthy)):
				t.Fatalf("err %v, want a usage error, not a verdict", err)
			}
			if !strings.Contains(stdout.String(), c.wantStdout) || !strings.Contains(stderr.String(), c.wantStderr) {
				t.Fatalf("stdout %q (want %q), stderr %q (want %q)", stdout.String(), c.wantStdout, stderr.String(), c.wantStderr)
			}
		})
	}
}

// errMisuse marks the cases of TestHealthcheck that must fail as misuse.
var errMisuse = errors.New("misuse")
