package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/xadm/mensageria/internal/testdb"
)

// The stress scenarios through the real program: it starts itself again
// as the relay process (bench --stress-relay), kills it and restarts it,
// and audits the run. Phases of two seconds (one for the warmup) test the
// wiring; their figures mean nothing. Each phase must deliver something:
// a pinned phase of one second once delivered nothing on a machine busy
// with a build beside the suite.
func TestBenchStressCommand(t *testing.T) {
	testdb.Long(t, "bench stress")
	bin := binary(t)
	short := []string{"--json", "--stress-warmup", "1s", "--stress-phase", "2s", "--stress-pinned", "2s", "--stress-lease", "1s", "--stress-rate", "100"}
	decode := func(t *testing.T, out string) map[string]float64 {
		t.Helper()
		var res struct {
			Metrics map[string]float64 `json:"metrics"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &res); err != nil {
			t.Fatalf("bench output %q: %v", out, err)
		}
		return res.Metrics
	}

	t.Run("sqlite", func(t *testing.T) {
		// No config needed: the scenario brings its own database file.
		r := runBin(t, bin, nil, "", append([]string{"bench", "--scenario", "stress-sqlite"}, short...)...)
		if r.code != 0 {
			t.Fatalf("exit %d\n%s\n%s", r.code, r.out, r.err)
		}
		m := decode(t, r.out)
		for _, k := range []string{"sqlite/lost", "sqlite-crash/lost", "sqlite-crash/phantoms"} {
			if v, ok := m[k]; !ok || v != 0 {
				t.Errorf("%s = %v (present %v), want 0", k, v, ok)
			}
		}
		for _, k := range []string{"sqlite/clean/delivered/s", "sqlite-crash/crash/delivered/s", "sqlite-crash/committed"} {
			if m[k] <= 0 {
				t.Errorf("%s = %v, want > 0", k, m[k])
			}
		}
	})

	t.Run("postgres", func(t *testing.T) {
		p := writeConfig(t, testdb.URL(), testdb.Schema(t), "http://127.0.0.1:1/unused")
		r := runBin(t, bin, []string{"TEST_TOKEN=tok"}, "", append([]string{"bench", "--config", p, "--scenario", "stress", "--stress-readers", "2"}, short...)...)
		if r.code != 0 {
			t.Fatalf("exit %d\n%s\n%s", r.code, r.out, r.err)
		}
		m := decode(t, r.out)
		for _, k := range []string{"lost", "phantoms", "undelivered"} {
			if v, ok := m[k]; !ok || v != 0 {
				t.Errorf("%s = %v (present %v), want 0", k, v, ok)
			}
		}
		for _, ph := range []string{"warmup", "clean", "idle-in-tx", "recovery", "active-readers", "high-load", "recovery-2", "crash"} {
			if m[ph+"/delivered/s"] <= 0 || m[ph+"/p99-ms"] <= 0 {
				t.Errorf("phase %s: delivered/s %v, p99 %v", ph, m[ph+"/delivered/s"], m[ph+"/p99-ms"])
			}
		}
		if _, ok := m["crash/held-at-kill"]; !ok {
			t.Errorf("no crash audit: %v", m)
		}
	})

	t.Run("usage", func(t *testing.T) {
		for _, bad := range [][]string{{"--stress-rate", "0"}, {"--stress-phase", "1ms"}, {"--stress-lease", "10ms"}, {"--stress-readers", "0"}, {"--tax-run", "1ms"}, {"--stress-outbox-set", "fillfactor=1);--"}} {
			if r := run(t, "", nil, append([]string{"bench", "--scenario", "stress-sqlite"}, bad...)...); r.code != ExitUsage {
				t.Errorf("bench %v: %+v, want a usage error", bad, r)
			}
		}
	})
}
