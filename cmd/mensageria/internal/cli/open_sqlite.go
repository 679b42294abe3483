package cli

import (
	"github.com/xadm/mensageria/driver/sqlite"
)

func openSQLite(path, schema string) (*backend, error) {
	drv, err := sqlite.Open(path, &sqlite.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	return &backend{drv: drv, sqlDB: drv.DB(), close: func() { _ = drv.Close() }}, nil
}
