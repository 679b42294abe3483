// Command kfake runs franz-go's fake Kafka cluster (kfake) as a process of
// its own, on loopback ports, and prints the brokers' addresses, comma
// separated, on one line of standard output; it runs until interrupted.
//
// A benchmark against an in-process kfake shares the scheduler and the
// heap with the code it measures, and hides costs a separate process on
// the network shows (the producer's linger, for one). Run it beside the
// benchmarks:
//
//	go run ./internal/bench/kfake &
//	MENSAGERIA_BENCH_KAFKA_BROKERS=<printed addresses> go test -run '^$' -bench KafkaRelayDrain ./transport/kafka/
//	go run ./cmd/mensageria bench --scenario kafka --kafka-brokers <printed addresses>
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	brokers := flag.Int("brokers", 3, "brokers in the cluster")
	partitions := flag.Int("partitions", 6, "partitions of an auto-created topic")
	port := flag.Int("port", 0, "first broker's port (the others follow it); 0 picks free ports")
	autoCreate := flag.Bool("auto-create", true, "create topics on first use")
	flag.Parse()
	if *brokers < 1 || *partitions < 1 || *port < 0 || *port > 65535-*brokers {
		fmt.Fprintln(os.Stderr, "kfake: -brokers and -partitions must be at least 1, -port a free range")
		os.Exit(2)
	}
	opts := []kfake.Opt{kfake.NumBrokers(*brokers), kfake.DefaultNumPartitions(*partitions)}
	if *autoCreate {
		opts = append(opts, kfake.AllowAutoTopicCreation())
	}
	if *port > 0 {
		ports := make([]int, *brokers)
		for i := range ports {
			ports[i] = *port + i
		}
		opts = append(opts, kfake.Ports(ports...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		os.Exit(1)
	}
	fmt.Println(strings.Join(c.ListenAddrs(), ","))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	c.Close()
}
