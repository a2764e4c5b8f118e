package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/idemhq/idem/internal/cli"
)

// errUnhealthy is healthcheck's verdict. main exits 1 for it: the status
// container runtimes read as unhealthy (they reserve 2).
var errUnhealthy = errors.New("unhealthy")

// healthcheckMaxBody bounds what is read and printed of the answer.
const healthcheckMaxBody = 4 << 10

// healthcheck asks a running idem whether it is healthy, for container
// health checks in an image without curl: nil when the URL answers 2xx (its
// body is printed), errUnhealthy for any other answer, a refused connection
// or a timeout (the reason goes to stderr). The URL is serve's /readyz or
// /healthz, or those of a relay started with --metrics-addr.
func healthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("healthcheck")
	target := fs.String("url", "http://127.0.0.1:8080/readyz", "the URL to ask")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer (1ms..1m)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("healthcheck", "healthcheck: unexpected argument %q", fs.Arg(0))
	}
	if *timeout < time.Millisecond || *timeout > time.Minute {
		return cli.Usagef("healthcheck", "healthcheck: timeout %s is outside 1ms..1m", *timeout)
	}
	u, err := url.Parse(*target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cli.Usagef("healthcheck", "healthcheck: --url %q: want http(s)://host:port/path", *target)
	}

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	// No proxy from the environment: the check is about this host's process.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "idem healthcheck: %v\n", err)
		return errUnhealthy
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, healthcheckMaxBody))
	body = bytes.TrimSpace(body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(stderr, "idem healthcheck: %s answered %s: %s\n", u.Redacted(), resp.Status, body)
		return errUnhealthy
	}
	fmt.Fprintf(stdout, "%s\n", body)
	return nil
}
