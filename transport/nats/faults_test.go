package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
	"github.com/xadm/mensageria/transport/transporttest"
)

// Beyond the suite's table (TestConformance, Classify): the errors name
// the subject no stream holds, and the missing stream.
func TestPublishErrorNamesTheDestination(t *testing.T) {
	if got := classify("", "orders.x", jetstream.ErrNoStreamResponse).Error(); !strings.Contains(got, `no stream holds subject "orders.x"`) {
		t.Errorf("a publish no stream answered: %q does not name the subject", got)
	}
	if got := classify("ORDERS", "orders.x", jetstream.ErrStreamNotFound).Error(); !strings.Contains(got, `stream "ORDERS"`) {
		t.Errorf("a missing stream: %q does not name it", got)
	}
}

// A configured stream that does not exist fails NewSender (the suite's
// StartRefused holds a stream deleted after it, and a subject no stream
// holds, to failing Start).
func TestNewSenderFailsWithoutTheStream(t *testing.T) {
	nc := connect(t)
	st, subj := newStream(t, nc, time.Minute)
	name := st.CachedInfo().Config.Name
	if _, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Subject: subj + ".x", Stream: name + "_NOT"}); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("NewSender with a missing stream: %v", err)
	}
}

// A stream full with DiscardNew refuses what it cannot store: the route's
// failure (the messages are fine), with no log line per message; the
// messages it took are delivered.
func TestFullStreamIsTheRoutesFailure(t *testing.T) {
	nc := connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("MT_FULL_%d", time.Now().UnixNano())
	if _, err := js.CreateStream(testCtx(t), jetstream.StreamConfig{Name: name, Subjects: []string{"mt." + name}, MaxMsgs: 5,
		Discard: jetstream.DiscardNew, Duplicates: time.Minute, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	log := &transporttest.LogRecords{}
	s, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Subject: "mt." + name, Stream: name, Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	var stored, refused int
	for _, d := range deliveries("order", 1, 10) {
		switch err := s.Send(testCtx(t), d); {
		case err == nil:
			stored++
		case mensageria.IsUnavailable(err):
			refused++
		default:
			t.Fatalf("a full stream's refusal classified as the message's: %v", err)
		}
	}
	if stored != 5 || refused != 5 {
		t.Fatalf("%d stored and %d refused, want 5 and 5", stored, refused)
	}
	// The outage is the relay's route breaker's to log, once when the
	// route pauses; the sender adds no line per message.
	if warns := log.Lines(slog.LevelWarn, ""); len(warns) != 0 {
		t.Fatalf("the sender logged %q", warns)
	}
}

// privateServer is a nats-server of the test's own, with JetStream on a
// store that outlives a restart, so that it can be stopped and started
// again on the same port.
type privateServer struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

func startPrivateServer(t *testing.T) *privateServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nats-server"); serr != nil {
			testdb.Unavailable(t, "the nats-server binary", err)
		}
		bin = "/usr/sbin/nats-server"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &privateServer{t: t, port: l.Addr().(*net.TCPAddr).Port, dir: t.TempDir()}
	l.Close()
	p.start(bin)
	t.Cleanup(p.stop)
	return p
}

func (p *privateServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.port) }

func (p *privateServer) start(bin string) {
	p.t.Helper()
	p.cmd = exec.Command(bin, "-a", "127.0.0.1", "-p", fmt.Sprint(p.port), "-js", "-sd", p.dir)
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	var lastErr error
	mensageriatest.Eventually(p.t, 20*time.Second, func() bool {
		nc, err := natsgo.Connect(p.url(), natsgo.Timeout(time.Second))
		if err == nil {
			js, _ := jetstream.New(nc)
			_, err = js.AccountInfo(testCtx(p.t))
			nc.Close()
		}
		lastErr = err
		return err == nil
	}, "the private nats-server on %d to start: %s", p.port, func() string { return fmt.Sprint(lastErr) })
}

func (p *privateServer) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}
