package chaos

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/xadm/mensageria/internal/testdb"
)

// EnvMessages sets the number of messages of a run; at 1,000,000 or more
// (make chaos-long) the long profile is used.
const EnvMessages = "MENSAGERIA_CHAOS_MESSAGES"

// EnvProduceFor bounds production (a Go duration): a run that cannot wait
// for all its messages still checks every one it enqueued.
const EnvProduceFor = "MENSAGERIA_CHAOS_PRODUCE_FOR"

func profileFromEnv(t *testing.T) profile {
	p := profile{
		messages:   20_000,
		minProduce: 40 * time.Second,
		lease:      3 * time.Second,
		gap:        time.Second,
		converge:   3 * time.Minute,
		backlog:    3_000,
		producers:  4,
		perTx:      8,
		dropAcks:   0.005,
		rollback:   0.05,
		poison:     0.002,
	}
	if raceEnabled {
		p.messages = 4_000
	}
	if v := os.Getenv(EnvMessages); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 {
			t.Fatalf("%s=%q: want a number of messages, at least 100", EnvMessages, v)
		}
		p.messages = n
		if n >= 1_000_000 {
			// Long: produce as fast as the relays drain, the nemesis
			// cycling all the while.
			p.minProduce = 0
			p.gap = 3 * time.Second
			p.converge = 15 * time.Minute
			p.backlog = 10_000
			p.producers = 8
			p.perTx = 16
		}
	}
	if v := os.Getenv(EnvProduceFor); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvProduceFor, v, err)
		}
		p.produceFor = d
	}
	return p
}

// TestChaos runs relays and receivers as real processes under the
// nemesis and fails on any broken promise (docs/reliability.md).
func TestChaos(t *testing.T) {
	testdb.Long(t, "fault-injection")
	runChaos(t, profileFromEnv(t), startPG(t))
}
