package tenureui_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/tenureui"
)

// Mount the dashboard under /admin/tenure in the application's own mux. Actions are enabled
// for requests the application's own authentication accepted; everyone else sees it read-only
// (or not at all, if the app guards the prefix).
func Example() {
	pool, cleanup := pgtest.ExamplePool() // your *pgxpool.Pool on a migrated schema
	defer cleanup()

	ui, err := tenureui.New(pool, &tenureui.Config{
		Prefix:        "/admin/tenure",
		EnableActions: true,
		Authorizer: func(r *http.Request, action tenureui.Action) (string, error) {
			user := r.Header.Get("X-Authenticated-User") // set by your auth middleware
			if user == "" {
				return "", errors.New("not signed in")
			}
			return user, nil // recorded as the actor in tenure.audit
		},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/tenure/", ui)

	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/admin/tenure/")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
	// Output: 200 text/html; charset=utf-8
}
