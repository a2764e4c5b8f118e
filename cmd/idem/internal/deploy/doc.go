// Package deploy tests what runs idem in production beside the binary, kept
// in deploy/ at the repository's root: the production compose file
// (compose.yaml), the Prometheus alert rules (prometheus/) and the Grafana
// dashboard (grafana/). Its tests check them against the real thing: the
// image the repository's Dockerfile builds, the flags idem parses, and the
// metrics a running server exposes. They live in the idem binary's module,
// beside the packages they import, and run in deploy/ (TestMain changes
// into it), so the paths in them are relative to deploy/.
package deploy
