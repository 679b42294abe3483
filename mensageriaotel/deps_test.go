package mensageriaotel_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/xadm/mensageria/internal/testdb"
)

// goList runs the go command with args and returns its output's fields.
func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		testdb.Unavailable(t, "the go command", err)
	}
	cmd := exec.Command(goBin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.Fields(string(out))
}

// TestCoreDoesNotDependOnOpenTelemetry: the library's own packages (the
// root, the drivers, the transports) build without OpenTelemetry, API or
// SDK; only this package, the transports' otel modules (kafkaotel,
// natsotel) and the daemon bring it in.
func TestCoreDoesNotDependOnOpenTelemetry(t *testing.T) {
	var core []string
	for _, p := range goList(t, ".", "list", "github.com/xadm/mensageria/transport/...") {
		if !strings.HasSuffix(p, "otel") {
			core = append(core, p)
		}
	}
	pkgs := goList(t, ".", append([]string{"list", "-deps",
		"github.com/xadm/mensageria",
		"github.com/xadm/mensageria/driver/..."}, core...)...)
	if len(pkgs) < 10 {
		t.Fatalf("go list named only %d packages: %s", len(pkgs), pkgs)
	}
	for _, p := range pkgs {
		if strings.Contains(p, "opentelemetry") {
			t.Errorf("a core package depends on %s", p)
		}
	}
}

// TestHTTPOnlyTracingPullsInNoBroker: a program that relays over HTTP
// and traces with this package builds no package of franz-go or nats.go,
// and this module requires neither them nor the Kafka and NATS
// transports: the brokers' tracing lives beside each transport, in
// transport/kafka/kafkaotel and transport/nats/natsotel (ADR 0027).
func TestHTTPOnlyTracingPullsInNoBroker(t *testing.T) {
	pkgs := goList(t, ".", "list", "-deps",
		"github.com/xadm/mensageria",
		"github.com/xadm/mensageria/driver/postgres",
		"github.com/xadm/mensageria/transport/m2mhttp",
		"github.com/xadm/mensageria/mensageriaotel")
	seen := false
	for _, p := range pkgs {
		seen = seen || strings.HasPrefix(p, "go.opentelemetry.io/otel/trace")
		if isBroker(p) {
			t.Errorf("an HTTP-only program with tracing builds %s", p)
		}
	}
	if !seen {
		t.Fatalf("go list -deps named no OpenTelemetry package: %v", pkgs)
	}

	var mod struct{ Require []struct{ Path string } }
	out := goList(t, ".", "mod", "edit", "-json")
	if err := json.Unmarshal([]byte(strings.Join(out, " ")), &mod); err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	if len(mod.Require) == 0 {
		t.Fatal("go.mod requires nothing: read the wrong file?")
	}
	for _, r := range mod.Require {
		if isBroker(r.Path) {
			t.Errorf("mensageriaotel's go.mod requires %s", r.Path)
		}
	}
}

// isBroker tells a package or module of a broker's client, or of the
// transports over them.
func isBroker(path string) bool {
	for _, prefix := range []string{"github.com/twmb/franz-go", "github.com/nats-io/", "github.com/xadm/mensageria/transport/kafka", "github.com/xadm/mensageria/transport/nats"} {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}
