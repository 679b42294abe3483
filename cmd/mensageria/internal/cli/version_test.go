package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionPrintsModuleVersionAndRevision(t *testing.T) {
	info := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/xadm/mensageria/cmd/mensageria", Version: "v0.1.0"},
		Deps: []*debug.Module{
			{Path: "github.com/xadm/mensageria", Version: "v0.1.0"},
			{Path: "github.com/xadm/mensageria/driver/sqlite", Version: "v0.0.0-00010101000000-000000000000", Replace: &debug.Module{Path: "../../driver/sqlite"}},
			{Path: "github.com/spf13/cobra", Version: "v1.10.2"},
		},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "3c5b5b6f00"},
			{Key: "vcs.time", Value: "2026-12-04T17:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	var out bytes.Buffer
	writeVersion(&out, info)
	want := `mensageria v0.1.0
revision: 3c5b5b6f00 (modified)
commit time: 2026-12-04T17:00:00Z
go: go1.26.8
module github.com/xadm/mensageria: v0.1.0
module github.com/xadm/mensageria/driver/sqlite: (devel, from ../../driver/sqlite)
`
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}

	out.Reset()
	writeVersion(&out, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0"}})
	if !strings.HasPrefix(out.String(), "mensageria v0.2.0\nrevision: unknown\n") {
		t.Fatalf("a build without VCS information:\n%s", out.String())
	}
}

func TestVersionCommandRuns(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"version"}, IO{Out: &out, Err: &errOut}); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "mensageria ") || !strings.Contains(out.String(), "\ngo: go1.") {
		t.Fatalf("version printed:\n%s", out.String())
	}
	if code := Run(context.Background(), []string{"version", "extra"}, IO{Out: &out, Err: &errOut}); code != ExitUsage {
		t.Fatalf("version with an argument: exit %d, want %d", code, ExitUsage)
	}
}

func TestHealthcheckCommand(t *testing.T) {
	ready := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && !ready {
			http.Error(w, "route pedido.criado paused", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	if code := Run(context.Background(), []string{"healthcheck", srv.URL + "/healthz", srv.URL + "/readyz"}, IO{Out: &out, Err: &errOut}); code != ExitOK {
		t.Fatalf("both answer 200: exit %d: %s", code, errOut.String())
	}
	ready = false
	errOut.Reset()
	if code := Run(context.Background(), []string{"healthcheck", srv.URL + "/healthz", srv.URL + "/readyz"}, IO{Out: &out, Err: &errOut}); code != ExitFailure {
		t.Fatalf("/readyz answers 503: exit %d, want %d", code, ExitFailure)
	}
	if !strings.Contains(errOut.String(), "503") || !strings.Contains(errOut.String(), "paused") {
		t.Fatalf("the refusal does not say why: %s", errOut.String())
	}
	if code := Run(context.Background(), []string{"healthcheck"}, IO{Out: &out, Err: &errOut}); code != ExitUsage {
		t.Fatalf("no URL: exit %d, want %d", code, ExitUsage)
	}
}
