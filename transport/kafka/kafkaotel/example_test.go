package kafkaotel_test

import (
	"github.com/xadm/mensageria/mensageriaotel"
	"github.com/xadm/mensageria/transport/kafka"
	"github.com/xadm/mensageria/transport/kafka/kafkaotel"
)

// A kafka.Sink whose effect runs in each message's process span, under
// the delivery attempt that produced the record.
func ExampleEffect() {
	var apply kafka.Effect
	tracer := mensageriaotel.New(mensageriaotel.Config{}) // otel.GetTracerProvider()
	_, _ = kafka.NewSink(kafka.SinkConfig{
		Brokers: []string{"localhost:9092"}, Group: "billing", Topics: []string{"orders"},
		Effect: kafkaotel.Effect(tracer, apply),
	})
}
