package mensageria

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/guarantees.md backs every promise with the name of its test. A
// test renamed or removed would leave a promise that nothing checks, so
// every test, fuzz target, benchmark and example the document names must
// exist in one of the repository's modules; a name ending in `*` (such as
// BenchmarkKafka*) must start at least one.
func TestGuaranteesNameTestsThatExist(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("docs", "guarantees.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`\b(?:Test|Fuzz|Benchmark|Example)[A-Z][A-Za-z0-9_]*\*?`).FindAllString(string(doc), -1)
	if len(named) < 100 {
		t.Fatalf("docs/guarantees.md names %d tests; the pattern no longer finds them", len(named))
	}
	defined := map[string]bool{}
	funcs := regexp.MustCompile(`(?m)^func (?:\([^)]*\) )?((?:Test|Fuzz|Benchmark|Example)[A-Za-z0-9_]*)\(`)
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range funcs.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range named {
		if prefix, glob := strings.CutSuffix(name, "*"); glob {
			found := false
			for d := range defined {
				found = found || strings.HasPrefix(d, prefix)
			}
			if !found {
				t.Errorf("docs/guarantees.md names %s, and no test starts so", name)
			}
			continue
		}
		if !defined[name] {
			t.Errorf("docs/guarantees.md names %s, which no _test.go file defines", name)
		}
	}
}
