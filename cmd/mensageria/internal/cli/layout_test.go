package cli

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The command is a shell over the library: its cobra commands and the
// console speak the root package's and ops' vocabulary, and only daemon
// (opening a database) and the relay's and receiver's own packages reach
// the driver seam (docs/architecture.md, "The command's layout").
func TestCLIAndConsoleImportNoDriver(t *testing.T) {
	for _, dir := range []string{".", "../console"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for _, imp := range parsed.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if path == "github.com/xadm/mensageria/driver" || strings.HasPrefix(path, "github.com/xadm/mensageria/driver/") {
					t.Errorf("%s imports %s: name it through ops, the root package or daemon", f, path)
				}
			}
		}
		if checked == 0 {
			t.Fatalf("no Go file read in %s", dir)
		}
	}
}
