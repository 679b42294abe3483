package release

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria/internal/testdb"
)

// The proof that a release resolves without this repository's go.work or
// any replace directive: a module proxy on disk serving the checkout's
// modules at a test version (as the public proxy serves tagged ones), then
// `go install …/cmd/mensageria@VERSION` and a consumer program, both with
// GOWORK=off. Third-party modules come from the shared module cache's
// downloads, else from the configured GOPROXY.

// installed is the command installed from the proxy, shared by the tests
// (the image test packs it).
var installed struct {
	once    sync.Once
	dir     string // the proxy's temp dir, removed by TestMain
	bin     string
	version string
	env     []string
	err     error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if installed.dir != "" {
		cleanInstall()
	}
	os.Exit(code)
}

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func goEnv(key string) (string, error) {
	out, err := exec.Command("go", "env", key).Output()
	return strings.TrimSpace(string(out)), err
}

// siblingCache is the module cache of builds against a proxy of this
// repository (scripts/gowork-off.sh keeps the same one): never the shared
// one, where a version made here would stand for that version for good.
func siblingCache() (string, error) {
	gocache, err := goEnv("GOCACHE")
	if err != nil {
		return "", err
	}
	if d := os.Getenv("MENSAGERIA_GOWORK_OFF_CACHE"); d != "" {
		return filepath.Abs(d)
	}
	return filepath.Clean(filepath.Join(gocache, "..", "mensageria-gowork-off-modcache")), nil
}

// installFromProxy builds the proxy and installs the command, once.
func installFromProxy(t *testing.T) (bin, version string, env []string) {
	t.Helper()
	testdb.Long(t, "builds the command from a module proxy")
	installed.once.Do(func() {
		installed.err = func() error {
			root := repoRoot(t)
			dir, err := os.MkdirTemp("", "mensageria-release-")
			if err != nil {
				return err
			}
			installed.dir = dir
			installed.version = fmt.Sprintf("v0.0.0-test.%d", time.Now().UnixNano())
			mods, err := Modules(root)
			if err != nil {
				return err
			}
			files, err := Files(root)
			if err != nil {
				return err
			}
			proxy := filepath.Join(dir, "proxy")
			if _, err := WriteProxy(root, proxy, installed.version, time.Now(), mods, files); err != nil {
				return err
			}
			shared, err := goEnv("GOMODCACHE")
			if err != nil {
				return err
			}
			upstream, err := goEnv("GOPROXY")
			if err != nil {
				return err
			}
			cache, err := siblingCache()
			if err != nil {
				return err
			}
			gobin := filepath.Join(dir, "bin")
			var env []string
			for _, kv := range os.Environ() {
				switch strings.SplitN(kv, "=", 2)[0] {
				case "GOWORK", "GOPROXY", "GOMODCACHE", "GONOSUMDB", "GOFLAGS", "GOBIN", "CGO_ENABLED":
					continue
				}
				env = append(env, kv)
			}
			env = append(env,
				"GOWORK=off",
				"GOPROXY=file://"+proxy+",file://"+filepath.Join(shared, "cache", "download")+","+upstream,
				"GOMODCACHE="+cache,
				// A version made here is in no checksum database; the
				// third-party modules are checked as usual.
				"GONOSUMDB="+ModulePrefix,
				"GOFLAGS=-modcacherw -trimpath",
				"GOBIN="+gobin,
				// The image's binary: static, no C library.
				"CGO_ENABLED=0",
			)
			installed.env = env
			// As scripts/image.sh installs it: no symbol table, no DWARF
			// (the build information stays).
			cmd := exec.Command("go", "install", "-ldflags=-s -w", ModulePrefix+"/cmd/mensageria@"+installed.version)
			cmd.Dir = dir // no go.mod there: what a user types anywhere
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("go install: %v\n%s", err, out)
			}
			installed.bin = filepath.Join(gobin, "mensageria")
			return nil
		}()
	})
	if installed.err != nil {
		t.Fatal(installed.err)
	}
	return installed.bin, installed.version, installed.env
}

// cleanInstall removes the proxy and what the test version put into the
// sibling module cache.
func cleanInstall() {
	os.RemoveAll(installed.dir)
	cache, err := siblingCache()
	if err != nil || installed.version == "" {
		return
	}
	for _, pattern := range []string{
		filepath.Join(cache, "github.com", "xadm", "mensageria@"+installed.version),
		filepath.Join(cache, "github.com", "xadm", "mensageria", "*", "*@"+installed.version),
		filepath.Join(cache, "github.com", "xadm", "mensageria", "*@"+installed.version),
		filepath.Join(cache, "cache", "download", "github.com", "xadm", "mensageria", "@v", installed.version+".*"),
		filepath.Join(cache, "cache", "download", "github.com", "xadm", "mensageria", "*", "@v", installed.version+".*"),
		filepath.Join(cache, "cache", "download", "github.com", "xadm", "mensageria", "*", "*", "@v", installed.version+".*"),
	} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			os.RemoveAll(m)
		}
	}
}

func TestGoInstallFromModuleProxy(t *testing.T) {
	bin, version, _ := installFromProxy(t)
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("mensageria version: %v\n%s", err, out)
	}
	t.Logf("mensageria version:\n%s", out)
	for _, want := range []string{
		"mensageria " + version + "\n",
		"module " + ModulePrefix + ": " + version + "\n",
		"module " + ModulePrefix + "/transport/kafka: " + version + "\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("mensageria version does not say %q", want)
		}
	}
}

// TestConsumerBuildsWithoutReplace builds a program of a user's module
// that imports the root package, the PostgreSQL and SQLite drivers, the
// Kafka transport and mensageriaotel at the test version: no replace, no
// workspace.
func TestConsumerBuildsWithoutReplace(t *testing.T) {
	_, version, env := installFromProxy(t)
	dir := t.TempDir()
	gomod := "module example.com/consumer\n\ngo 1.26.0\n\nrequire (\n"
	for _, m := range []string{"", "/driver/sqlite", "/transport/kafka", "/mensageriaotel"} {
		gomod += "\t" + ModulePrefix + m + " " + version + "\n"
	}
	gomod += ")\n"
	write(t, filepath.Join(dir, "go.mod"), gomod)
	write(t, filepath.Join(dir, "main.go"), `package main

import (
	"fmt"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/driver/sqlite"
	"github.com/xadm/mensageria/mensageriaotel"
	"github.com/xadm/mensageria/transport/kafka"
)

var _, _, _, _ = postgres.New, sqlite.Open, kafka.NewSender, mensageriaotel.New

func main() {
	reg := mensageria.NewRegistry()
	fmt.Println("consumer", reg != nil)
}
`)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("go", "mod", "tidy")
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("replace")) {
		t.Fatalf("the consumer's go.mod has a replace:\n%s", data)
	}
	all := run("go", "list", "-m", "all")
	for _, m := range []string{"", "/driver/sqlite", "/transport/kafka", "/mensageriaotel"} {
		if !strings.Contains(all, ModulePrefix+m+" "+version+"\n") {
			t.Errorf("go list -m all lacks %s%s %s:\n%s", ModulePrefix, m, version, all)
		}
	}
	run("go", "build", "-o", "consumer", ".")
	if out := run(filepath.Join(dir, "consumer")); out != "consumer true\n" {
		t.Fatalf("the consumer printed %q", out)
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
