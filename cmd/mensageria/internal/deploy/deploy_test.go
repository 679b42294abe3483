package deploy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/xadm/mensageria/cmd/mensageria/internal/cli"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/internal/testdb"
)

var deployDir = filepath.Join("..", "..", "..", "..", "deploy")

// parseArgs checks a command line the way the command reads it: its
// flags parse (--help after them exits 0 only then).
func parseArgs(t *testing.T, args []string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := cli.Run(context.Background(), append(append([]string{}, args...), "--help"), cli.IO{Out: &out, Err: &errOut}); code != cli.ExitOK {
		t.Errorf("mensageria %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
}

// flag is the value of --name in args.
func flag(args []string, name string) string {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// unit is a systemd unit file's settings: "Section.Key" to every value.
type unit map[string][]string

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q is no setting", path, line)
			}
			u[section+"."+k] = append(u[section+"."+k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

var daemons = []string{"relay", "receive", "console"}

// TestSystemdUnitsAreHardened checks each unit's sandbox and that its
// ExecStart is a command line the binary takes.
func TestSystemdUnitsAreHardened(t *testing.T) {
	for _, d := range daemons {
		path := filepath.Join(deployDir, "systemd", "mensageria-"+d+".service")
		u := readUnit(t, path)
		for k, want := range map[string]string{
			"Service.DynamicUser":              "yes",
			"Service.ProtectSystem":            "strict",
			"Service.ProtectHome":              "yes",
			"Service.NoNewPrivileges":          "yes",
			"Service.PrivateTmp":               "yes",
			"Service.PrivateDevices":           "yes",
			"Service.CapabilityBoundingSet":    "",
			"Service.RestrictAddressFamilies":  "AF_INET AF_INET6 AF_UNIX",
			"Service.RestrictNamespaces":       "yes",
			"Service.MemoryDenyWriteExecute":   "yes",
			"Service.SystemCallArchitectures":  "native",
			"Service.RestartPreventExitStatus": "2",
			"Service.KillSignal":               "SIGTERM",
		} {
			if got := u[k]; len(got) != 1 || got[0] != want {
				t.Errorf("%s: %s=%q, want %q", path, k, got, want)
			}
		}
		if f := u["Service.SystemCallFilter"]; len(f) == 0 || f[0] != "@system-service" {
			t.Errorf("%s: SystemCallFilter=%q, want @system-service first", path, f)
		}
		exec := u["Service.ExecStart"]
		if len(exec) != 1 {
			t.Fatalf("%s: ExecStart=%q", path, exec)
		}
		args := strings.Fields(exec[0])
		if args[0] != "/usr/local/bin/mensageria" || args[1] != d {
			t.Errorf("%s: ExecStart runs %q, want /usr/local/bin/mensageria %s", path, args[:2], d)
		}
		if c := flag(args, "config"); c != "/etc/mensageria/"+d+".yaml" {
			t.Errorf("%s: --config %q", path, c)
		}
		parseArgs(t, args[1:])
	}
}

// systemdAnalyze finds systemd-analyze (scripts/tools.sh installs it), or
// skips t (fails it when CI is set).
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testdb.Unavailable(t, "systemd-analyze (package systemd; scripts/tools.sh installs it)", err)
	}
	return p
}

// TestSystemdAnalyzeVerifiesUnits runs `systemd-analyze verify` and
// `systemd-analyze security --offline` on the units, in a root of their
// own (--root): the units at /etc/systemd/system, an executable at
// /usr/local/bin/mensageria, and the system's own units that they name
// (network-online.target, multi-user.target, ...). systemd need not run.
func TestSystemdAnalyzeVerifiesUnits(t *testing.T) {
	analyze := systemdAnalyze(t)
	root := t.TempDir()
	sysUnits := ""
	for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			sysUnits = d
			break
		}
	}
	if sysUnits == "" {
		testdb.Unavailable(t, "systemd's own units (package systemd)", fmt.Errorf("no /usr/lib/systemd/system"))
	}
	copyTree(t, sysUnits, filepath.Join(root, "usr", "lib", "systemd", "system"))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, self, filepath.Join(root, "usr", "local", "bin", "mensageria"), 0o755)
	var units []string
	for _, d := range daemons {
		name := "mensageria-" + d + ".service"
		copyFile(t, filepath.Join(deployDir, "systemd", name), filepath.Join(root, "etc", "systemd", "system", name), 0o644)
		units = append(units, "/etc/systemd/system/"+name)
	}
	out, err := exec.Command(analyze, append([]string{"verify", "--root=" + root}, units...)...).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	exposure := regexp.MustCompile(`Overall exposure level for (\S+): ([0-9.]+) (\S+)`)
	for _, u := range units {
		out, err := exec.Command(analyze, "security", "--offline=yes", "--root="+root, u).CombinedOutput()
		if err != nil {
			t.Fatalf("systemd-analyze security %s: %v\n%s", u, err, out)
		}
		m := exposure.FindSubmatch(out)
		if m == nil {
			t.Fatalf("systemd-analyze security %s: no overall exposure level:\n%s", u, out)
		}
		level, _ := strconv.ParseFloat(string(m[2]), 64)
		t.Logf("%s: exposure %s %s", m[1], m[2], m[3])
		// 0 to 10, lower is better; systemd calls under 2 "OK" (a unit
		// with no sandbox at all scores 9.6 UNSAFE).
		if level >= 2 {
			t.Errorf("%s: exposure level %.1f %s, want under 2 (OK):\n%s", m[1], level, m[3], out)
		}
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, mode); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the unit files of dir (symlinks as they are: aliases).
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		switch {
		case fi.IsDir():
			return os.MkdirAll(dst, 0o755)
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, data, 0o644)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

