// Package mensageriatest holds assertions for adopters' own tests: that a
// receiver is idempotent, and that an app's registry partitions a shared
// outbox on both sides.
package mensageriatest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testsignal"
)

// Idempotency describes a receiver under test.
type Idempotency struct {
	// Message is delivered again and again. Required.
	Message *mensageria.Delivery
	// Apply delivers it to the receiver, as the relay would. A returned
	// error fails the assertion unless AllowErrors.
	Apply func(ctx context.Context, d *mensageria.Delivery) error
	// Snapshot reads the state the receiver's effect changes (rows, a
	// balance, sent e-mails); snapshots are compared with reflect.DeepEqual.
	Snapshot func(ctx context.Context) (any, error)
	// N is how many times to repeat, sequentially and then concurrently.
	// Default 5.
	N int
	// AllowErrors tolerates errors from repeats (a receiver may answer a
	// duplicate with an error) as long as the state does not change.
	AllowErrors bool
}

// AssertIdempotent applies the message once and snapshots the state, then
// applies it N more times one after the other and N more times at once,
// and fails t if either changes the state.
func AssertIdempotent(t testing.TB, c Idempotency) {
	t.Helper()
	if c.Message == nil || c.Apply == nil || c.Snapshot == nil {
		t.Fatal("mensageriatest: Idempotency needs Message, Apply and Snapshot")
		return
	}
	n := c.N
	if n <= 0 {
		n = 5
	}
	ctx := context.Background()
	if err := c.Apply(ctx, attempt(c.Message, 1)); err != nil {
		t.Fatalf("mensageriatest: the first delivery failed: %v", err)
		return
	}
	once, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatalf("mensageriatest: snapshot: %v", err)
		return
	}
	for i := range n {
		if err := c.Apply(ctx, attempt(c.Message, i+2)); err != nil && !c.AllowErrors {
			t.Errorf("mensageriatest: sequential redelivery %d failed: %v", i+1, err)
		}
	}
	if !same(t, ctx, c, once, "after %d sequential redeliveries", n) {
		return
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Apply(ctx, attempt(c.Message, n+i+2))
		}()
	}
	wg.Wait()
	if !c.AllowErrors {
		if err := errors.Join(errs...); err != nil {
			t.Errorf("mensageriatest: concurrent redeliveries failed: %v", err)
		}
	}
	same(t, ctx, c, once, "after %d concurrent redeliveries", n)
}

func attempt(d *mensageria.Delivery, n int) *mensageria.Delivery {
	cp := *d
	cp.Attempt = n
	return &cp
}

func same(t testing.TB, ctx context.Context, c Idempotency, want any, format string, args ...any) bool {
	t.Helper()
	got, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatalf("mensageriatest: snapshot: %v", err)
		return false
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mensageriatest: the receiver is not idempotent: state %s\n got: %#v\nwant: %#v (after one delivery)",
			fmt.Sprintf(format, args...), got, want)
		return false
	}
	return true
}

// Partition describes an app whose partition of a shared outbox is checked.
type Partition struct {
	// Client is the app's client (its registry is what is checked).
	// Required. It must not be started: the assertion starts and stops it.
	Client *mensageria.Client
	// ForeignType is a type the app must not own. Default
	// "mensageriatest.foreign".
	ForeignType string
	// Wait bounds how long the relay runs before the foreign row is
	// checked: it is checked as soon as the relay has claimed
	// partitionClaims (5) times with the row in the table, or once Wait
	// has passed, whichever comes first (a standby relay never claims).
	// Default 5 poll intervals.
	Wait time.Duration
}

// partitionClaims is how many claims of the relay AssertPartition waits
// for: as many as the default Wait of five poll intervals gives it.
const partitionClaims = 5

// foreignOwner is the stand-in app AssertPartition records as the owner of
// the foreign type when no app owns it.
const foreignOwner = "mensageriatest-foreign-owner"

// AssertPartition checks both sides of the partition: enqueueing a type
// without a Sender fails with ErrNoSender and writes no row, and a row of a
// foreign type is neither claimed nor touched by the app's relay. The
// foreign row stays in the table, as its owner would find it, and the
// foreign type, when no app owned it, is left recorded as the stand-in
// app "mensageriatest-foreign-owner"'s: run it on a test database.
func AssertPartition(t testing.TB, p Partition) {
	t.Helper()
	if p.Client == nil {
		t.Fatal("mensageriatest: Partition needs a Client")
		return
	}
	foreign := p.ForeignType
	if foreign == "" {
		foreign = "mensageriatest.foreign"
	}
	if _, ok := p.Client.Config().Registry.Route(foreign); ok {
		t.Fatalf("mensageriatest: the app registers %q, so it is not foreign", foreign)
		return
	}
	ctx := context.Background()
	assertNoSender(t, ctx, p.Client, foreign)
	id, ok := insertForeign(t, ctx, p.Client, foreign)
	if !ok {
		return
	}
	if !runRelay(t, ctx, p) {
		return
	}
	assertUntouched(t, ctx, p.Client.Driver(), foreign, id)
}

