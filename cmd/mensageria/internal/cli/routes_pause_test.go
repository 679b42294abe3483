package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// routes pause and resume as an operator runs them: a pause needs a
// reason, is recorded with who and why, shows in 'routes list' and
// 'status' (text and JSON); a type the catalog lacks, or one not paused,
// is refused and changes nothing; a resume lifts it.
func TestRoutesPauseAndResume(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	p := writeConfig(t, db, "mensageria", "http://127.0.0.1:1/m2m")
	c := func(stdin string, args ...string) result {
		t.Helper()
		return run(t, stdin, tokEnv, append(args, "--config", p)...)
	}
	for _, step := range [][]string{{"migrate", "up"}, {"owners", "register"}} {
		if r := c("", step...); r.code != 0 {
			t.Fatalf("%v: %+v", step, r)
		}
	}
	if r := c("", "routes", "pause", "pedido.criado"); r.code != ExitUsage || !strings.Contains(r.err, "reason") {
		t.Fatalf("a pause without --reason: %+v, want exit %d naming the reason", r, ExitUsage)
	}
	if r := c("", "routes", "pause", "nao.existe", "--reason", "x"); r.code != ExitFailure || !strings.Contains(r.err, "not in the ownership catalog") {
		t.Fatalf("pausing a type the catalog lacks: %+v", r)
	}
	if r := c("", "routes", "list"); r.code != 0 || !strings.Contains(r.out, "no type is paused") {
		t.Fatalf("routes list before any pause: %+v", r)
	}

	r := c("", "routes", "pause", "pedido.criado", "--reason", "billing upgrades until 14:00", "--by", "ana", "--json")
	var paused pausedJSON
	if err := json.Unmarshal([]byte(r.out), &paused); err != nil || r.code != 0 {
		t.Fatalf("routes pause --json: %v %+v", err, r)
	}
	if paused.Type != "pedido.criado" || paused.App == "" || paused.PausedBy != "ana" || paused.Reason != "billing upgrades until 14:00" || paused.PausedAt.IsZero() {
		t.Fatalf("routes pause recorded %+v", paused)
	}
	if r := c("", "routes", "list"); r.code != 0 || !strings.Contains(r.out, "pedido.criado") || !strings.Contains(r.out, "billing upgrades until 14:00") {
		t.Fatalf("routes list: %+v", r)
	}
	st := status(t, c).typ("pedido.criado")
	if st.Paused == nil || st.Paused.PausedBy != "ana" {
		t.Fatalf("status --json shows the type as %+v, want its pause by ana", st)
	}
	if r := c("", "status"); r.code != 0 || !strings.Contains(r.out, "pedido.criado: paused by ana") {
		t.Fatalf("status does not say who paused the type: %+v", r)
	}

	if r := c("", "routes", "resume", "pedido.criado"); r.code != 0 || !strings.Contains(r.out, "resumed pedido.criado") {
		t.Fatalf("routes resume: %+v", r)
	}
	if r := c("", "routes", "resume", "pedido.criado"); r.code != ExitFailure || !strings.Contains(r.err, "is not paused") {
		t.Fatalf("resuming a type not paused: %+v", r)
	}
	if st := status(t, c).typ("pedido.criado"); st.Paused != nil {
		t.Fatalf("status after the resume still shows %+v", st.Paused)
	}
}
