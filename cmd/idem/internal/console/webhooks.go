package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/outbox/webhookout"
)

// healthAttempts is how many of an endpoint's newest attempts its success
// rate is over.
const healthAttempts = 100

// endpointHealth is one endpoint as the webhooks page shows it.
type endpointHealth struct {
	webhookout.Endpoint
	Attempts    int // of the newest healthAttempts
	Succeeded   int
	LastFailure *webhookout.Attempt
}

// SuccessPercent is the share of the newest attempts that were 2xx.
func (h endpointHealth) SuccessPercent() int {
	if h.Attempts == 0 {
		return 0
	}
	return h.Succeeded * 100 / h.Attempts
}

// webhooks is the page of one tenant's webhook endpoints
// (/v1/webhook-endpoints): each with its health, and for one endpoint its
// newest attempts (of one event with event_id), each with a replay button.
func (c *Console) webhooks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tenant, endpoint, event := q.Get("tenant"), q.Get("endpoint"), q.Get("event_id")
	if tenant == "" {
		tenant = idem.DefaultTenant
	}
	if len(tenant) > maxParamBytes || len(endpoint) > maxParamBytes || len(event) > maxParamBytes {
		c.message(w, r, http.StatusBadRequest, "Bad request", "The tenant, endpoint or event is too long.")
		return
	}
	data := map[string]any{"Available": c.cfg.Endpoints != nil, "Tenant": tenant, "Endpoint": endpoint,
		"EventID": event, "Replayed": q.Get("replayed")}
	if c.cfg.Endpoints == nil {
		c.render(w, r, http.StatusOK, "webhooks", data)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	tx, err := c.cfg.Driver.Begin(ctx, driver.BeginOptions{ReadOnly: true})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	defer tx.Rollback(ctx)
	eps, _, err := c.cfg.Endpoints.List(ctx, tx, tenant, "", webhookout.MaxEndpoints)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	health := make([]endpointHealth, len(eps))
	for i, ep := range eps {
		health[i].Endpoint = ep
		att, _, err := c.cfg.Endpoints.Attempts(ctx, tx, tenant, ep.ID, webhookout.AttemptQuery{Limit: healthAttempts})
		if err != nil {
			c.fail(w, r, err)
			return
		}
		health[i].Attempts = len(att)
		for j, a := range att {
			if a.Status >= 200 && a.Status < 300 && a.Error == "" {
				health[i].Succeeded++
			} else if health[i].LastFailure == nil {
				health[i].LastFailure = &att[j]
			}
		}
	}
	data["Endpoints"] = health
	if endpoint != "" {
		att, _, err := c.cfg.Endpoints.Attempts(ctx, tx, tenant, endpoint, webhookout.AttemptQuery{EventID: event, Limit: healthAttempts})
		if errors.Is(err, webhookout.ErrNotFound) {
			c.message(w, r, http.StatusNotFound, "No such endpoint", "Tenant "+tenant+" has no webhook endpoint "+endpoint+".")
			return
		}
		if err != nil {
			c.fail(w, r, err)
			return
		}
		data["Attempts"] = att
	}
	c.render(w, r, http.StatusOK, "webhooks", data)
}

// replayWebhook sends one event to one endpoint again (the form of each
// attempt on the webhooks page, CSRF-protected like every form), with its
// webhook-id unchanged, and goes back to the page.
func (c *Console) replayWebhook(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Endpoints == nil {
		c.message(w, r, http.StatusNotFound, "Webhook endpoints not available", "This service has no webhook endpoints.")
		return
	}
	f := r.PostForm
	tenant, endpoint, event := f.Get("tenant"), f.Get("endpoint"), f.Get("event_id")
	if tenant == "" || endpoint == "" || event == "" || len(tenant) > maxParamBytes || len(endpoint) > maxParamBytes || len(event) > maxParamBytes {
		c.message(w, r, http.StatusBadRequest, "Bad request", "Name the tenant, the endpoint and the event to replay.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
	defer cancel()
	tx, err := c.cfg.Driver.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	defer tx.Rollback(ctx)
	n, err := c.cfg.Endpoints.Replay(ctx, tx, tenant, endpoint, webhookout.Replay{EventID: event})
	if errors.Is(err, webhookout.ErrNotFound) || errors.Is(err, webhookout.ErrInvalid) {
		c.message(w, r, http.StatusNotFound, "Nothing to replay", err.Error())
		return
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.cfg.Logger.Info("console: webhook replayed", "tenant", tenant, "endpoint", endpoint, "event", event)
	http.Redirect(w, r, "/ui/webhooks?"+url.Values{"tenant": {tenant}, "endpoint": {endpoint}, "event_id": {event},
		"replayed": {strconv.Itoa(n)}}.Encode(), http.StatusSeeOther)
}
