package tenuretest_test

import (
	"context"
	"fmt"
	"os"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenuretest"
	"github.com/tenureq/tenure/worker"
)

// exampleT stands in for the *testing.T of a real test, which Examples do not have.
type exampleT struct{ cleanups []func() }

func (*exampleT) Helper()                           {}
func (*exampleT) Errorf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }
func (*exampleT) Fatalf(format string, args ...any) {
	fmt.Printf("FAIL: "+format+"\n", args...)
	os.Exit(1)
}
func (t *exampleT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) done() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// signUp is the code under test: it enqueues a welcome mail.
func signUp(ctx context.Context, c *jobs.Client, userID int64, lang string) error {
	_, err := c.Insert(ctx, Welcome{UserID: userID, Lang: lang}, &jobs.InsertOpts{Queue: "mail"})
	return err
}

// In a test, t is the test's *testing.T.
func ExampleRequireEnqueued() {
	t := &exampleT{}
	defer t.done()
	ctx := context.Background()
	pool := tenuretest.Pool(t) // a fresh migrated database, dropped after the test
	client, _ := jobs.NewClient(pool, nil)

	_ = signUp(ctx, client, 42, "ko")

	got := tenuretest.RequireEnqueued(ctx, t, pool, &tenuretest.Match[Welcome]{
		Queue: "mail",
		Args:  func(a Welcome) bool { return a.UserID == 42 },
	})
	fmt.Println(len(got), got[0].Args.Lang, got[0].State)
	// Output: 1 ko ready
}

func ExampleRequireNotEnqueued() {
	t := &exampleT{}
	defer t.done()
	ctx := context.Background()
	pool := tenuretest.Pool(t)
	client, _ := jobs.NewClient(pool, nil)

	_ = signUp(ctx, client, 42, "en")

	// Nobody else was welcomed, and nothing went to the default queue.
	tenuretest.RequireNotEnqueued(ctx, t, pool, &tenuretest.Match[Welcome]{Args: func(a Welcome) bool { return a.UserID != 42 }})
	tenuretest.RequireNotEnqueued(ctx, t, pool, &tenuretest.Match[Welcome]{Queue: "default"})
	fmt.Println("ok")
	// Output: ok
}

// Work runs a handler on one job through a real claim, so worker.Effect (and
// worker.CompleteTx) work in tests as in production.
func ExampleWork() {
	t := &exampleT{}
	defer t.done()
	ctx := context.Background()
	pool := tenuretest.Pool(t)

	sendWelcome := func(ctx context.Context, job *generics.Job[Welcome]) error {
		res, err := worker.Effect(ctx, job.JobRow, "mail", func(ctx context.Context, call worker.EffectCall) (string, error) {
			return "msg-1", nil // a mail API call that deduplicates by call.Key
		})
		if err != nil {
			return err
		}
		fmt.Println("sent", res.Value, "replayed:", res.Replayed)
		return nil
	}
	res := tenuretest.Work(ctx, t, pool, sendWelcome, Welcome{UserID: 42, Lang: "en"}, nil)
	fmt.Println(res.Outcome.Transition, res.Job.State, res.Job.Attempt)
	// Output:
	// sent msg-1 replayed: false
	// succeeded succeeded 1
}
