// Package daemontest is what the daemons' tests (relay, receive) share.
package daemontest

import (
	"context"
	"testing"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/ops"
)

// OwnedBy brings the schema of the SQLite file at path up and records in
// its ownership catalog that app owns res, as that app's relay or
// receiver would have: what a daemon of another app then meets at start.
func OwnedBy(t testing.TB, path, app string, res ...mensageria.Resource) {
	t.Helper()
	ctx := context.Background()
	b, err := daemon.Open(ctx, "sqlite:"+path, "", true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Migrate(ctx, mensageria.MigrateUp, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := ops.New(b.Driver, ops.AllApps()).Register(ctx, app, res); err != nil {
		t.Fatal(err)
	}
}
