package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/cmd/mensageria/internal/bench"
	"github.com/xadm/mensageria/internal/testdb"
)

// BenchmarkPeerRiver: mensageria and River (at its defaults and tuned),
// steady, tax and drain one after the other on the test server, with
// mensageria's ratio to each (docs/benchmarks.md, "mensageria and River,
// side by side"; `mensageria bench --peer river` runs the same).
func BenchmarkPeerRiver(b *testing.B) {
	r, err := bench.PeerCompare(context.Background(), benchEnv(b), bench.PeerConfig{})
	if err == nil {
		b.Log("\n" + bench.PeerTable(r))
	}
	report(b, r, err)
}

// TestPeerRiverSmoke runs the comparison end to end at a size of seconds:
// every scenario for every system and every ratio of the table is there.
// The values are not judged; they mean nothing at this size.
func TestPeerRiverSmoke(t *testing.T) {
	r, err := bench.PeerCompare(context.Background(), bench.Env{Pool: testdb.Pool(t), Schema: testdb.Schema(t)}, bench.PeerConfig{
		Producers: 2, SteadyFor: 300 * time.Millisecond, TaxRun: 200 * time.Millisecond, TaxRounds: 1, Messages: 500,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + r.Notes)
	for _, sys := range []string{"mensageria", bench.PeerRiver, bench.PeerRiverTuned} {
		for _, k := range []string{"steady/" + sys + "/enqueue/s", "tax/" + sys + "/tx/s", "drain/" + sys + "/msgs/s", "drain/" + sys + "/table-mb"} {
			if r.Metrics[k] <= 0 {
				t.Errorf("%s = %v, want > 0", k, r.Metrics[k])
			}
		}
	}
	for _, p := range bench.Peers {
		for _, k := range []string{"steady/mensageria÷" + p + "/pickup-p50-ms", "tax/mensageria÷" + p + "/tax-ratio", "drain/mensageria÷" + p + "/msgs/s"} {
			if _, ok := r.Metrics[k]; !ok {
				t.Errorf("no %s", k)
			}
		}
		if !strings.Contains(r.Notes, "m÷"+p) {
			t.Errorf("the table has no column m÷%s:\n%s", p, r.Notes)
		}
	}
}

// TestPeerRiverStressSmoke runs the stress phases for River at a size of
// seconds: the crash phase left out, every committed message delivered,
// and the side-by-side table built from it.
func TestPeerRiverStressSmoke(t *testing.T) {
	phases := bench.StandardStressPhases(500*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond)
	r, err := bench.RiverStress(context.Background(), bench.Env{Pool: testdb.Pool(t), Schema: testdb.Schema(t)}, bench.StressConfig{
		Rate: 50, Producers: 2, Phases: phases, ReaderTx: 100 * time.Millisecond, Sample: 100 * time.Millisecond,
	}, bench.PeerRiverTuned)
	if err != nil {
		t.Fatal(err)
	}
	if r.Metrics["committed"] <= 0 || r.Metrics["lost"] != 0 || r.Metrics["undelivered"] != 0 {
		t.Errorf("committed %v, lost %v, undelivered %v", r.Metrics["committed"], r.Metrics["lost"], r.Metrics["undelivered"])
	}
	if _, ok := r.Metrics["crash/delivered/s"]; ok {
		t.Error("River ran the crash phase")
	}
	if _, ok := r.Metrics["idle-in-tx/p99-ms"]; !ok {
		t.Errorf("no idle-in-tx figures: %v", r.Metrics)
	}
	side := bench.StressPeerCompare(r, []bench.Result{r}, phases)
	if !strings.Contains(side.Notes, "stress:clean p99-ms") || !strings.Contains(side.Notes, "m÷river-tuned") {
		t.Errorf("the side-by-side table:\n%s", side.Notes)
	}
}
