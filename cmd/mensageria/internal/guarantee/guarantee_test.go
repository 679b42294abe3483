package guarantee

import "testing"

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
