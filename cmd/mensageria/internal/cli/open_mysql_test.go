package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/mysql"
	"github.com/xadm/mensageria/driver/mysql/mysqltest"
	"github.com/xadm/mensageria/mensageriatest"
)

// The operator cycle on MariaDB: migrate, register, enqueue, relay to a
// receiver, all through the command.
func TestCommandsOnMySQL(t *testing.T) {
	rcv := newReceiver(t)
	db := mysqltest.Database(t)
	p := writeConfig(t, db, "mensageria", rcv.srv.URL+"/m2m")
	c := func(stdin string, args ...string) result {
		t.Helper()
		return run(t, stdin, tokEnv, append(args, "--config", p)...)
	}
	if r := c("", "migrate", "check"); r.code == 0 {
		t.Fatalf("check before up: %+v", r)
	}
	if r := c("", "migrate", "up"); r.code != 0 || !strings.Contains(r.out, "migrated") {
		t.Fatalf("up: %+v", r)
	}
	if r := c("", "migrate", "check"); r.code != 0 || !strings.Contains(r.out, "current") {
		t.Fatalf("check: %+v", r)
	}
	if r := c("", "migrate", "sql"); r.code != 0 || !strings.Contains(r.out, "SKIP LOCKED") && !strings.Contains(r.out, "CREATE TABLE IF NOT EXISTS mensageria_outbox") {
		t.Fatalf("sql: %+v", r)
	}
	if r := c("", "enqueue", "--type", "pedido.criado", "--key", "k", "--payload", "{}"); r.code != ExitUsage || !strings.Contains(r.err, "has no owner app") {
		t.Fatalf("enqueue before register: %+v", r)
	}
	if r := c("", "owners", "register"); r.code != 0 {
		t.Fatalf("owners register: %+v", r)
	}
	const n = 10
	for i := range n {
		if r := c("", "enqueue", "-t", "pedido.criado", "-k", fmt.Sprintf("p-%d", i), "-p", `{"n":1}`); r.code != 0 || !strings.Contains(r.out, "enqueued") {
			t.Fatalf("enqueue: %+v", r)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"relay", "--config", p, "--listen", "127.0.0.1:0", "--log-format", "json"}, IO{Out: &out, Err: &errb, Env: func(k string) (string, bool) { v, ok := tokEnv[k]; return v, ok }})
	}()
	waitAddr(t, &errb, done)
	mensageriatest.Eventually(t, 20*time.Second, func() bool { return rcv.keys() == n }, fmt.Sprintf("delivery of %d messages", n))
	drv, err := mysql.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	mensageriatest.Eventually(t, 10*time.Second, func() bool {
		st, err := drv.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.Type == "pedido.criado" {
				return s.Pending == 0 && s.InFlight == 0 && s.DeliveredLastHr == n && s.Owner == "pedidos"
			}
		}
		return false
	}, "the deliveries settled")
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay exited %d:\n%s", code, errb.String())
	}
}

// `mensageria receive` on MariaDB: deliveries land in the inbox queue,
// once each.
func TestReceiveOnMySQL(t *testing.T) {
	db := mysqltest.Database(t)
	drv, err := mysql.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drv.Close() })
	b := &rbackend{name: "mysql", database: db, schema: "mensageria", table: drv.Table, db: drv.DB(), drv: drv, close: func() {}}
	d := startReceive(t, receiveConfig(t, b, "  tokens: [tok-0123456789abcdef]", "1h"), nil)
	const n = 5
	var first string
	for i := range n {
		e, _ := envelope(t, "pedido.criado", fmt.Sprint("k-", i), `{"amount":1}`, time.Now())
		if i == 0 {
			first = e
		}
		if a := deliver(t, d.url, "tok-0123456789abcdef", e); a.status != 200 {
			t.Fatalf("deliver: %d %s", a.status, a.body)
		}
	}
	if a := deliver(t, d.url, "tok-0123456789abcdef", first); a.status != 200 {
		t.Fatalf("redelivery: %d %s", a.status, a.body)
	}
	if got := b.count(t, "SELECT COUNT(*) FROM "+drv.Table("inbox_queue")+" WHERE consumer = 'fat' AND state = 'pending'"); got != n {
		t.Fatalf("%d pending queue rows, want %d (one per delivery, the redelivery absorbed)", got, n)
	}
	stats, err := drv.InboxQueueStats(context.Background())
	if err != nil || len(stats) != 1 || stats[0].Consumer != "fat" || stats[0].Pending != n {
		t.Fatalf("InboxQueueStats = %+v, %v", stats, err)
	}
	var _ driver.InboxQueueReader = drv
}

// The demo on MariaDB, in process: every check of its report passes, with
// the killed relay on connections of its own.
func TestDemoMySQL(t *testing.T) {
	r := run(t, "", nil, "demo", "--messages", "300", "--db", mysqltest.Database(t))
	if r.code != 0 || !strings.Contains(r.out, "PASS") || !strings.Contains(r.out, "on MariaDB/MySQL") {
		t.Fatalf("demo exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	for _, want := range []string{"KILL pedidos#1 mid-batch", "takes over", "foreign rows untouched", "dead, with reasons"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}
