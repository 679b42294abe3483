// Command mensageria runs the relay of a transactional outbox for apps in
// any language, operates its queues, and shows the whole system in `demo`.
// The commands live in internal/cli, where they are tested; what they run
// lives beside it (internal/daemon, internal/demo, internal/console, ...).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/xadm/mensageria/cmd/mensageria/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal starts a graceful stop, a second one
		// kills the process the default way.
		<-ctx.Done()
		stop()
	}()
	code := cli.Run(ctx, os.Args[1:], cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
	stop()
	os.Exit(code)
}
