// Command kfake runs the benchmarks' fake Kafka cluster (franz-go's kfake:
// 3 brokers, 6 partitions per topic, topics created on first use) as a
// process of its own, on loopback ports. It prints the brokers' addresses,
// comma separated, on one line of standard output, and serves until its
// standard input is closed (at its end of file, or when the process that
// started it exits).
//
// A benchmark against an in-process kfake shares the scheduler and the
// heap with the code it measures, and hides costs a separate process on
// the network shows (the producer's linger, for one). The Kafka
// benchmarks start this program themselves (bench.StartKfakeProcess);
// by hand:
//
//	go run ./internal/bench/kfake < /dev/tty &
//	MENSAGERIA_BENCH_KAFKA_BROKERS=<printed addresses> go test -run '^$' -bench KafkaRelayDrain ./transport/kafka/
package main

import (
	"fmt"
	"os"

	"github.com/xadm/mensageria/cmd/mensageria/internal/bench"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "kfake: takes no arguments; it serves until its standard input closes")
		os.Exit(2)
	}
	if err := bench.ServeKfake(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		os.Exit(1)
	}
}