// assertNoSender checks that enqueueing the foreign type fails with
// ErrNoSender and writes no row.
func assertNoSender(t testing.TB, ctx context.Context, c *mensageria.Client, foreign string) {
	t.Helper()
	drv := c.Driver()
	count := func() int {
		jobs, err := drv.ListMessages(ctx, driver.ListFilter{Types: []string{foreign}, Limit: 10000})
		if err != nil {
			t.Fatalf("mensageriatest: list: %v", err)
		}
		return len(jobs)
	}
	before := count()
	_, err := c.Enqueue(ctx, mensageria.Message{Type: foreign, Key: "mensageriatest-enqueue"})
	if !errors.Is(err, mensageria.ErrNoSender) {
		t.Errorf("mensageriatest: enqueue of unregistered type %q: want ErrNoSender, got %v", foreign, err)
	}
	if after := count(); after != before {
		t.Errorf("mensageriatest: a failed enqueue wrote %d rows", after-before)
	}
}

// insertForeign writes a row of the foreign type, as its owner would,
// and returns its message id; false when the test cannot go on.
func insertForeign(t testing.TB, ctx context.Context, c *mensageria.Client, foreign string) (uuid.UUID, bool) {
	t.Helper()
	drv := c.Driver()
	// The database refuses rows of a type no app owns: the foreign row
	// belongs to a stand-in app, as it would to its real owner.
	if _, err := drv.Register(ctx, driver.RegisterParams{App: foreignOwner, Resources: []driver.Resource{{Kind: driver.ResourceType, Name: foreign}}}); err != nil {
		var oce *driver.OwnerConflictError
		if !errors.As(err, &oce) {
			t.Fatalf("mensageriatest: record the foreign type's owner: %v", err)
			return uuid.Nil, false
		}
		for _, o := range oce.Conflicts {
			if o.App == c.Config().App {
				t.Errorf("mensageriatest: the catalog gives the foreign type %q to the app itself", foreign)
				return uuid.Nil, false
			}
		}
	}
	id := uuid.Must(uuid.NewV7())
	if err := drv.Insert(ctx, driver.InsertParams{Rows: []driver.InsertRow{{MessageID: id, Type: foreign, Key: "mensageriatest-claim", Payload: []byte("{}")}}}); err != nil {
		t.Fatalf("mensageriatest: insert a foreign row: %v", err)
		return uuid.Nil, false
	}
	return id, true
}

// runRelay starts the app's relay, lets it claim partitionClaims times
// (at most p.Wait) and stops it; false when it could not start.
func runRelay(t testing.TB, ctx context.Context, p Partition) bool {
	t.Helper()
	wait := p.Wait
	if wait <= 0 {
		wait = 5 * p.Client.Config().PollInterval
	}
	signals := testsignal.ForClient(p.Client)
	if err := p.Client.Start(ctx); err != nil {
		t.Fatalf("mensageriatest: start: %v", err)
		return false
	}
	deadline := time.Now().Add(wait)
	for range partitionClaims {
		if _, ok := signals.Claimed.Wait(time.Until(deadline)); !ok {
			break
		}
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Client.Stop(stopCtx); err != nil {
		t.Errorf("mensageriatest: stop: %v", err)
	}
	return true
}

// assertUntouched checks that the foreign row id is still pending and
// never attempted.
func assertUntouched(t testing.TB, ctx context.Context, drv driver.Driver, foreign string, id uuid.UUID) {
	t.Helper()
	jobs, err := drv.ListMessages(ctx, driver.ListFilter{Types: []string{foreign}, Limit: 10000})
	if err != nil {
		t.Fatalf("mensageriatest: list: %v", err)
		return
	}
	for _, j := range jobs {
		if j.MessageID != id {
			continue
		}
		if j.State != driver.StatePending || j.Attempt != 0 {
			t.Errorf("mensageriatest: the app's relay touched a foreign row: state %s, attempts %d", j.State, j.Attempt)
		}
		return
	}
	t.Errorf("mensageriatest: the foreign row disappeared")
}
