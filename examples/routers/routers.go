// Package routers shows idemhttp behind chi, gin and echo, with the
// Operation each needs: the route's template, not the concrete path, so
// that one key sent to /orders/a/reversals and /orders/b/reversals is the
// same operation with another request (422), as it is behind ServeMux.
//
// idemhttp's default Operation is the method and r.Pattern, the template
// the router matched. ServeMux sets r.Pattern, and so does chi (v5.2.4
// and later) before it calls a route's handler; gin and echo do not, so
// their adapters below set it from the router's own template (gin's
// FullPath, echo's Path) before the guard runs. In every case the guard
// must wrap each route, not the whole router: a middleware that runs before
// routing sees no template and would key by the concrete path.
package routers

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"

	"github.com/idemhq/idem/idemhttp"
)

// Chi routes h under pattern for method, guarded. chi sets r.Pattern to
// the route's template ("/orders/{id}/reversals") and the path values
// (r.PathValue) before an inline middleware of the route runs, so the
// default Operation is right: use With (or Handle with mw.Wrap), not Use.
func Chi(r chi.Router, mw *idemhttp.Middleware, method, pattern string, h http.Handler) {
	r.With(mw.Wrap).Method(method, pattern, h)
}

// ChiOperation is the Operation to set for a chi older than v5.2.4, which
// does not set r.Pattern: the route's template from chi's route context.
func ChiOperation(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
		return r.Method + " " + rc.RoutePattern()
	}
	return r.Method + " " + r.URL.Path
}

// Gin returns a gin handler that serves h guarded: it sets r.Pattern to
// the route's template (c.FullPath(), "/orders/:id/reversals") and the
// route's parameters as path values (r.PathValue("id")), so that the
// default Operation is the template. h is a net/http handler; it reaches
// the transaction with idemhttp.Tx(r.Context()).
func Gin(mw *idemhttp.Middleware, h http.Handler) gin.HandlerFunc {
	guarded := mw.Wrap(h)
	return func(c *gin.Context) {
		r := c.Request
		r.Pattern = c.FullPath()
		for _, p := range c.Params {
			r.SetPathValue(p.Key, p.Value)
		}
		guarded.ServeHTTP(c.Writer, r)
	}
}

// EchoPattern is an echo route middleware that sets r.Pattern to the
// route's template (c.Path(), "/orders/:id/reversals"). Put it before the
// guard on each route, and the default Operation is the template:
//
//	e.POST("/orders/:id/reversals", handler, routers.EchoPattern, echo.WrapMiddleware(mw.Wrap))
//
// The echo handler reaches the transaction with
// idemhttp.Tx(c.Request().Context()).
func EchoPattern(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Request().Pattern = c.Path()
		return next(c)
	}
}
