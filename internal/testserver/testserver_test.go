package testserver_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/idemhq/idem/internal/testserver"
)

// scripts are the test-server scripts that source the library.
var scripts = []string{
	"../testpg/pg.bash",
	"../testpgbouncer/pgbouncer.bash",
	"../testrabbit/rabbitmq.bash",
	"../testpatroni/patroni.bash",
}

// The helpers are said once: every script sources the library and none
// defines one of its functions again.
func TestScriptsSourceTheLibrary(t *testing.T) {
	t.Parallel()
	lib, err := os.ReadFile(testserver.FileName)
	if err != nil {
		t.Fatal(err)
	}
	var helpers []string
	for _, m := range regexp.MustCompile(`(?m)^([a-z_]+)\(\) \{`).FindAllStringSubmatch(string(lib), -1) {
		helpers = append(helpers, m[1])
	}
	if len(helpers) < 3 {
		t.Fatalf("found %v in %s, want free_port, as_owner, install_packages at least", helpers, testserver.FileName)
	}
	for _, path := range scripts {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if !strings.Contains(s, `source "$testserver_lib"`) {
			t.Errorf("%s does not source %s", path, testserver.FileName)
		}
		for _, h := range helpers {
			if regexp.MustCompile(`(?m)^` + h + `\(\) \{`).MatchString(s) {
				t.Errorf("%s defines %s again; use the library's", path, h)
			}
		}
	}
}

// A script written by WriteScript finds the library beside it, away from
// the source tree, and free_port gives a loopback port it can bind.
func TestWriteScriptFreePort(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := "set -euo pipefail\n" +
		`testserver_lib=$(dirname "${BASH_SOURCE[0]}")/testserver.bash` + "\n" +
		`source "$testserver_lib"` + "\n" +
		"free_port\n"
	path, err := testserver.WriteScript(dir, "probe.bash", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, "probe.bash") {
		t.Fatalf("WriteScript returned %s", path)
	}
	out, err := exec.Command("bash", path).Output()
	if err != nil {
		t.Fatalf("bash %s: %v", path, err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || port < 1024 || port > 65535 {
		t.Fatalf("free_port printed %q, want a port in 1024..65535", out)
	}
}

// Ports picked at once, by scripts running side by side, all differ: a
// port is bound only when its server starts, so a pick reserves it. With
// no reservation, 200 picks among the 12,000 ports collide four times in
// five.
func TestFreePortPicksDiffer(t *testing.T) {
	t.Parallel()
	script := "set -euo pipefail\n" +
		`testserver_lib=$(dirname "${BASH_SOURCE[0]}")/testserver.bash` + "\n" +
		`source "$testserver_lib"` + "\n" +
		"for i in $(seq 25); do free_port; done\n"
	path, err := testserver.WriteScript(t.TempDir(), "probe.bash", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	const scripts = 8
	outs := make([][]byte, scripts)
	errs := make([]error, scripts)
	var wg sync.WaitGroup
	for i := range scripts {
		wg.Go(func() { outs[i], errs[i] = exec.Command("bash", path).Output() })
	}
	wg.Wait()
	seen := map[string]int{}
	for i := range scripts {
		if errs[i] != nil {
			t.Fatalf("bash %s: %v", path, errs[i])
		}
		for _, port := range strings.Fields(string(outs[i])) {
			if j, dup := seen[port]; dup {
				t.Errorf("port %s picked by script %d and script %d", port, j, i)
			}
			seen[port] = i
		}
	}
	if len(seen) < scripts*25 {
		t.Fatalf("%d distinct ports, want %d", len(seen), scripts*25)
	}
}
