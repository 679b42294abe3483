package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/xadm/mensageria/internal/testdb"
)

// TestBenchPeerRiverSmoke runs `bench --peer river` end to end at a size
// of seconds: one result for the three scenarios, with mensageria's ratio
// to both River variants; then the text table, and the flags' refusals.
// The figures are not judged; they mean nothing at this size.
func TestBenchPeerRiverSmoke(t *testing.T) {
	testdb.Long(t, "bench --peer river")
	testdb.Pool(t)
	p := writeConfig(t, testdb.URL(), testdb.Schema(t), "http://127.0.0.1:1/unused")
	small := []string{"bench", "--config", p, "--peer", "river",
		"--duration", "300ms", "--tax-run", "200ms", "--rounds", "1", "--messages", "500", "--producers", "2"}
	r := run(t, "", tokEnv, append(small, "--scenario", "steady,tax,drain", "--json")...)
	if r.code != 0 {
		t.Fatalf("bench --peer river: %+v", r)
	}
	var res struct {
		Scenario string             `json:"scenario"`
		Metrics  map[string]float64 `json:"metrics"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.out)), &res); err != nil || res.Scenario != "peer" {
		t.Fatalf("bench output %q: %v", r.out, err)
	}
	for _, k := range []string{"steady/mensageria÷river/pickup-p99-ms", "tax/mensageria÷river-tuned/tax-ratio", "drain/mensageria÷river/msgs/s", "drain/river-tuned/table-mb"} {
		if _, ok := res.Metrics[k]; !ok {
			t.Errorf("no %s in %v", k, res.Metrics)
		}
	}

	r = run(t, "", tokEnv, append(small, "--scenario", "drain", "--river-tuning", "default")...)
	if r.code != 0 {
		t.Fatalf("bench --peer river, text: %+v", r)
	}
	if !strings.Contains(r.out, "m÷river") || strings.Contains(r.out, "river-tuned") || strings.Contains(r.out, "steady") {
		t.Fatalf("want the drain's table against river alone:\n%s", r.out)
	}

	for _, bad := range [][]string{{"--peer", "sidekiq"}, {"--peer", "river", "--river-tuning", "fast"}} {
		if r := run(t, "", tokEnv, append([]string{"bench", "--config", p}, bad...)...); r.code != ExitUsage {
			t.Errorf("%v: %+v, want exit %d", bad, r, ExitUsage)
		}
	}
}
