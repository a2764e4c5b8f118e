package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/problem"
	"github.com/idemhq/idem/internal/strictjson"
	"github.com/idemhq/idem/ledger"
)

// Stable problem codes the service answers with, beside the ledger's and
// idemhttp's.
const (
	codeInvalidRequest = "invalid_request"
	codeNotFound       = idemhttp.CodeNotFound
	codeUnauthorized   = "unauthorized"
	// codeMisdirected: without API keys, a request for a host name that
	// is not this machine's (421).
	codeMisdirected = "misdirected_request"
	// codeUnsupportedMediaType: a write whose body is declared as
	// something other than JSON (415).
	codeUnsupportedMediaType = "unsupported_media_type"
	// codeCrossOrigin: under --idempotency-key=optional, a write without
	// a key from another site's page (403).
	codeCrossOrigin = "cross_origin_request"
)

// writeJSON answers v as JSON (problem.JSON).
func writeJSON(w http.ResponseWriter, status int, v any) { problem.JSON(w, status, v) }

// maxBodyDepth bounds how deeply a request body's objects and arrays nest
// (the body's own object is level 1; metadata is the one member that
// nests): a deeper body is refused.
const maxBodyDepth = 32

// decode reads a request body, one JSON object, into v. It is the one
// reader of every JSON route's body, and refuses what encoding/json would
// otherwise read as something the client did not send: a member sent twice
// (encoding/json keeps the last), a string that is not UTF-8 or escapes
// half a surrogate pair (encoding/json writes U+FFFD), nesting deeper than
// maxBodyDepth, an unknown member (a typo in a payments request must not be
// silently dropped) and anything after the object. Its error says what and
// where, for the 400's detail.
func decode(r *http.Request, v any) error { return decodeRead(r, nil, v) }

// decodeRead is decode of body, the whole of r's body already read
// (idemhttp.Batched hands it to a route's decode); nil reads r.Body.
func decodeRead(r *http.Request, body []byte, v any) error {
	if body == nil {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			return fmt.Errorf("read body: %w", err)
		}
	}
	if err := strictjson.Check(body, maxBodyDepth); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	if b := bytes.TrimLeft(body, " \t\r\n"); b[0] != '{' {
		return errors.New("body: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			return fmt.Errorf("%s: want %s, not %s", te.Field, jsonKind(te.Type), article(te.Value))
		}
		// encoding/json says "json: unknown field \"memo\"": the detail is
		// for the client, in its words, not Go's.
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fmt.Errorf("unknown field %s: the body has a member this route does not take", name)
		}
		return errors.New("the body is not the JSON object this route takes")
	}
	return nil
}

// jsonKind names the JSON value a Go type of a request decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "another JSON value"
}

// article puts "a" or "an" before encoding/json's name of a JSON value
// ("string", "number 1.5", "object").
func article(v string) string {
	if v != "" && strings.ContainsRune("aeiou", rune(v[0])) {
		return "an " + v
	}
	return "a " + v
}

// integer reads a request member that must be a JSON number with an
// integer value, as JSON Schema's "integer" has it: 1000, 1000.0 and 1e3
// are one integer. A string is refused even when it spells a number (as
// encoding/json's json.Number would read it), and so is a value with a
// fraction or outside int64. The member must be present (raw not empty or
// null). The error names field.
func integer(field string, raw json.RawMessage) (int64, error) {
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return 0, fmt.Errorf("%s: missing", field)
	case raw[0] == '"':
		return 0, fmt.Errorf("%s: want a JSON number, not a string", field)
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
		return 0, fmt.Errorf("%s: want a JSON number", field)
	}
	n, err := parseInteger(string(raw))
	if err != nil {
		return 0, fmt.Errorf("%s: %s %w", field, raw, err)
	}
	return n, nil
}

var (
	errNotInteger = errors.New("is not an integer")
	errIntRange   = fmt.Errorf("is outside %d..%d", math.MinInt64, math.MaxInt64)
)

// parseInteger reads a JSON number literal (valid JSON: -?int(.frac)?(e±exp)?)
// whose value is an integer within int64. It works on the decimal digits
// alone, never building a number the size of the exponent: 1e999999999 is
// out of range at once.
func parseInteger(lit string) (int64, error) {
	neg := strings.HasPrefix(lit, "-")
	lit = strings.TrimPrefix(lit, "-")
	mant, exp, _ := strings.Cut(strings.ToLower(lit), "e")
	whole, frac, _ := strings.Cut(mant, ".")
	// The value is digits × 10^shift.
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" {
		return 0, nil // zero, however spelled
	}
	shift := -len(frac)
	if exp != "" {
		expNeg := strings.HasPrefix(exp, "-")
		exp = strings.TrimLeft(strings.TrimLeft(exp, "+-"), "0")
		if len(exp) > 9 {
			// Beyond any body's length of digits: too large, or a fraction.
			if expNeg {
				return 0, errNotInteger
			}
			return 0, errIntRange
		}
		e, _ := strconv.Atoi(exp) // at most 9 digits
		if expNeg {
			e = -e
		}
		shift += e
	}
	trimmed := strings.TrimRight(digits, "0")
	shift += len(digits) - len(trimmed)
	digits = trimmed
	if shift < 0 {
		return 0, errNotInteger
	}
	if len(digits)+shift > 19 { // 19 digits fit uint64; more never fit int64
		return 0, errIntRange
	}
	u, err := strconv.ParseUint(digits+strings.Repeat("0", shift), 10, 64)
	switch {
	case err != nil, !neg && u > math.MaxInt64, neg && u > 1<<63:
		return 0, errIntRange
	case neg:
		return int64(-u), nil // -(1<<63) wraps to itself, which is MinInt64
	}
	return int64(u), nil
}

// fail answers err as a problem. A ledger refusal of an invalid request
// is 400 invalid_request and a reversal of a missing transfer 404, neither
// stored (ledgerProblem); other ledger refusals are business answers
// (422), stored and replayed by the middleware. Everything else is
// idemhttp.ProblemFor's: database faults are 503 with Retry-After, which
// the middleware rolls back and does not store.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var le *ledger.Error
	switch {
	case errors.As(err, &le):
		p, stored := ledgerProblem(le, r.PathValue("id") != "")
		if !stored {
			idemhttp.MarkInvalid(r.Context())
		}
		p.Write(w)
	case errors.Is(err, ledger.ErrNotFound):
		problem.Write(w, http.StatusNotFound, codeNotFound, "no such resource")
	default:
		p := idemhttp.ProblemFor(err, retryAfter)
		if p.Status == http.StatusInternalServerError {
			s.log.Error("idem: request failed", "method", r.Method, "route", r.Pattern, "err", err)
		}
		p.Write(w)
	}
}

// invalid answers 400 invalid_request to a request refused by validation
// before any work. On a route the Idempotency-Key guards it marks the
// request so (idemhttp.MarkInvalid): the answer is not stored and the key
// stays free for the corrected request. Every refusal of a write's input
// goes through here; business refusals do not.
func invalid(w http.ResponseWriter, r *http.Request, detail string) {
	idemhttp.MarkInvalid(r.Context())
	problem.Write(w, http.StatusBadRequest, codeInvalidRequest, detail)
}

// badRequest answers 400 invalid_request to a read's bad query parameter
// (no Idempotency-Key guards a read, so nothing is stored either way).
func badRequest(w http.ResponseWriter, detail string) {
	problem.Write(w, http.StatusBadRequest, codeInvalidRequest, detail)
}
