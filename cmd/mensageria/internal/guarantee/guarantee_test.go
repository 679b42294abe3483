package guarantee

import (
	"strings"
	"testing"
)

func TestMaps(t *testing.T) {
	for _, tr := range Transports() {
		m, ok := For(tr, Options{})
		if !ok || m.Transport != tr {
			t.Fatalf("%s: %+v", tr, m)
		}
		// Every path starts in the business transaction, and the hop to
		// the transport is never claimed stronger than at-least-once.
		if m.Hops[0].From != "business transaction" || m.Hops[0].Level != ExactlyOnce || m.Hops[1].Level != AtLeastOnce {
			t.Errorf("%s hops: %+v", tr, m.Hops)
		}
		if m.EndToEnd == ExactlyOnce {
			t.Errorf("%s claims exactly-once end to end", tr)
		}
		if len(m.Defend) == 0 || m.Boundary == "" || m.Ordering != "" {
			t.Errorf("%s: %+v", tr, m)
		}
	}
	k, _ := For("kafka", Options{})
	exactly := false
	for _, h := range k.Hops {
		exactly = exactly || h.Level == ExactlyOnce && h.From == "Kafka topic"
	}
	if !exactly {
		t.Error("kafka: exactly-once inside Kafka is missing")
	}
	tx, _ := For("kafka", Options{KafkaTransactional: true})
	if tx.Hops[1].Level != ExactlyOnce || tx.EndToEnd != ExactlyOnce || tx.Boundary == k.Boundary {
		t.Errorf("kafka with a transactional id: %+v", tx)
	}
	if again, _ := For("kafka", Options{}); again.Hops[1].Level != AtLeastOnce {
		t.Error("the transactional variant changed the shared kafka map")
	}
	if h, _ := For("http", Options{KafkaTransactional: true}); h.Hops[1].Level != AtLeastOnce {
		t.Error("KafkaTransactional applies to kafka routes only")
	}
	m, _ := For("http", Options{Ordered: true, NoElection: true})
	if m.Ordering == "" {
		t.Error("ordered route without ordering text")
	}
	m.Hops[0].Level = AtLeastOnce
	if again, _ := For("http", Options{}); again.Hops[0].Level != ExactlyOnce {
		t.Error("For shares its data with callers")
	}
	if _, ok := For("smtp", Options{}); ok {
		t.Error("unknown transport accepted")
	}
}

// An at-most-once http route has its own map: no at-least-once hop and no
// effectively-once claim (nothing dedupes there), the doubt surfaced, and
// the probe, when the route has one, named as what resolves it.
func TestAtMostOnceMap(t *testing.T) {
	for _, probe := range []bool{false, true} {
		m, ok := For("http", Options{AtMostOnce: true, Reconcile: probe})
		if !ok || m.EndToEnd != AtMostOnce || m.Hops[1].Level != AtMostOnce || m.Hops[2].Level != AtMostOnce {
			t.Fatalf("probe %v: %+v", probe, m)
		}
		for _, h := range m.Hops {
			if h.Level == AtLeastOnce || h.Level == EffectivelyOnce {
				t.Errorf("probe %v: hop %s -> %s claims %s", probe, h.From, h.To, h.Level)
			}
		}
		if !strings.Contains(m.Boundary, "in doubt") || strings.Contains(m.Boundary, "reconcile probe asks") != probe {
			t.Errorf("probe %v: boundary %q", probe, m.Boundary)
		}
	}
	if m, _ := For("http", Options{}); m.EndToEnd != EffectivelyOnce || m.Hops[1].Level != AtLeastOnce {
		t.Errorf("the at-least-once map changed: %+v", m)
	}
	if m, _ := For("kafka", Options{AtMostOnce: true}); m.EndToEnd == AtMostOnce {
		t.Error("AtMostOnce applies to http routes only")
	}
}
