package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/ops"
)

// maxPayload matches the library's limit, checked here so a huge file is
// refused before it is read whole.
const maxPayload = 16 << 20

// parsePayloadArg turns a --payload value into a JSON document: inline
// JSON, @file, or @- for standard input. Whatever it returns is valid JSON.
func parsePayloadArg(arg string, readFile func(string) ([]byte, error), stdin io.Reader) (json.RawMessage, error) {
	var b []byte
	switch {
	case arg == "":
		return json.RawMessage("{}"), nil
	case arg == "@-":
		var err error
		b, err = io.ReadAll(io.LimitReader(stdin, maxPayload+1))
		if err != nil {
			return nil, fmt.Errorf("--payload @-: reading standard input: %w", err)
		}
	case strings.HasPrefix(arg, "@"):
		if len(arg) == 1 {
			return nil, errors.New("--payload @ needs a file name (@payload.json) or - for standard input")
		}
		var err error
		b, err = readFile(arg[1:])
		if err != nil {
			return nil, fmt.Errorf("--payload %s: %w", arg, err)
		}
	default:
		b = []byte(arg)
	}
	if len(b) > maxPayload {
		return nil, fmt.Errorf("--payload is larger than %d bytes", maxPayload)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, errors.New("--payload is empty: give a JSON document, e.g. '{\"id\": 42}'")
	}
	if !json.Valid(b) {
		var v any
		err := json.Unmarshal(b, &v)
		return nil, fmt.Errorf("--payload is not valid JSON: %v", err)
	}
	return json.RawMessage(b), nil
}

const enqueueLong = `enqueue writes one message into the outbox, as an app would inside its
business transaction. The type must be one of the config's routes, and the
ownership catalog must give it to the config's app (its relay records it
when it starts, or 'mensageria owners register' does): a type with no
route, no owner or another owner fails at once with exit code 2 and
writes nothing, because no relay of this app would ever deliver it.
enqueue never records ownership itself.

--not-before schedules the message: the relay delivers it no earlier than
that instant (an RFC 3339 time, compared with the database's clock), and
promptly after it; a time already past is now.

Apps in other languages enqueue with a plain INSERT instead; the database
refuses a type that no app owns:
  INSERT INTO <schema>.outbox (type, key, payload) VALUES ('t', 'k', '{}');
and schedule one by setting available_at (PostgreSQL: a timestamptz; SQLite:
unix microseconds), never earlier than the database's now:
  INSERT INTO <schema>.outbox (type, key, payload, available_at)
  VALUES ('t', 'k', '{}', greatest('2026-12-24T18:00:00Z', clock_timestamp()));`

// enqueueOptions are the enqueue command's flags.
type enqueueOptions struct {
	typ, key, payload string
	headers           []string
	notBefore         string
	asJSON            bool
}

func (a *app) enqueueCommand() *cobra.Command {
	var opt enqueueOptions
	cmd := &cobra.Command{
		Use:   "enqueue --type T --key K [--payload JSON|@file|@-] [--not-before RFC3339]",
		Short: "Enqueue one message (for operators and tests)",
		Long:  enqueueLong,
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			return a.runEnqueue(cmd, opt)
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&opt.typ, "type", "t", "", "message type (must be routed by the config)")
	f.StringVarP(&opt.key, "key", "k", "", "natural key (receivers dedupe on it)")
	f.StringVarP(&opt.payload, "payload", "p", "", "JSON document, @file, or @- for standard input (default {})")
	f.StringArrayVarP(&opt.headers, "header", "H", nil, "header NAME=VALUE (repeatable)")
	f.StringVar(&opt.notBefore, "not-before", "", "deliver no earlier than this RFC 3339 time (2026-12-24T18:00:00Z); default now")
	f.BoolVar(&opt.asJSON, "json", false, "print JSON")
	return cmd
}

