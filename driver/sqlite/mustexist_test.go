package sqlite

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/xadm/mensageria/driver"
)

// MustExist opens a database file that exists, for reads and writes, and
// refuses a missing one without creating it.
func TestOpenMustExist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo.db")
	if _, err := Open(path, &Config{MustExist: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused Open left a file behind: %v", err)
	}
	d, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp, App: "a"}); err != nil {
		t.Fatal(err)
	}
	_ = d.Close()
	d, err = Open(path, &Config{MustExist: true})
	if err != nil {
		t.Fatalf("Open of an existing file: %v", err)
	}
	defer d.Close()
	if _, err := d.Register(context.Background(), driver.RegisterParams{App: "a", Resources: []driver.Resource{{Kind: driver.ResourceType, Name: "x.y"}}}); err != nil {
		t.Fatalf("a write through MustExist: %v", err)
	}
}
