package mensageria

import (
	"context"
	"errors"
	"fmt"

	"github.com/xadm/mensageria/driver"
)

// Ownership catalog vocabulary, re-exported from the driver seam.
type (
	// Resource is one entry of the ownership catalog.
	Resource = driver.Resource
	// ResourceKind is a kind of catalog entry.
	ResourceKind = driver.ResourceKind
	// Ownership is a catalog entry and its owning app.
	Ownership = driver.Ownership
	// OwnerConflictError says that an app claimed what another app owns;
	// errors.Is(err, ErrOwnerConflict) holds.
	OwnerConflictError = driver.OwnerConflictError
)

// The kinds of catalog entries, re-exported from the driver seam.
const (
	// ResourceType is a message type: only its owner may enqueue it and
	// only its owner's relay claims it.
	ResourceType = driver.ResourceType
	// ResourceConsumer is an inbox consumer, with its dedup window: only
	// its owner's relay purges its records.
	ResourceConsumer = driver.ResourceConsumer
	// ResourceKafkaTransactionalID is a Kafka transactional id: two apps
	// producing under one id would fence each other.
	ResourceKafkaTransactionalID = driver.ResourceKafkaTransactionalID
	// ResourceMigrations is the schema's migrations (Name MigrationsName).
	ResourceMigrations = driver.ResourceMigrations
)

// MigrationsName is the Name of the ResourceMigrations entry.
const MigrationsName = driver.MigrationsName

// Register records in the ownership catalog what this app owns: its
// registered types, its Inboxes' consumers (with their windows) and the
// resources its Senders hold (ResourceOwner), in one atomic step. Start
// calls it first, and the first Enqueue or EnqueueTx makes sure it ran,
// so an app that only enqueues needs no relay; calling it again (a
// restart, another replica) changes nothing. A resource another app owns
// fails the whole call with an *OwnerConflictError naming both apps and
// the resource, and nothing is recorded. A Registry with no types and no
// inboxes registers nothing.
//
// The result's Unlisted are resources the catalog still gives the app
// that its Registry no longer holds (Start logs them): rows of such a type
// stay pending until an operator moves the type ('mensageria owners').
func (c *Client) Register(ctx context.Context) (driver.RegisterResult, error) {
	gen := c.cfg.Registry.generation()
	res, err := c.resources()
	if err != nil || len(res) == 0 {
		if err == nil {
			c.registered.Store(gen + 1)
		}
		return driver.RegisterResult{}, err
	}
	out, err := c.drv.Register(ctx, driver.RegisterParams{App: c.cfg.App, Resources: res})
	if err != nil {
		var oce *OwnerConflictError
		if errors.As(err, &oce) {
			return out, err
		}
		return out, fmt.Errorf("mensageria: app %q: recording its ownership: %w", c.cfg.App, err)
	}
	c.registered.Store(gen + 1)
	return out, nil
}

// resources lists what this app owns: its types, its Inboxes' consumers
// and what its Senders hold, each once.
func (c *Client) resources() ([]driver.Resource, error) {
	var out []driver.Resource
	seen := map[driver.Resource]bool{}
	add := func(r driver.Resource) {
		key := driver.Resource{Kind: r.Kind, Name: r.Name}
		if !seen[key] {
			seen[key] = true
			out = append(out, r)
		}
	}
	reg := c.cfg.Registry
	for _, t := range reg.Types() {
		add(driver.Resource{Kind: driver.ResourceType, Name: t})
	}
	for _, in := range reg.Inboxes() {
		// A negative window disables the staleness check, so no record
		// may ever be purged: the catalog's zero window keeps them.
		add(driver.Resource{Kind: driver.ResourceConsumer, Name: in.Consumer(), Window: max(in.Window(), 0)})
	}
	for _, s := range reg.senders() {
		ro, ok := s.sender.(ResourceOwner)
		if !ok {
			continue
		}
		for _, r := range ro.OwnedResources() {
			switch {
			case r.Name == "":
				return nil, &ConfigError{Field: "Registry", Reason: fmt.Sprintf("the Sender of %q (%T) owns a %s resource with an empty name", s.types[0], s.sender, r.Kind)}
			case r.Kind != driver.ResourceType && r.Kind != driver.ResourceConsumer && r.Kind != driver.ResourceKafkaTransactionalID:
				return nil, &ConfigError{Field: "Registry", Reason: fmt.Sprintf("the Sender of %q (%T) owns %q of kind %q, which a Sender cannot own", s.types[0], s.sender, r.Name, r.Kind)}
			}
			add(r)
		}
	}
	return out, nil
}

