package sqlite

import (
	"context"
	"errors"

	"github.com/xadm/mensageria/driver"
)

// FOUNDATION STUB: replaced by the driver work before this lands.
var errCatalogTODO = errors.New("catalog not implemented yet")

// Register records what one app owns. See driver.Driver.
func (d *Driver) Register(ctx context.Context, p driver.RegisterParams) (driver.RegisterResult, error) {
	return driver.RegisterResult{}, errCatalogTODO
}

// Owners lists the catalog. See driver.Driver.
func (d *Driver) Owners(ctx context.Context, app string) ([]driver.Ownership, error) {
	return nil, errCatalogTODO
}

// Transfer moves one resource between apps. See driver.Driver.
func (d *Driver) Transfer(ctx context.Context, p driver.TransferParams) error {
	return errCatalogTODO
}
