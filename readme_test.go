package mensageria_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeSource is the line that stands right before a code block of the
// README: the file (from the repository's root) and the region of it that
// the block shows.
var readmeSource = regexp.MustCompile(`^<!-- code: (\S+)#(\S+) -->$`)

// readmeCompiled are the README's languages whose blocks must be tested
// code; SQL, YAML and shell blocks are reference text.
var readmeCompiled = map[string]bool{"go": true, "java": true, "js": true}

// TestReadmeCodeIsCompiledCode holds every Go, Java and JavaScript block
// of the README to be exactly a region of a compiled and tested file,
// marked there by "README:begin NAME" and "README:end NAME" comments and
// named in the README by a "<!-- code: FILE#NAME -->" line before the
// block: the Go blocks are Examples (example_readme_test.go,
// transport/kafka), the Java and Node ones the programs the polyglot
// tests run (examples/java-inbox, examples/node-inbox). With
// MENSAGERIA_UPDATE_README=1 it rewrites the README's blocks from the
// regions instead.
func TestReadmeCodeIsCompiledCode(t *testing.T) {
	if blocks := checkCodeBlocks(t, "README.md", readmeCompiled); blocks < 5 {
		t.Errorf("found %d tested blocks in README.md; the Go (2), Java (2) and Node (1) ones are expected", blocks)
	}
}

// TestMySQLDocCodeIsCompiledCode holds docs/mysql.md's Java blocks to the
// same rule: they are regions of examples/java-inbox-mariadb, the program
// tests/polyglot runs on MariaDB. (Its Go block is a sketch with
// elisions, not a program.)
func TestMySQLDocCodeIsCompiledCode(t *testing.T) {
	if blocks := checkCodeBlocks(t, "docs/mysql.md", map[string]bool{"java": true}); blocks < 2 {
		t.Errorf("found %d tested blocks in docs/mysql.md; the Java enqueue and refusal ones are expected", blocks)
	}
}

// checkCodeBlocks checks (or, with MENSAGERIA_UPDATE_README set,
// rewrites) the blocks of doc in the compiled languages against the
// regions their "<!-- code: FILE#NAME -->" lines name, FILE from the
// repository's root, and returns how many it found.
func checkCodeBlocks(t *testing.T, doc string, compiled map[string]bool) int {
	t.Helper()
	data, err := os.ReadFile(filepath.FromSlash(doc))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	update := os.Getenv("MENSAGERIA_UPDATE_README") != ""
	var out []string
	blocks := 0
	for i := 0; i < len(lines); i++ {
		out = append(out, lines[i])
		lang, ok := strings.CutPrefix(lines[i], "```")
		if !ok || lang == "" {
			continue
		}
		end := i + 1
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		if end == len(lines) {
			t.Fatalf("%s:%d: a code block that does not end", doc, i+1)
		}
		body := strings.Join(lines[i+1:end], "\n")
		if !compiled[lang] {
			out = append(out, lines[i+1:end+1]...)
			i = end
			continue
		}
		blocks++
		var m []string
		if i > 0 {
			m = readmeSource.FindStringSubmatch(lines[i-1])
		}
		if m == nil {
			t.Errorf("%s:%d: a %s block with no <!-- code: FILE#REGION --> line before it: it must be tested code", doc, i+1, lang)
			out = append(out, lines[i+1:end+1]...)
			i = end
			continue
		}
		region, err := codeRegion(m[1], m[2])
		if err != nil {
			t.Errorf("%s:%d: %v", doc, i+1, err)
			out = append(out, lines[i+1:end+1]...)
			i = end
			continue
		}
		if update {
			out = append(out, region, "```")
		} else {
			if body != region {
				t.Errorf("%s:%d: the %s block is not %s#%s; it should read:\n%s", doc, i+1, lang, m[1], m[2], region)
			}
			out = append(out, lines[i+1:end+1]...)
		}
		i = end
	}
	if update {
		if err := os.WriteFile(filepath.FromSlash(doc), []byte(strings.Join(out, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return blocks
}

// codeRegion is the text between the "README:begin name" and
// "README:end name" lines of file, less the indentation its lines share.
func codeRegion(file, name string) (string, error) {
	data, err := os.ReadFile(filepath.FromSlash(file))
	if err != nil {
		return "", err
	}
	lines := strings.Split(string(data), "\n")
	begin, end := -1, -1
	for i, l := range lines {
		switch strings.TrimSpace(l) {
		case "// README:begin " + name:
			begin = i
		case "// README:end " + name:
			end = i
		}
	}
	if begin < 0 || end < begin {
		return "", fmt.Errorf("%s has no region %q (// README:begin %s ... // README:end %s)", file, name, name, name)
	}
	region := lines[begin+1 : end]
	indent := ""
	first := true
	for _, l := range region {
		if strings.TrimSpace(l) == "" {
			continue
		}
		lead := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if first || !strings.HasPrefix(lead, indent) {
			indent = commonPrefix(indent, lead, first)
		}
		first = false
	}
	for i, l := range region {
		region[i] = strings.TrimPrefix(l, indent)
		if strings.TrimSpace(l) == "" {
			region[i] = ""
		}
	}
	return strings.Join(region, "\n"), nil
}

func commonPrefix(a, b string, first bool) string {
	if first {
		return b
	}
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return a[:n]
}
