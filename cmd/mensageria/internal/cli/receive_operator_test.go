package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// No operator command used to accept the receive daemon's config: a
// receive-only app needed a second config to migrate its schema, record
// or list its consumers, or see its status. Every operator command now
// takes it.
func TestOperatorCommandsTakeAReceiveConfig(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		p := writeFile(t, fmt.Sprintf(`database: %s
schema: %s
app: faturamento
receive:
  tokens: ["${M2M_TOKEN}"]
consumers:
  - name: fat.pedidos
    types: [pedido.criado]
    window: 72h
`, s.db, s.schema))
		env := map[string]string{"M2M_TOKEN": "a-long-enough-token-0123456789"}
		c := func(args ...string) result { return run(t, "", env, append(args, "--config", p)...) }

		must(t, "migrate up", c("migrate", "up"), 0, "migrated")
		must(t, "migrate check", c("migrate", "check"), 0, "current")
		must(t, "migrate sql", c("migrate", "sql"), 0, "mensageria migration")
		must(t, "owners register", c("owners", "register"), 0, "app faturamento owns 1 inbox consumer(s)", "fat.pedidos")
		r := c("owners", "list", "--json")
		var entries []OwnerEntry
		if err := json.Unmarshal([]byte(r.out), &entries); err != nil {
			t.Fatalf("owners list: %v %+v", err, r)
		}
		var found bool
		for _, e := range entries {
			if e.Kind == "consumer" && e.Name == "fat.pedidos" && e.App == "faturamento" && e.WindowSeconds != nil && *e.WindowSeconds == 72*3600 {
				found = true
			}
		}
		if !found {
			t.Fatalf("owners list lacks the consumer: %+v", entries)
		}
		must(t, "owners list text", c("owners", "list"), 0, "consumer", "fat.pedidos", "3d")
		r = c("status")
		must(t, "status", r, 0, "app faturamento", "a receive daemon's config")
		if strings.Contains(r.out, "no relay of this app is running") {
			t.Fatalf("status of a receive-only app looks for a relay:\n%s", r.out)
		}
		must(t, "dead list", c("dead", "list"), 0, "app faturamento owns no message types")
		must(t, "doubt list", c("doubt", "list"), 0, "no messages in doubt")
		must(t, "owners transfer", c("owners", "transfer", "consumer", "fat.pedidos", "--from", "faturamento", "--to", "cobranca"), 0, "moved")
		// The relay still needs a relay's config.
		must(t, "relay", c("relay"), ExitUsage, "is a receive daemon's config", "needs a relay's config")
	})
}
