package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenureq/tenure/worker"
)

// paymentService is an in-process fake payment provider. Like real ones, it deduplicates by
// the Idempotency-Key header: the first request with a key applies the charge, later ones get
// the same charge back without applying anything (and a request reusing a key with different
// parameters is refused). A fraction of first applications "lose their response": the charge
// is applied but the caller sees a 502, as after a network timeout, and must retry.
type paymentService struct {
	srv      *httptest.Server
	lostRate float64

	mu      sync.Mutex
	charges map[string]chargeRecord // by idempotency key

	requests atomic.Int64 // every request
	applied  atomic.Int64 // charges applied (one per key)
	replayed atomic.Int64 // requests answered from an earlier application
	lost     atomic.Int64 // applied, but answered 502
}

type chargeRequest struct {
	OrderID     int64  `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

type chargeRecord struct {
	ID  string
	req chargeRequest
}

type chargeResponse struct {
	ID       string `json:"id"`
	Replayed bool   `json:"replayed"`
}

func newPaymentService(lostRate float64) *paymentService {
	p := &paymentService{lostRate: lostRate, charges: map[string]chargeRecord{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	return p
}

func (p *paymentService) Close() { p.srv.Close() }

func (p *paymentService) serve(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	key := r.Header.Get("Idempotency-Key")
	var req chargeRequest
	if r.Method != http.MethodPost || r.URL.Path != "/v1/charges" || key == "" || json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	rec, seen := p.charges[key]
	if !seen {
		rec = chargeRecord{ID: fmt.Sprintf("ch_%07d", p.applied.Add(1)), req: req}
		p.charges[key] = rec
	}
	p.mu.Unlock()
	switch {
	case seen && rec.req != req:
		http.Error(w, "idempotency key reused with different parameters", http.StatusUnprocessableEntity)
		return
	case seen:
		p.replayed.Add(1)
	case unitHash(key) < p.lostRate:
		p.lost.Add(1)
		http.Error(w, "upstream timeout", http.StatusBadGateway) // applied, but the caller cannot know
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(chargeResponse{ID: rec.ID, Replayed: seen})
}

// count is the number of distinct charges applied.
func (p *paymentService) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.charges)
}

// paymentClient calls the service, classifying failures for the worker: 5xx and network
// errors are transient (retried), 4xx permanent.
type paymentClient struct {
	url  string
	http *http.Client
}

func (c *paymentClient) charge(ctx context.Context, key string, req chargeRequest) (string, error) {
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return "", worker.Permanent(err)
	}
	hr.Header.Set("Idempotency-Key", key)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(hr)
	if err != nil {
		return "", worker.WithCode(worker.CodeRemoteError, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	switch {
	case resp.StatusCode >= 500:
		return "", worker.WithCode(worker.CodeRemoteError, fmt.Errorf("payment service: %s: %s", resp.Status, bytes.TrimSpace(b)))
	case resp.StatusCode != http.StatusOK:
		return "", worker.WithCode(worker.CodePermanentRemote, fmt.Errorf("payment service: %s: %s", resp.Status, bytes.TrimSpace(b)))
	}
	var out chargeResponse
	if err := json.Unmarshal(b, &out); err != nil || out.ID == "" {
		return "", worker.WithCode(worker.CodeRemoteError, errors.New("payment service: malformed response"))
	}
	return out.ID, nil
}

func newPaymentClient(url string) *paymentClient {
	return &paymentClient{url: url, http: &http.Client{Timeout: 5 * time.Second}}
}

// unitHash maps s to [0, 1), deterministically.
func unitHash(s string) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return float64(mix(h.Sum64())>>11) / (1 << 53)
}

// chance maps (id, attempt, salt) to [0, 1), deterministically, so a run's injected
// failures are reproducible.
func chance(id int64, attempt int, salt uint64) float64 {
	return float64(mix(uint64(id)*0x9e3779b97f4a7c15^uint64(attempt)<<40^salt)>>11) / (1 << 53)
}

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
