// Package deploy holds what runs idem in production beside the binary: the
// production compose file (compose.yaml), the Prometheus alert rules
// (prometheus/) and the Grafana dashboard (grafana/). Its tests check them
// against the real thing: the image the repository's Dockerfile builds, the
// flags idem parses, and the metrics a running server exposes.
package deploy
