package natsotel_test

import (
	"github.com/xadm/mensageria/mensageriaotel"
	"github.com/xadm/mensageria/transport/nats"
	"github.com/xadm/mensageria/transport/nats/natsotel"
)

// A nats.Sink whose effect runs in each message's process span, under the
// delivery attempt that published it.
func ExampleEffect() {
	var apply nats.Effect
	var sink nats.SinkConfig                              // Conn, Stream, Consumer, Driver
	tracer := mensageriaotel.New(mensageriaotel.Config{}) // otel.GetTracerProvider()
	sink.Effect = natsotel.Effect(tracer, apply)
	_, _ = nats.NewSink(sink)
}