// ensureRegistered makes sure this app's ownership is recorded before its
// first write. It reads the catalog first: when everything is the app's
// already (another replica, or an earlier run, registered it) nothing is
// written, which matters on a database whose write lock the caller's own
// transaction may hold (SQLite). A failure is returned, and the next call
// tries again.
func (c *Client) ensureRegistered(ctx context.Context) error {
	gen := c.cfg.Registry.generation()
	if c.registered.Load() == gen+1 {
		return nil
	}
	c.regMu.Lock()
	defer c.regMu.Unlock()
	if c.registered.Load() == gen+1 {
		return nil
	}
	res, err := c.resources()
	if err != nil {
		return err
	}
	if len(res) == 0 || c.ownsAll(ctx, res) {
		c.registered.Store(gen + 1)
		return nil
	}
	_, err = c.Register(ctx)
	return err
}

// ensureRegisteredIn is ensureRegistered for EnqueueTx: on a TxRegisterer
// backend a missing registration is recorded inside tx. It is not taken as
// done until a later call reads it back committed: the caller may still
// roll tx back.
func (c *Client) ensureRegisteredIn(ctx context.Context, tx any) error {
	tr, ok := c.drv.(driver.TxRegisterer)
	if !ok {
		return c.ensureRegistered(ctx)
	}
	gen := c.cfg.Registry.generation()
	if c.registered.Load() == gen+1 {
		return nil
	}
	res, err := c.resources()
	if err != nil {
		return err
	}
	if len(res) == 0 || c.ownsAll(ctx, res) {
		c.registered.Store(gen + 1)
		return nil
	}
	if _, err := tr.RegisterTx(ctx, tx, driver.RegisterParams{App: c.cfg.App, Resources: res}); err != nil {
		var oce *OwnerConflictError
		if errors.As(err, &oce) {
			return err
		}
		return fmt.Errorf("mensageria: app %q: recording its ownership: %w", c.cfg.App, err)
	}
	return nil
}

// ownsAll reports whether the catalog gives every one of res to this app,
// consumers with the same window. An error reads as false: Register then
// decides.
func (c *Client) ownsAll(ctx context.Context, res []driver.Resource) bool {
	owned, err := c.drv.Owners(ctx, c.cfg.App)
	if err != nil {
		return false
	}
	have := make(map[driver.Resource]bool, len(owned))
	for _, o := range owned {
		if o.App != c.cfg.App {
			continue
		}
		r := o.Resource
		if r.Kind != driver.ResourceConsumer {
			r.Window = 0
		}
		have[r] = true
	}
	for _, r := range res {
		if r.Kind != driver.ResourceConsumer {
			r.Window = 0
		}
		if !have[r] {
			return false
		}
	}
	return true
}

// warnUnlisted logs, in one line, what the catalog still gives the app
// that its Registry no longer holds: rows of such a type stay pending,
// since no relay claims them, until an operator moves the type.
func (c *Client) warnUnlisted(unlisted []driver.Ownership) {
	if len(unlisted) == 0 {
		return
	}
	var types, other []string
	for _, o := range unlisted {
		if o.Kind == driver.ResourceType {
			types = append(types, o.Name)
		} else {
			other = append(other, string(o.Kind)+" "+o.Name)
		}
	}
	msg := "the catalog gives this app resources its Registry no longer holds; rows of such a type stay pending until an operator releases it ('mensageria owners release type NAME --from APP') or hands it over ('mensageria owners transfer')"
	args := []any{"app", c.cfg.App}
	if len(types) > 0 {
		args = append(args, "types", types)
	}
	if len(other) > 0 {
		args = append(args, "other", other)
	}
	c.cfg.Logger.Warn(msg, args...)
}
