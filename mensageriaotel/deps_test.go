package mensageriaotel_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/xadm/mensageria/internal/testdb"
)

// TestCoreDoesNotDependOnOpenTelemetry: the library's own packages (the
// root, the drivers, the transports) build without OpenTelemetry, API or
// SDK; only this package and the daemon bring it in.
func TestCoreDoesNotDependOnOpenTelemetry(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		testdb.Unavailable(t, "the go command", err)
	}
	out, err := exec.Command(goBin, "list", "-deps",
		"github.com/xadm/mensageria",
		"github.com/xadm/mensageria/driver/...",
		"github.com/xadm/mensageria/transport/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 10 {
		t.Fatalf("go list named only %d packages: %s", len(pkgs), out)
	}
	for _, p := range pkgs {
		if strings.Contains(p, "opentelemetry") {
			t.Errorf("a core package depends on %s", p)
		}
	}
}
