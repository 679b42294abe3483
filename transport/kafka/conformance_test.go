package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/transport/transporttest"
)

// Both senders pass the transport conformance suite against kfake: the
// plain (idempotent) one at least once, the transactional one exactly
// once for read_committed consumers.
func TestConformance(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		transporttest.Run(t, func(t *testing.T) *transporttest.Harness { return kafkaHarness(t, mode) })
	})
}

// kafkaHarness gives a suite's subtest a cluster of its own on a port
// and a data directory that outlive it, so an outage is the cluster
// closed and started again there with what it held (its topics, its
// producer ids), as a restarted broker.
func kafkaHarness(t *testing.T, mode string) *transporttest.Harness {
	port, dir := freePort(t), t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var c *kfake.Cluster
	up := func(t *testing.T) {
		t.Helper()
		var err error
		c, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(dir), kfake.SeedTopics(3, "orders"), kfake.AllowAutoTopicCreation())
		if err != nil {
			t.Fatal(err)
		}
		cl := c
		t.Cleanup(cl.Close)
	}
	up(t)
	// A cluster whose every answer about "orders" is one of Kafka's
	// refusals, for the start checks.
	refusing := func(f kfake.Fault) func(t *testing.T, log *slog.Logger) mensageria.Sender {
		return func(t *testing.T, log *slog.Logger) mensageria.Sender {
			rc := newCluster(t, "orders")
			rc.Fault(f)
			return testSender(t, mode, rc.ListenAddrs(), "orders", log)
		}
	}
	// fault lasts from Begin to End on the running cluster.
	fault := func(f kfake.Fault) (begin, end func(t *testing.T)) {
		var h *kfake.FaultHandle
		return func(*testing.T) { h = c.Fault(f) }, func(*testing.T) { h.Remove() }
	}
	missingBegin, missingEnd := fault(kfake.Fault{Topic: "orders", Err: kerr.UnknownTopicOrPartition, Count: -1})
	refusedBegin, refusedEnd := fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.TopicAuthorizationFailed, Count: -1})
	return &transporttest.Harness{
		NewSender: func(t *testing.T, log *slog.Logger) mensageria.Sender {
			return testSender(t, mode, []string{addr}, "orders", log)
		},
		Received: func(t *testing.T) []transporttest.Received {
			var out []transporttest.Received
			for _, r := range consumeAll(t, []string{addr}, "orders", true) {
				out = append(out, transporttest.Received{ID: header(r, HeaderMessageID), Key: string(r.Key), Payload: r.Value})
			}
			return out
		},
		Classify: func(err error) error { return classify("orders", 2, err) },
		Classes:  brokerErrors,
		StartRefusals: []transporttest.StartRefusal{{
			Name:      "TopicMissing",
			NewSender: refusing(kfake.Fault{Topic: "orders", Err: kerr.UnknownTopicOrPartition, Count: -1}),
			Is: func(err error) bool {
				var te *TopicError
				return errors.As(err, &te) && te.Topic == "orders" && errors.Is(err, kerr.UnknownTopicOrPartition)
			},
			Says: []string{`topic "orders"`, "UNKNOWN_TOPIC_OR_PARTITION", "create it"},
		}, {
			Name:      "TopicRefused",
			NewSender: refusing(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: "orders", Err: kerr.TopicAuthorizationFailed, Count: -1}),
			Is:        func(err error) bool { return errors.Is(err, kerr.TopicAuthorizationFailed) },
			Says:      []string{`topic "orders"`, "grant it WRITE"},
		}},
		Outage: &transporttest.Outage{
			Down:         func(*testing.T) { c.Close() },
			Up:           up,
			Says:         []string{"connection refused", addr},
			PausedSays:   []string{addr},
			StartWarning: "could not be checked at start",
		},
		RouteFaults: []transporttest.RouteFault{{
			Name: "TopicMissing", Begin: missingBegin, End: missingEnd,
			Says:       []string{`topic "orders"`, "UNKNOWN_TOPIC_OR_PARTITION", "create it"},
			PausedSays: []string{"UNKNOWN_TOPIC_OR_PARTITION"},
		}, {
			Name: "TopicAuthorizationFailed", Begin: refusedBegin, End: refusedEnd,
			Says:       []string{`topic "orders"`, "TOPIC_AUTHORIZATION_FAILED", "grant it WRITE"},
			PausedSays: []string{"TOPIC_AUTHORIZATION_FAILED"},
		}},
		// Larger than the client's largest batch (1 MB): refused by the
		// client before it is sent, as MESSAGE_TOO_LARGE.
		Poison: &transporttest.Poison{
			Payload: fmt.Appendf(nil, `{"pad":%q}`, strings.Repeat("x", 1100<<10)),
			Says:    []string{"MESSAGE_TOO_LARGE"},
		},
		Features: transporttest.Features{ExactlyOnce: mode == "transactional", OrderedPerKey: true, AtomicBatch: mode == "transactional"},
	}
}

