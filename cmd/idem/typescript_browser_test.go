package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// tsBrowserPage runs the compiled client in the page: it makes two
// accounts and one transfer through IdemClient, in the browser's own fetch
// and Web Crypto, and leaves what it got in window.result.
const tsBrowserPage = `<!doctype html>
<meta charset="utf-8">
<title>idem client</title>
<script type="module">
import { IdemClient, ProblemError } from "/pkg/index.js";
const idem = new IdemClient({ baseUrl: location.origin, baseDelayMs: 1 });
try {
  await idem.createAccount({ id: "bank", currency: "EUR" });
  await idem.createAccount({ id: "alice", currency: "EUR" });
  const t = await idem.createTransfer({ debit_account_id: "bank", credit_account_id: "alice", amount: 42, currency: "EUR" });
  let refused = "";
  try {
    await idem.createTransfer({ debit_account_id: "bank", credit_account_id: "bank", amount: 1, currency: "EUR" });
  } catch (e) {
    refused = e instanceof ProblemError ? e.code : String(e);
  }
  window.result = { id: t.id, replayed: t.replayed, refused };
} catch (e) {
  window.result = { error: String(e) };
}
</script>`

// The compiled client runs in a browser too: Chromium loads it as an ES
// module from the same origin as a proxy to idem serve, which answers the
// first transfer attempt 503 itself; the page's call is retried under the
// key the browser made and the ledger holds the transfer once.
func TestTypeScriptClientInBrowser(t *testing.T) {
	t.Parallel()
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%s is missing: scripts/test installs it when run as root; otherwise apt-get install chromium", chromium)
	}
	tsBuild(t)
	idem, _ := serveDB(t, "sqlite", nil)
	upstream, err := url.Parse(idem.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(upstream)

	var mu sync.Mutex
	var transferKeys []string // the Idempotency-Key of each transfer attempt
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(tsBrowserPage))
	})
	mux.Handle("GET /pkg/", http.StripPrefix("/pkg/", http.FileServer(http.Dir(filepath.Join(tsDir, "build", "src")))))
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && r.URL.Path == "/v1/transfers" {
			mu.Lock()
			transferKeys = append(transferKeys, r.Header.Get("Idempotency-Key"))
			first := len(transferKeys) == 1
			mu.Unlock()
			if first {
				w.Header().Set("Content-Type", "application/problem+json")
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"type":"about:blank","title":"Service Unavailable","status":503,"code":"unavailable"}`))
				return
			}
		}
		proxy.ServeHTTP(w, r)
	})
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()

	if err := chromedp.Do(bctx, chromedp.Navigate(site.URL+"/")); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`window.result !== undefined`, chromedp.WithPollingTimeout(60*time.Second))); err != nil {
		t.Fatalf("wait for the page's result: %v", err)
	}
	result, err := chromedp.Run(bctx, chromedp.Evaluate[string](`JSON.stringify(window.result)`))
	if err != nil {
		t.Fatalf("the page's result: %v", err)
	}
	var got struct {
		ID       string `json:"id"`
		Replayed bool   `json:"replayed"`
		Refused  string `json:"refused"`
		Error    string `json:"error"`
	}
	if err := json.Unmarshal([]byte(result), &got); err != nil {
		t.Fatalf("window.result %s: %v", result, err)
	}
	if got.Error != "" || got.ID == "" || got.Replayed || got.Refused != "same_account" {
		t.Fatalf("the page got %s", result)
	}
	mu.Lock()
	keys := append([]string(nil), transferKeys...)
	mu.Unlock()
	// Two attempts of the transfer under one key, then the refused one.
	if len(keys) != 3 || keys[0] == "" || keys[1] != keys[0] || keys[2] == keys[0] {
		t.Fatalf("transfer attempts' keys: %q", keys)
	}
	if r := call(t, "GET", idem.URL+"/v1/accounts/alice", "", nil); r.Status != 200 || r.json(t)["credits_posted"] != float64(42) {
		t.Fatalf("alice after one transfer of 42: %d %s", r.Status, r.Body)
	}
	if r := call(t, "GET", idem.URL+"/v1/transfers/"+got.ID, "", nil); r.Status != 200 {
		t.Fatalf("the transfer: %d %s", r.Status, r.Body)
	}
}