// composeVar is compose's ${NAME:-default}; the test takes the default.
var composeVar = regexp.MustCompile(`\$\{([A-Z_][A-Z0-9_]*):-([^}]*)\}`)

// TestComposeExample checks deploy/compose.yaml as far as it can be
// without a container runtime: the relay and receive services run the
// image with command lines the binary takes, their configs exist and
// load with the command's loaders under the service's environment, the
// relay's route points at the receive service, and each daemon's health
// check asks its own /healthz and /readyz with `mensageria healthcheck`.
func TestComposeExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(deployDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for _, s := range []string{"postgres", "relay", "receive"} {
		if _, ok := cf.Services[s]; !ok {
			t.Fatalf("compose.yaml has no service %s", s)
		}
	}
	if c := cf.Services["relay"].DependsOn["receive"].Condition; c != "service_healthy" {
		t.Errorf("relay depends on receive with %q, want service_healthy", c)
	}
	for _, s := range []string{"relay", "receive"} {
		if c := cf.Services[s].DependsOn["postgres"].Condition; c != "service_healthy" {
			t.Errorf("%s depends on postgres with %q, want service_healthy", s, c)
		}
	}
	loaded := map[string]any{}
	for _, name := range []string{"relay", "receive"} {
		svc := cf.Services[name]
		if !strings.HasPrefix(svc.Image, "mensageria:") {
			t.Errorf("%s: image %q, want the mensageria image", name, svc.Image)
		}
		if len(svc.Command) < 1 || svc.Command[0] != name {
			t.Fatalf("%s: command %q", name, svc.Command)
		}
		parseArgs(t, svc.Command)
		env := map[string]string{}
		for k, v := range svc.Environment {
			env[k] = composeVar.ReplaceAllString(v, "$2")
		}
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		cfgPath := flag(svc.Command, "config")
		host := ""
		for _, v := range svc.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[1] == cfgPath {
				host = filepath.Join(deployDir, parts[0])
			}
		}
		if host == "" {
			t.Fatalf("%s: --config %s is mounted from no file", name, cfgPath)
		}
		switch name {
		case "relay":
			c, err := config.LoadConfig(host, lookup)
			if err != nil {
				t.Fatalf("%s: %v", host, err)
			}
			loaded[name] = c
		case "receive":
			c, err := config.LoadReceiveConfig(host, lookup)
			if err != nil {
				t.Fatalf("%s: %v", host, err)
			}
			loaded[name] = c
		}
		// The health check: the binary itself (no shell in the image),
		// on the --listen address, both probes.
		listen := flag(svc.Command, "listen")
		_, port, err := splitPort(listen)
		if err != nil {
			t.Fatalf("%s: --listen %q: %v", name, listen, err)
		}
		test := svc.Healthcheck.Test
		if len(test) < 5 || test[0] != "CMD" || test[1] != "mensageria" || test[2] != "healthcheck" {
			t.Fatalf("%s: healthcheck %q, want [CMD mensageria healthcheck URL...]", name, test)
		}
		paths := map[string]bool{}
		for _, raw := range test[3:] {
			u, err := url.Parse(raw)
			if err != nil || u.Port() != port {
				t.Errorf("%s: healthcheck URL %q is not on the --listen port %s", name, raw, port)
				continue
			}
			paths[u.Path] = true
		}
		if !paths["/healthz"] || !paths["/readyz"] {
			t.Errorf("%s: healthcheck asks %v, want /healthz and /readyz", name, paths)
		}
		parseArgs(t, test[1+1:])
	}
	relay := loaded["relay"].(*config.Config)
	receive := loaded["receive"].(*config.ReceiveConfig)
	if len(relay.Routes) == 0 || relay.Routes[0].HTTP == nil {
		t.Fatalf("the relay config has no http route")
	}
	u, err := url.Parse(relay.Routes[0].HTTP.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, recvPort, err := splitPort(receive.Listen)
	if err != nil {
		t.Fatal(err)
	}
	if u.Hostname() != "receive" || u.Port() != recvPort || u.Path != receive.Path {
		t.Errorf("the relay delivers to %s, the receive service listens on :%s%s", u, recvPort, receive.Path)
	}
	if relay.Routes[0].HTTP.Token.Reveal() != receive.Tokens[0] {
		t.Errorf("the relay's token is not one the receive daemon accepts")
	}
	for _, db := range []string{relay.Database, receive.Database} {
		if d, err := url.Parse(db); err != nil || d.Hostname() != "postgres" {
			t.Errorf("database %q is not the postgres service's", db)
		}
	}
}

func splitPort(addr string) (host, port string, err error) {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return "", "", fmt.Errorf("no port in %q", addr)
	}
	return addr[:i], addr[i+1:], nil
}
