package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenureui"
)

// serveUI serves the web dashboard (tenureui) on addr at /ui/, and returns its URL and a
// function that stops the server. With actions, every action is allowed and audited as
// actor "shop-demo": fine for a local demo, not for anything reachable by others.
func serveUI(pool *pgxpool.Pool, client *jobs.Client, addr string, actions bool, refresh time.Duration) (string, func(), error) {
	if refresh <= 0 {
		refresh = 2 * time.Second
	}
	cfg := &tenureui.Config{Prefix: "/ui", Client: client, RefreshEvery: refresh, EnableActions: actions}
	if actions {
		cfg.Authorizer = func(*http.Request, tenureui.Action) (string, error) { return "shop-demo", nil }
	}
	ui, err := tenureui.New(pool, cfg)
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", ui)
	mux.Handle("/{$}", http.RedirectHandler("/ui/", http.StatusFound))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener failed; page loads fail and show it
		}
	}()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}
	return "http://" + l.Addr().String() + "/ui/", stop, nil
}
