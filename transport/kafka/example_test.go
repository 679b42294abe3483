package kafka_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
	"github.com/xadm/mensageria/transport/kafka"
)

// The relay delivers each batch into Kafka as one transaction; a
// read_committed consumer reads each record back into the delivery an
// Inbox applies. (kfake, franz-go's in-process cluster, stands in for
// Kafka here.)
func ExampleTransactionalSender() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "pedidos"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	dir, _ := os.MkdirTemp("", "mensageria-example")
	defer os.RemoveAll(dir)
	drv, err := sqlite.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	defer drv.Close()
	if _, err := drv.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		panic(err)
	}
	brokers := cluster.ListenAddrs()

	// README:begin kafka
	sender, err := kafka.NewTransactionalSender(kafka.TransactionalConfig{
		Brokers:         brokers,
		TransactionalID: "mensageria-relay-pedidos", // the same on every replica of the app
		Topic:           "pedidos",
	})
	if err != nil {
		panic(err)
	}
	defer sender.Close()
	// The sender is registered once: the client also finds its election
	// hook, its transactional ids for the ownership catalog and its need
	// of the relay's settings there.
	client, err := mensageria.New(drv, &mensageria.Config{
		App:      "pedidos",
		Registry: mensageria.NewRegistry().MustRegister("pedido.criado", sender),
	})
	if err != nil {
		panic(err)
	}
	// README:end kafka
	if _, err := client.Enqueue(ctx, mensageria.Message{Type: "pedido.criado", Key: "pedido-1234", Payload: []byte(`{"total":1999}`)}); err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(context.Background())

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("pedidos"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		panic(err)
	}
	defer consumer.Close()
	for ctx.Err() == nil {
		if r := consumer.PollFetches(ctx).RecordIter(); !r.Done() {
			d, err := kafka.DeliveryOf(r.Next())
			if err != nil {
				panic(err)
			}
			fmt.Println(d.Type, d.Key, string(d.Payload), !d.CreatedAt.IsZero())
			return
		}
	}
	// Output: pedido.criado pedido-1234 {"total":1999} true
}