// brokerErrors is the table of docs/config.md ("Broker errors"), answer
// by answer.
var brokerErrors = []transporttest.Class{
	{Err: kerr.UnknownTopicOrPartition, Want: transporttest.Unavailable},
	{Err: kerr.UnknownTopicID, Want: transporttest.Unavailable},
	{Err: kerr.TopicAuthorizationFailed, Want: transporttest.Unavailable},
	{Err: kerr.ClusterAuthorizationFailed, Want: transporttest.Unavailable},
	{Err: kerr.TransactionalIDAuthorizationFailed, Want: transporttest.Unavailable},
	{Err: kerr.SaslAuthenticationFailed, Want: transporttest.Unavailable},
	{Err: kerr.NotLeaderForPartition, Want: transporttest.Unavailable},
	{Err: kerr.LeaderNotAvailable, Want: transporttest.Unavailable},
	{Err: kerr.RequestTimedOut, Want: transporttest.Unavailable},
	{Err: kerr.NotEnoughReplicas, Want: transporttest.Unavailable},
	{Err: kerr.NotEnoughReplicasAfterAppend, Want: transporttest.Unavailable},
	{Err: kerr.BrokerNotAvailable, Want: transporttest.Unavailable},
	{Err: kerr.NetworkException, Want: transporttest.Unavailable},
	{Err: kerr.KafkaStorageError, Want: transporttest.Unavailable},
	{Err: kerr.CoordinatorNotAvailable, Want: transporttest.Unavailable},
	{Err: kerr.NotCoordinator, Want: transporttest.Unavailable},
	{Err: kerr.ConcurrentTransactions, Want: transporttest.Unavailable},
	{Err: kerr.ThrottlingQuotaExceeded, Want: transporttest.Unavailable},
	{Err: context.DeadlineExceeded, Want: transporttest.Unavailable},
	{Err: kgo.ErrRecordTimeout, Want: transporttest.Unavailable},
	{Err: kgo.ErrRecordRetries, Want: transporttest.Unavailable},
	{Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, Want: transporttest.Unavailable},
	{Err: fmt.Errorf("read: %w", syscall.ECONNRESET), Want: transporttest.Unavailable},
	{Err: io.EOF, Want: transporttest.Unavailable},
	{Err: &NoAckError{Topic: "orders", Waited: time.Second}, Want: transporttest.Unavailable},
	{Err: &UnreachableError{Broker: "b:9092", Err: syscall.ECONNREFUSED}, Want: transporttest.Unavailable},
	{Err: kerr.MessageTooLarge, Want: transporttest.Permanent},
	{Err: kerr.RecordListTooLarge, Want: transporttest.Permanent},
	{Err: kerr.InvalidRecord, Want: transporttest.Permanent},
	{Err: kerr.CorruptMessage, Want: transporttest.Permanent},
	{Err: kerr.InvalidTimestamp, Want: transporttest.Permanent},
	{Err: kerr.UnsupportedForMessageFormat, Want: transporttest.Permanent},
	{Err: kerr.InvalidTopicException, Want: transporttest.Permanent},
	{Err: kerr.UnknownServerError, Want: transporttest.Retryable},
	{Err: kerr.OutOfOrderSequenceNumber, Want: transporttest.Retryable},
	{Err: errors.New("something else"), Want: transporttest.Retryable},
}
