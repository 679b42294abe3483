package ops_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/ops"
)

// A Go app lists its own dead letters and retries them, without the
// command: the calls the README shows. It needs a database, so it is
// compiled here and run by TestRetryDeadLettersExample on a test schema.
func Example_retryDeadLetters() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	drv, err := postgres.New(pool, &postgres.Config{Schema: "mensageria"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := retryDeadLetters(ctx, drv, os.Stdout); err != nil {
		fmt.Println(err)
	}
}

func retryDeadLetters(ctx context.Context, drv driver.Driver, out io.Writer) error {
	// README:begin ops-retry
	// The verbs of 'mensageria dead', within what the catalog gives app
	// pedidos: another app's dead letters are neither listed nor touched.
	o := ops.New(drv, ops.ForApps("pedidos"))
	var retry []int64
	for after := int64(0); ; {
		page, err := o.DeadLetters(ctx, ops.ListParams{Types: []string{"pedido.criado"}, After: after, Limit: 100})
		if err != nil {
			return err // *ops.OutOfScopeError when the type is another app's
		}
		for _, m := range page.Messages {
			fmt.Fprintf(out, "dead %d (%s): %s\n", m.ID, m.Key, m.LastError)
			retry = append(retry, m.ID)
		}
		if !page.Truncated {
			break
		}
		after = page.NextAfter
	}
	if len(retry) == 0 {
		return nil
	}
	res, err := o.Retry(ctx, ops.Selection{IDs: retry})
	var amo *ops.AtMostOnceError
	if errors.As(err, &amo) {
		// At-most-once routes: the receiver may have the effect; check it,
		// then retry with AllowDuplicate, or Discard.
		return fmt.Errorf("check the receiver before retrying %v: %w", amo.IDs, err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d back to pending\n", res.Changed)
	return nil
	// README:end ops-retry
}

// The README's code, run on a schema with two dead letters of pedidos'
// type and one of another app's, which it leaves alone.
func TestRetryDeadLettersExample(t *testing.T) {
	ob := newOutbox(t)
	dead := ob.dead("pedido.criado", 2, false)
	theirs := ob.dead("fatura.emitida", 1, false)[0]
	var out strings.Builder
	if err := retryDeadLetters(context.Background(), ob.drv, &out); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("dead %d (k): refused: 422\ndead %d (k): refused: 422\n2 back to pending\n", dead[0], dead[1])
	if out.String() != want {
		t.Fatalf("printed\n%s\nwant\n%s", out.String(), want)
	}
	if ob.state(dead[0]) != driver.StatePending || ob.state(theirs) != driver.StateDead {
		t.Fatalf("states %s, %s: want ours pending, theirs dead", ob.state(dead[0]), ob.state(theirs))
	}
}
