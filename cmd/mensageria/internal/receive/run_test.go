package receive

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon/daemontest"
)

// sqliteConfig is a receive config on a fresh SQLite file, listening on
// listen; the consumer "fat" takes pedido.criado.
func sqliteConfig(t *testing.T, listen string) (*config.ReceiveConfig, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app.db")
	c, err := config.ParseReceiveConfig("receive.yaml", fmt.Appendf(nil, `database: sqlite:%s
app: faturamento
receive:
  listen: %s
  tokens: [tok-0123456789abcdef]
consumers:
  - name: fat
    types: [pedido.criado]
    window: 72h
`, path, listen), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return c, path
}

// A consumer another app owns stops the start as a *daemon.ConflictError that
// names what could not be done and keeps the catalog's conflict.
func TestRunReportsAnotherAppsConsumerAsConflict(t *testing.T) {
	c, path := sqliteConfig(t, "127.0.0.1:0")
	daemontest.OwnedBy(t, path, "cobranca", mensageria.Resource{Kind: mensageria.ResourceConsumer, Name: "fat", Window: time.Hour})

	err := Run(context.Background(), Options{Config: c, ConfigPath: "receive.yaml", Log: testLogger()})
	var ce *daemon.ConflictError
	if !errors.As(err, &ce) || ce.What != "receive" || !errors.Is(err, mensageria.ErrOwnerConflict) {
		t.Fatalf("Run with another app's consumer: %v", err)
	}
	if len(ce.Err.Conflicts) != 1 || ce.Err.Conflicts[0].Name != "fat" || ce.Err.Conflicts[0].App != "cobranca" {
		t.Fatalf("conflicts: %+v", ce.Err.Conflicts)
	}
}

// An address that cannot be listened on, the deliveries' or the probes',
// is a usage error (exit 2) naming the setting.
func TestRunRefusesAnAddressInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, tc := range []struct {
		name, listen, health, want string
	}{
		{"receive.listen", addr, "", "receive.listen " + addr},
		{"--listen", "127.0.0.1:0", addr, "--listen " + addr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := sqliteConfig(t, tc.listen)
			err := Run(context.Background(), Options{Config: c, ConfigPath: "receive.yaml", HealthListen: tc.health, Migrate: true, Log: testLogger()})
			var de *daemon.Error
			if !errors.As(err, &de) || de.Code != daemon.ExitUsage || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want exit %d and %q", err, daemon.ExitUsage, tc.want)
			}
		})
	}
}
