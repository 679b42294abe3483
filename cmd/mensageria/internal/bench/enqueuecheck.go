package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
)

// EnqueueCheckConfig sizes the EnqueueCheck scenario.
type EnqueueCheckConfig struct {
	// Rounds of every mode, each round in a rotated order (Alternate).
	Rounds int
	// Run is how long each mode enqueues per round.
	Run time.Duration
}

// The modes of EnqueueCheck: how the rows are written, and whether the
// outbox's enqueue trigger checks them ("checked"), has its rules taken
// out ("unchecked"), or only its owner test ("ownerless").
var (
	enqueueCheckKinds    = []string{"go-1", "go-100", "sql-1"}
	enqueueCheckVariants = []string{"checked", "unchecked", "ownerless"}
)

// EnqueueCheck measures what the outbox's enqueue rules (the owner, key,
// type and headers checks of migration 2, in the enqueue trigger of migrations 7 and 10) cost an enqueue: the rate of
// rows written with the check and without it, on one connection, by
//
//	go-1    the driver's Insert of 1 row, one transaction each;
//	go-100  the driver's Insert of 100 rows, one transaction each;
//	sql-1   a plain SQL INSERT of 1 row (what a Java or psql app runs),
//	        autocommitted.
//
// "Without" is a second schema migrated the same way whose enqueue trigger
// has its rules taken out (the wake-up stays), so both tables have the same
// indexes, defaults and wake-up; a third has only the owner test taken out
// (the key, type and headers tests stay). Each round
// runs every mode once, from an empty table, rotating which goes first; the
// rates are medians over the rounds, <kind>-ratio is the median of each
// round's checked/unchecked (what all the rules cost; the target:
// at least 0.95) and <kind>-owner-ratio of checked/ownerless (what the
// ownership check alone costs).
func EnqueueCheck(ctx context.Context, e Env, cfg EnqueueCheckConfig) (Result, error) {
	r := Result{Scenario: "enqueue-check"}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 5
	}
	if cfg.Run <= 0 {
		cfg.Run = 2 * time.Second
	}
	const typ, app = "bench.check", "bench-check"
	// Each variant but "checked" is a schema of its own, migrated the same
	// way, whose trigger has its part taken out.
	cut := map[string]string{"unchecked": triggerRules, "ownerless": triggerOwner}
	envs := map[string]Env{}
	drivers := map[string]*postgres.Driver{}
	for _, v := range enqueueCheckVariants {
		env := e
		part, side := cut[v]
		if side {
			s, drop, err := e.sideSchema(ctx, e.Schema+"_"+v)
			if err != nil {
				return r, err
			}
			defer drop()
			env = s
		}
		d, err := env.driver()
		if err != nil {
			return r, err
		}
		if side {
			if err := installEnqueueTriggerWithout(ctx, env, d, part); err != nil {
				return r, err
			}
		}
		if err := own(ctx, d, app, typ); err != nil {
			return r, err
		}
		envs[v], drivers[v] = env, d
	}
	seq := 0
	run := func(mode string) (Result, error) {
		kind, variant, _ := strings.Cut(mode, "/")
		d, env := drivers[variant], envs[variant]
		// Every run starts from an empty table, so that neither variant
		// pays for the other's index growth.
		if err := env.exec(ctx, "TRUNCATE "+env.Schema+".outbox"); err != nil {
			return Result{}, err
		}
		rows, elapsed, err := enqueueFor(ctx, d, env, kind, typ, cfg.Run, &seq)
		if err != nil {
			return Result{}, fmt.Errorf("%s %s: %w", kind, variant, err)
		}
		out := Result{Scenario: mode}
		out.Set("rows/s", float64(rows)/elapsed.Seconds())
		return out, nil
	}
	// One Alternate round at a time, in an order of its own: the kinds
	// rotate, and within each kind the variants run next to each other,
	// each first in turn. The ratio is taken within a round, between
	// neighbours in time, and its median over the rounds reported, which a
	// shared machine's drift between rounds does not move.
	rates := map[string][]float64{}
	ratios := map[string][]float64{}
	for round := range cfg.Rounds {
		res, err := Alternate(1, enqueueCheckOrder(round), run)
		if err != nil {
			return r, err
		}
		for _, k := range enqueueCheckKinds {
			for _, v := range enqueueCheckVariants {
				rates[k+"/"+v] = append(rates[k+"/"+v], res[k+"/"+v]["rows/s"])
			}
			with := res[k+"/checked"]["rows/s"]
			ratios[k] = append(ratios[k], with/res[k+"/unchecked"]["rows/s"])
			ratios[k+"/owner"] = append(ratios[k+"/owner"], with/res[k+"/ownerless"]["rows/s"])
		}
	}
	for _, k := range enqueueCheckKinds {
		for _, v := range enqueueCheckVariants {
			r.Set(k+"-"+v+"-rows/s", median(rates[k+"/"+v]))
		}
		r.Set(k+"-ratio", median(ratios[k]))
		r.Set(k+"-owner-ratio", median(ratios[k+"/owner"]))
	}
	r.Set("rounds", float64(cfg.Rounds))
	return r, nil
}

// enqueueCheckOrder is the order of the modes in round: the kinds
// rotated by round, each kind's variants next to each other, themselves
// rotated by round, so that each variant runs first in turn.
func enqueueCheckOrder(round int) []string {
	var order []string
	for i := range enqueueCheckKinds {
		k := enqueueCheckKinds[(i+round)%len(enqueueCheckKinds)]
		for j := range enqueueCheckVariants {
			order = append(order, k+"/"+enqueueCheckVariants[(j+round)%len(enqueueCheckVariants)])
		}
	}
	return order
}

// median is the middle value of v (the upper one of an even count), as
// medians in rounds.go takes it.
func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// enqueueFor writes rows of typ the way kind says for about dur and returns
// how many it wrote and how long that took.
func enqueueFor(ctx context.Context, d *postgres.Driver, e Env, kind, typ string, dur time.Duration, seq *int) (int, time.Duration, error) {
	per := 1
	if kind == "go-100" {
		per = 100
	}
	insert := "INSERT INTO " + e.Schema + ".outbox (type, key, payload, headers) VALUES ($1, $2, $3, $4)"
	headers := `{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`
	key := func() string {
		*seq++
		return "k-" + strconv.Itoa(*seq)
	}
	n := 0
	began := time.Now()
	for time.Since(began) < dur {
		switch kind {
		case "sql-1":
			if _, err := e.Pool.Exec(ctx, insert, typ, key(), Payload, headers); err != nil {
				return n, 0, err
			}
		default:
			if err := insertBatch(ctx, d, typ, per, []byte(headers), key); err != nil {
				return n, 0, err
			}
		}
		n += per
	}
	return n, time.Since(began), nil
}

// insertBatch writes n rows of typ, keyed by key, in one transaction
// through the driver's own Insert rather than a Client's Enqueue: the
// go-1 and go-100 modes time the database's share of an enqueue, without
// the Client's validation and debounced wake-up.
func insertBatch(ctx context.Context, d *postgres.Driver, typ string, n int, headers []byte, key func() string) error {
	rows := make([]driver.InsertRow, n)
	for i := range rows {
		rows[i] = driver.InsertRow{MessageID: uuid.Must(uuid.NewV7()), Type: typ, Key: key(), Payload: []byte(Payload), Headers: headers}
	}
	return d.Insert(ctx, driver.InsertParams{Rows: rows})
}
