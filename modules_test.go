package mensageria

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The repository holds several modules, each versioned on its own (the
// core, the SQLite and MySQL drivers, the Kafka and NATS transports and their otel
// modules, mensageriaotel, the command). A module that imports another's
// internal/ package compiles here, where the directories nest, but binds
// itself to code the other module may change in any release; what the
// modules share is public in the core (m2mwire, m2mbatch, httpguard,
// mensageriatest/pgserver, mensageriatest/serverproc). Only the packages' own imports are checked:
// tests may still use the core's test helpers (internal/testdb,
// internal/testsignal).
func TestNoModuleImportsAnotherModulesInternal(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	modules := map[string]string{} // module path → directory
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			if mod := modulePath(t, path); mod != "" {
				modules[mod] = filepath.Dir(path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(modules) < 6 {
		t.Fatalf("found only %d modules: %v", len(modules), modules)
	}
	owner := func(pkg string) string {
		best := ""
		for mod := range modules {
			if (pkg == mod || strings.HasPrefix(pkg, mod+"/")) && len(mod) > len(best) {
				best = mod
			}
		}
		return best
	}
	checked := 0
	for mod, dir := range modules {
		// In workspace mode ./... stops at a nested module's go.mod: each
		// listing is that module's packages alone.
		cmd := exec.Command(goBin, "list", "-e", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", dir, err)
		}
		for line := range strings.Lines(string(out)) {
			fields := strings.Fields(line)
			if len(fields) == 0 {
				continue
			}
			pkg := fields[0]
			if owner(pkg) != mod {
				t.Errorf("go list in %s named %s, a package of module %s", dir, pkg, owner(pkg))
			}
			checked++
			for _, imp := range fields[1:] {
				if !strings.Contains(imp+"/", "/internal/") {
					continue
				}
				if other := owner(imp); other != "" && other != mod {
					t.Errorf("%s (module %s) imports %s, internal to module %s", pkg, mod, imp, other)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d packages", checked)
	}
}

// modulePath reads the module line of a go.mod file.
func modulePath(t *testing.T, gomod string) string {
	t.Helper()
	f, err := os.Open(gomod)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}
