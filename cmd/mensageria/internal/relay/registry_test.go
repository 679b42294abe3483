package relay

import (
	"testing"

	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
)

// The registry the relay builds from a config carries each route's
// max_rate, and an at-most-once route builds (with its probe) beside an
// at-least-once one. The config's own checks are internal/config's tests
// (TestParseConfigFlowControl, TestParseConfigAtMostOnce).
func TestRegistryOfTheConfig(t *testing.T) {
	c, err := config.ParseConfig("m.yaml", []byte(`database: sqlite:/tmp/x.db
app: a
routes:
  - type: lento
    max_rate: 2.5
    http: {url: http://h/, token: x}
  - type: livre
    http: {url: http://h/, token: x}
`), envOf())
	if err != nil {
		t.Fatal(err)
	}
	reg, _, _, err := registry(t.Context(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := reg.Route("lento"); r.MaxRate != 2.5 {
		t.Fatalf("registry route: %+v", r)
	}
	if r, _ := reg.Route("livre"); r.MaxRate != 0 {
		t.Fatalf("registry route: %+v", r)
	}

	// The config's own at-most-once example (its TestParseConfigAtMostOnce).
	once, err := config.LoadConfig("../config/testdata/at_most_once.yaml", envOf("LEGACY_TOKEN", "leg"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := registry(t.Context(), once, nil); err != nil {
		t.Fatalf("the enqueue-only registry of the config: %v", err)
	}
}

// envOf is an environment of the given key and value pairs.
func envOf(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}
