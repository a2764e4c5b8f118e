package webhook

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
)

// endpointYAML is one endpoint as written in the configuration file.
type endpointYAML struct {
	Provider     string    `yaml:"provider"`
	Secrets      []string  `yaml:"secrets"`
	Tenant       string    `yaml:"tenant"`
	Tolerance    string    `yaml:"tolerance"`
	URL          string    `yaml:"url"`
	MaxBodyBytes int       `yaml:"max_body_bytes"`
	HMAC         *hmacYAML `yaml:"hmac"`
}

type hmacYAML struct {
	Header          string `yaml:"header"`
	Algorithm       string `yaml:"algorithm"`
	Encoding        string `yaml:"encoding"`
	Prefix          string `yaml:"prefix"`
	Separator       string `yaml:"separator"`
	TimestampHeader string `yaml:"timestamp_header"`
	SignedPayload   string `yaml:"signed_payload"`
	IDHeader        string `yaml:"id_header"`
	IDField         string `yaml:"id_field"`
	TypeHeader      string `yaml:"type_header"`
	TypeField       string `yaml:"type_field"`
}

// ParseConfig reads the webhooks block of a configuration file:
//
//	webhooks:
//	  stripe-main:              # the {endpoint} in /v1/webhooks/{endpoint}
//	    provider: stripe
//	    secrets: ["whsec_..."]  # several while a secret rotates
//	    tenant: default
//	    tolerance: 5m
//
// Other top-level keys belong to other parts of the service and are left
// alone; inside the block an unknown key is an error, so a misspelt
// "secret:" is not silently ignored. Each endpoint is validated as
// NewVerifier would, and the first problem (in name order) is returned as a
// *ConfigError naming the endpoint and the field. A file without a webhooks
// block yields an empty map.
func ParseConfig(data []byte) (map[string]Endpoint, error) {
	var top struct {
		Webhooks map[string]yaml.RawMessage `yaml:"webhooks"`
	}
	if err := yaml.Unmarshal(data, &top); err != nil {
		return nil, &ConfigError{Reason: "not valid YAML: " + firstLine(err)}
	}
	if len(top.Webhooks) > MaxEndpoints {
		return nil, &ConfigError{Field: "webhooks", Reason: fmt.Sprintf("%d endpoints, at most %d", len(top.Webhooks), MaxEndpoints)}
	}
	names := make([]string, 0, len(top.Webhooks))
	for name := range top.Webhooks {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make(map[string]Endpoint, len(names))
	for _, name := range names {
		if err := checkEndpointName(name); err != nil {
			return nil, &ConfigError{Endpoint: name, Field: "name", Reason: err.Error()}
		}
		var y endpointYAML
		if err := yaml.UnmarshalWithOptions(top.Webhooks[name], &y, yaml.Strict()); err != nil {
			return nil, &ConfigError{Endpoint: name, Reason: firstLine(err)}
		}
		e := Endpoint{
			Name: name, Provider: y.Provider, Secrets: y.Secrets, Tenant: y.Tenant,
			URL: y.URL, MaxBodyBytes: y.MaxBodyBytes,
		}
		if y.Tolerance != "" {
			d, err := time.ParseDuration(y.Tolerance)
			if err != nil || d <= 0 {
				return nil, &ConfigError{Endpoint: name, Field: "tolerance", Reason: fmt.Sprintf("%q is not a positive duration such as 5m or 300s", y.Tolerance)}
			}
			e.Tolerance = d
		}
		if y.HMAC != nil {
			e.HMAC = &HMACConfig{
				Header: y.HMAC.Header, Algorithm: y.HMAC.Algorithm, Encoding: y.HMAC.Encoding,
				Prefix: y.HMAC.Prefix, Separator: y.HMAC.Separator,
				TimestampHeader: y.HMAC.TimestampHeader, SignedPayload: y.HMAC.SignedPayload,
				IDHeader: y.HMAC.IDHeader, IDField: y.HMAC.IDField,
				TypeHeader: y.HMAC.TypeHeader, TypeField: y.HMAC.TypeField,
			}
		}
		tolSet := e.Tolerance != 0
		e = e.withDefaults()
		if err := e.validate(tolSet); err != nil {
			return nil, err
		}
		out[name] = e
	}
	return out, nil
}

// firstLine keeps a YAML error to its message, without the source excerpt
// goccy/go-yaml appends (which could print a secret).
func firstLine(err error) string {
	s := yaml.FormatError(err, false, false)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
