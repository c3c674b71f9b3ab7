// Package testkit holds test fixtures shared by Tenure's test packages (the worker's own tests
// and the fault matrix in internal/faults). It is for tests only.
package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Remote is an external system that deduplicates by Idempotency-Key, as the contract asks of
// remotes for exactly-once effects (docs/contract.md §7): each key is applied once and every
// repeat is answered with the first receipt. It also counts calls that carry a fencing
// generation lower than one already seen for their key.
type Remote struct {
	*httptest.Server
	mu       sync.Mutex
	calls    map[string]int
	applied  map[string]int
	receipts map[string]string
	maxGen   map[string]int64
	staleGen int
	seq      int
}

// RemoteReply is the remote's answer.
type RemoteReply struct {
	Receipt   string `json:"receipt"`
	Duplicate bool   `json:"duplicate"`
}

// NewRemote starts a Remote, closed when t ends. Effects POST to URL + "/apply".
func NewRemote(t testing.TB) *Remote {
	d := &Remote{calls: map[string]int{}, applied: map[string]int{}, receipts: map[string]string{}, maxGen: map[string]int64{}}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if r.Method != http.MethodPost || r.URL.Path != "/apply" || key == "" {
			http.Error(w, "want POST /apply with an Idempotency-Key", http.StatusBadRequest)
			return
		}
		gen, _ := strconv.ParseInt(r.Header.Get("X-Fencing-Generation"), 10, 64)
		d.mu.Lock()
		d.calls[key]++
		if gen < d.maxGen[key] {
			d.staleGen++
		}
		d.maxGen[key] = max(d.maxGen[key], gen)
		rc, dup := d.receipts[key]
		if !dup {
			d.seq++
			rc = fmt.Sprintf("rcpt-%d", d.seq)
			d.receipts[key] = rc
			d.applied[key]++
		}
		d.mu.Unlock()
		_ = json.NewEncoder(w).Encode(RemoteReply{Receipt: rc, Duplicate: dup})
	}))
	t.Cleanup(d.Close)
	return d
}

// Key returns the calls and applications seen for key, and its receipt.
func (d *Remote) Key(key string) (calls, applied int, receipt string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[key], d.applied[key], d.receipts[key]
}

// Totals returns the keys seen, the calls and the applications.
func (d *Remote) Totals() (keys, calls, applied int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.calls {
		calls += n
	}
	for _, n := range d.applied {
		applied += n
	}
	return len(d.calls), calls, applied
}

// StaleGenerations returns how many calls carried a generation lower than one already seen
// for their key.
func (d *Remote) StaleGenerations() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.staleGen
}

// Check returns how many of the jobs' effect keys (job:{id}:effect:{name}) were applied other
// than exactly once, and their calls in all.
func (d *Remote) Check(ids []int64, name string) (notOnce, calls int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range ids {
		k := fmt.Sprintf("job:%d:effect:%s", id, name)
		if d.applied[k] != 1 {
			notOnce++
		}
		calls += d.calls[k]
	}
	return notOnce, calls
}

var remoteClient = &http.Client{Timeout: 10 * time.Second}

// CallRemote applies the effect identified by key at the remote whose base URL is base, with
// the attempt's fencing generation, and returns its receipt.
func CallRemote(ctx context.Context, base, key string, generation int64) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/apply", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Fencing-Generation", strconv.FormatInt(generation, 10))
	resp, err := remoteClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("remote: %s: %s", resp.Status, b)
	}
	var r RemoteReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", err
	}
	return r.Receipt, nil
}
