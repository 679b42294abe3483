package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/mensageriatest"
)

func consoleFile(t *testing.T, block string) string {
	t.Helper()
	return writeFile(t, fmt.Sprintf("database: sqlite:%s\napp: pedidos\nroutes:\n  - type: pedido.criado\n    http: {url: http://127.0.0.1:1/m2m, token: ${TEST_TOKEN}}\n%s",
		filepath.Join(t.TempDir(), "m.db"), block))
}

var consoleAddr = regexp.MustCompile(`"msg":"console serving","addr":"([^"]+)"`)

// The console command serves the console of the config's database behind
// the token from the environment, and never shows the token.
func TestConsoleCommandServesBehindTheConfiguredToken(t *testing.T) {
	env := map[string]string{"TEST_TOKEN": "tok", "CONSOLE_TOKEN": "a-console-token-of-the-env"}
	cfg := consoleFile(t, "console:\n  token: ${CONSOLE_TOKEN}\n  read_only: true\n")
	must(t, "migrate up", run(t, "", env, "migrate", "up", "--config", cfg), 0)
	must(t, "owners register", run(t, "", env, "owners", "register", "--config", cfg), 0)
	must(t, "enqueue", run(t, "", env, "enqueue", "-t", "pedido.criado", "-k", "p-1", "--config", cfg), 0)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"console", "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json"},
			IO{Out: io.Discard, Err: &errb, Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	}()
	var addr string
	mensageriatest.Eventually(t, 20*time.Second, func() bool {
		select {
		case code := <-done:
			t.Fatalf("console exited %d: %s", code, errb.String())
		default:
		}
		if m := consoleAddr.FindStringSubmatch(errb.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	}, "the console to listen")
	get := func(auth string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/api/overview", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get(""); code != 401 || !strings.Contains(body, `"code":"unauthorized"`) {
		t.Fatalf("without the token: %d %s", code, body)
	}
	if code, _ := get("Bearer ${CONSOLE_TOKEN}"); code != 401 {
		t.Fatalf("the unexpanded reference is not the token: %d", code)
	}
	code, body := get("Bearer " + env["CONSOLE_TOKEN"])
	var ov struct {
		ReadOnly bool `json:"read_only"`
		Types    []struct {
			Type    string `json:"type"`
			Owner   string `json:"owner"`
			Pending int64  `json:"pending"`
		} `json:"types"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &ov) != nil || !ov.ReadOnly || len(ov.Types) != 1 || ov.Types[0].Pending != 1 || ov.Types[0].Owner != "pedidos" {
		t.Fatalf("with the token: %d %s", code, body)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("console exit %d: %s", code, errb.String())
	}
	if strings.Contains(errb.String(), env["CONSOLE_TOKEN"]) {
		t.Fatalf("the log shows the token: %s", errb.String())
	}
}

func TestConsoleConfigRefusals(t *testing.T) {
	env := map[string]string{"TEST_TOKEN": "tok"}
	for _, c := range []struct{ block, want string }{
		{"", "console: block missing"},
		{"console: {listen: 127.0.0.1:0}\n", "needs token:"},
		{"console: {token: short}\n", "console.token: at least 16 characters"},
		{"console: {token: ${NOPE_TOKEN}}\n", "environment variable NOPE_TOKEN is not set"},
		{"console: {user: ops}\n", "basic auth needs both"},
		{"console: {user: ops, password: tiny}\n", "console.password: at least 12"},
		{"console: {token: 0123456789abcdef0, listen: nowhere}\n", "is not host:port"},
		{"console: {token: 0123456789abcdef0, read_only: maybe}\n", "is not true or false"},
		{"console: {token: 0123456789abcdef0, tokn: x}\n", `unknown key "tokn"`},
	} {
		cfg := consoleFile(t, c.block)
		must(t, c.block, run(t, "", env, "console", "--config", cfg), ExitUsage, c.want)
	}
}

// The console block of docs/config.md is a valid block that means what
// its comments say.
func TestDocumentedConsoleExample(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, part, ok := strings.Cut(string(doc), "\n## The web console")
	if !ok {
		t.Fatal("docs/config.md has no ## The web console")
	}
	_, ex, ok := strings.Cut(part, "```yaml\n")
	if !ok {
		t.Fatal("no yaml example under ## The web console")
	}
	ex, _, _ = strings.Cut(ex, "```")
	env := envOf("MENSAGERIA_CONSOLE_TOKEN", "a-token-of-24-characters", "MENSAGERIA_CONSOLE_PASSWORD", "a long password")
	c, err := config.ParseConfig("docs/config.md", []byte("database: sqlite:/x\napp: a\nroutes:\n  - type: t\n    http: {url: http://h/m2m, token: x}\n"+ex), env)
	if err != nil {
		t.Fatal(err)
	}
	cc := c.Console
	if cc == nil || cc.Listen != defaultConsoleListen || cc.Token.Reveal() != "a-token-of-24-characters" || cc.User != "ops" || cc.Password.Reveal() != "a long password" || cc.ReadOnly || cc.AllApps || cc.SecureCookie {
		t.Fatalf("console block %+v", cc)
	}
	if s := fmt.Sprintf("%v %+v", cc, *cc); strings.Contains(s, "a-token-of-24") || strings.Contains(s, "a long password") {
		t.Fatalf("the block prints its secrets: %s", s)
	}
}
