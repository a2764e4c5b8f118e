package routers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/driver"
	"github.com/idemhq/idem/examples/routers"
	"github.com/idemhq/idem/idemhttp"
	"github.com/idemhq/idem/internal/drivertest"
	"github.com/idemhq/idem/internal/testpg"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	os.Exit(testpg.Main(m))
}

const sqlInsert = `INSERT INTO reversals (path) VALUES ($1)`

// reverse writes one row through the guard's transaction: the side
// effect counted.
func reverse(w http.ResponseWriter, r *http.Request) {
	tx := idemhttp.Tx(r.Context())
	if tx == nil || r.PathValue("id") == "" {
		http.Error(w, "no transaction or no id", http.StatusInternalServerError)
		return
	}
	if _, err := tx.Exec(r.Context(), sqlInsert, r.URL.Path); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"reversed":"` + r.PathValue("id") + `"}`))
}

// routes builds a router with two templates, /orders/{id}/reversals and
// /refunds/{id}, each guarded by mw as the router's documented way says.
var routes = map[string]func(mw *idemhttp.Middleware) http.Handler{
	"chi": func(mw *idemhttp.Middleware) http.Handler {
		r := chi.NewRouter()
		routers.Chi(r, mw, "POST", "/orders/{id}/reversals", http.HandlerFunc(reverse))
		routers.Chi(r, mw, "POST", "/refunds/{id}", http.HandlerFunc(reverse))
		return r
	},
	"gin": func(mw *idemhttp.Middleware) http.Handler {
		r := gin.New()
		r.POST("/orders/:id/reversals", routers.Gin(mw, http.HandlerFunc(reverse)))
		r.POST("/refunds/:id", routers.Gin(mw, http.HandlerFunc(reverse)))
		return r
	},
	"echo": func(mw *idemhttp.Middleware) http.Handler {
		e := echo.New()
		// An echo handler, reading the id the echo way.
		h := func(c echo.Context) error {
			r := c.Request()
			r.SetPathValue("id", c.Param("id"))
			reverse(c.Response(), r)
			return nil
		}
		e.POST("/orders/:id/reversals", h, routers.EchoPattern, echo.WrapMiddleware(mw.Wrap))
		e.POST("/refunds/:id", h, routers.EchoPattern, echo.WrapMiddleware(mw.Wrap))
		return e
	},
}

// TestOperationIsTheTemplate: behind each router, one key sent to two
// concrete paths of one template is one operation with another request
// (422, no second row); sent to the other template it is another
// operation (a row of its own). The keys are stored under the templates.
func TestOperationIsTheTemplate(t *testing.T) {
	t.Parallel()
	for name, build := range routes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			drivertest.Each(t, func(t *testing.T, d driver.Driver) {
				exec(t, d, `CREATE TABLE reversals (path text NOT NULL)`)
				k, err := idem.New(d, idem.Config{})
				if err != nil {
					t.Fatal(err)
				}
				mw, err := idemhttp.New(idemhttp.Config{Keeper: k})
				if err != nil {
					t.Fatal(err)
				}
				h := build(mw)
				for _, step := range []struct {
					path   string
					status int
				}{
					{"/orders/a/reversals", http.StatusCreated},
					{"/orders/a/reversals", http.StatusCreated}, // the replay
					{"/orders/b/reversals", http.StatusUnprocessableEntity},
					{"/refunds/a", http.StatusCreated},
				} {
					w := httptest.NewRecorder()
					r := httptest.NewRequest("POST", step.path, strings.NewReader(`{}`))
					r.Header.Set(idemhttp.HeaderKey, "k1")
					h.ServeHTTP(w, r)
					if w.Code != step.status {
						t.Fatalf("POST %s: %d %s, want %d", step.path, w.Code, w.Body, step.status)
					}
				}
				if n := count(t, d, `SELECT count(*) FROM reversals`); n != 2 {
					t.Fatalf("%d rows, want 2", n)
				}
				ops := operations(t, d)
				want := map[string][]string{
					"chi":  {"POST /orders/{id}/reversals", "POST /refunds/{id}"},
					"gin":  {"POST /orders/:id/reversals", "POST /refunds/:id"},
					"echo": {"POST /orders/:id/reversals", "POST /refunds/:id"},
				}[name]
				if !slices.Equal(ops, want) {
					t.Fatalf("stored operations %q, want %q", ops, want)
				}
			})
		})
	}
}

// TestChiOperation: ChiOperation, for a chi that does not set r.Pattern,
// names the same template.
func TestChiOperation(t *testing.T) {
	t.Parallel()
	var got string
	r := chi.NewRouter()
	r.Post("/orders/{id}/reversals", func(_ http.ResponseWriter, r *http.Request) { got = routers.ChiOperation(r) })
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/orders/x/reversals", nil))
	if got != "POST /orders/{id}/reversals" {
		t.Fatalf("ChiOperation %q", got)
	}
}

func exec(t *testing.T, d driver.Driver, sql string) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx, driver.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, d driver.Driver, sql string) int {
	t.Helper()
	var n int
	if err := d.Reader().QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func operations(t *testing.T, d driver.Driver) []string {
	t.Helper()
	rows, err := d.Reader().Query(context.Background(), `SELECT DISTINCT operation FROM idem_keys ORDER BY operation`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ops []string
	for rows.Next() {
		var op string
		if err := rows.Scan(&op); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, op)
	}
	return ops
}