// parseNotBefore reads --not-before: empty is now, anything else an RFC
// 3339 time with its offset, so that no one's local zone is guessed.
func parseNotBefore(arg string) (time.Time, error) {
	if arg == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, arg)
	if err != nil {
		return time.Time{}, fmt.Errorf("--not-before %q is not an RFC 3339 time with an offset, such as 2026-12-24T18:00:00Z or 2026-12-24T15:00:00-03:00; nothing was enqueued", arg)
	}
	return t, nil
}

// runEnqueue enqueues the one message the flags describe, on the config's app.
func (a *app) runEnqueue(cmd *cobra.Command, opt enqueueOptions) error {
	c, err := a.loadConfig()
	if err != nil {
		return err
	}
	if opt.typ == "" || opt.key == "" {
		return daemon.Usage("enqueue needs --type and --key")
	}
	if _, ok := c.Route(opt.typ); !ok {
		return &daemon.Error{Code: daemon.ExitUsage, Err: fmt.Errorf("app %q has no route for type %q, so nothing was enqueued (routes: %s); add it to %s or use the owning app's config",
			c.App, opt.typ, strings.Join(c.Types(), ", "), a.configPath)}
	}
	body, err := parsePayloadArg(opt.payload, os.ReadFile, a.io.In)
	if err != nil {
		return &daemon.Error{Code: daemon.ExitUsage, Err: err}
	}
	notBefore, err := parseNotBefore(opt.notBefore)
	if err != nil {
		return &daemon.Error{Code: daemon.ExitUsage, Err: err}
	}
	msg := mensageria.Message{Type: opt.typ, Key: opt.key, Payload: body, NotBefore: notBefore}
	for _, h := range opt.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return daemon.Usage("--header %q: use NAME=VALUE", h)
		}
		if msg.Headers == nil {
			msg.Headers = map[string]string{}
		}
		msg.Headers[k] = v
	}
	ctx := cmd.Context()
	b, cl, err := connect(ctx, c)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Ping(ctx); err != nil {
		return err
	}
	if err := checkSchema(ctx, c, b); err != nil {
		return err
	}
	// The library's Enqueue would record the type as this app's
	// on first use; an operator's one-off enqueue must not claim
	// anything, so it checks the catalog and writes the rows
	// itself.
	p, ids, err := cl.PrepareEnqueue(msg)
	if errors.Is(err, mensageria.ErrNoSender) || errors.Is(err, mensageria.ErrInvalidMessage) {
		return &daemon.Error{Code: daemon.ExitUsage, Err: err}
	}
	if err != nil {
		return err
	}
	o, owned, err := lookupOwner(ctx, ops.New(b.Driver, ops.AllApps()), mensageria.ResourceType, opt.typ)
	switch {
	case err != nil:
		return err
	case !owned:
		return daemon.Usage("message type %q has no owner app in schema %s, so no relay would ever deliver it; nothing was enqueued (app %s records it when its relay starts, or run 'mensageria owners register --config %s' first)",
			opt.typ, c.Schema, c.App, a.configPath)
	case o.App != "" && o.App != c.App:
		return daemon.Usage("message type %q is owned by app %q, not app %q: only its owner enqueues it and only its owner's relay delivers it; nothing was enqueued", opt.typ, o.App, c.App)
	case o.App == "":
		fmt.Fprintf(a.io.Err, "note: message type %q is unclaimed (left so by the upgrade to the catalog): its rows wait until app %s's relay starts, or 'mensageria owners register'\n", opt.typ, c.App)
	}
	if err := b.Driver.Insert(ctx, p); err != nil {
		return err
	}
	out := map[string]string{"id": ids[0].String(), "type": opt.typ, "key": opt.key}
	due := ""
	if !notBefore.IsZero() {
		out["not_before"] = notBefore.UTC().Format(time.RFC3339Nano)
		due = ", not before " + out["not_before"]
	}
	if opt.asJSON {
		return json.NewEncoder(a.io.Out).Encode(out)
	}
	fmt.Fprintf(a.io.Out, "enqueued %s (type %s, key %s%s)\n", ids[0], opt.typ, opt.key, due)
	return nil
}
