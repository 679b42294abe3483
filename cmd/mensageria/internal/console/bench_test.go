package console_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/xadm/mensageria/cmd/mensageria/internal/bench"
	"github.com/xadm/mensageria/internal/testdb"
)

// BenchmarkConsolePage is the console's main page over 1,000,000 pending
// rows of 50 types (target: at most 200 ms of server time), against the
// per-type count it keeps out of page loads. It runs once whatever b.N
// is; run it with
//
//	go test -run '^$' -bench ConsolePage -benchtime 1x -timeout 20m ./internal/console/
//
// MENSAGERIA_BENCH_PLANS=1 prints the plans of the page's statements
// (recorded in docs/benchmarks.md).
func BenchmarkConsolePage(b *testing.B) {
	e := bench.Env{Pool: testdb.Pool(b), Schema: testdb.Schema(b)}
	cfg := bench.ConsoleConfig{}
	if os.Getenv("MENSAGERIA_BENCH_PLANS") != "" {
		cfg.Plans = func(name, plan string) { fmt.Printf("-- %s\n%s\n\n", name, plan) }
	}
	r, err := bench.Console(context.Background(), e, cfg)
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range r.Metrics {
		b.ReportMetric(v, k)
	}
	b.ReportMetric(0, "ns/op")
	b.Log(r.Notes)
}
