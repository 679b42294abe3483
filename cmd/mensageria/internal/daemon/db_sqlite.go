package daemon

import (
	"errors"
	"io/fs"

	"github.com/xadm/mensageria/driver/sqlite"
)

// openSQLiteFile opens the SQLite database at path; unless create, only
// one that exists: a command that reads or acts on a database someone
// else created must not leave an empty file at a mistyped path.
func openSQLiteFile(path, schema string, create bool) (*DB, error) {
	drv, err := sqlite.Open(path, &sqlite.Config{Schema: schema, MustExist: !create})
	if errors.Is(err, fs.ErrNotExist) && !create {
		return nil, Fail("database sqlite:%s: the file does not exist; this command never creates it (check database: in the config; 'mensageria migrate up' creates a new one)", path)
	}
	if err != nil {
		return nil, err
	}
	return &DB{Driver: drv, SQL: drv.DB(), close: func() { _ = drv.Close() }}, nil
}
