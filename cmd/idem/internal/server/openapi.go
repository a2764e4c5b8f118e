package server

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openapiJSON is the OpenAPI 3.1 description of the HTTP API. A test checks
// every answer of the running service against it, so it cannot drift from
// the code unnoticed.
//
//go:embed openapi.json
var openapiJSON []byte

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(openapiJSON)))
	_, _ = w.Write(openapiJSON)
}
