package cli

import (
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
)

// FuzzPayloadArg: whatever parsePayloadArg accepts is one valid JSON
// document.
func FuzzPayloadArg(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `@p.json`, `@-`, `@`, ``, `[1,2`, ` "x" `, `@missing`, "{\"k\":\"\xff\"}"} {
		f.Add(s, []byte(`{"from":"file"}`))
	}
	f.Fuzz(func(t *testing.T, arg string, content []byte) {
		read := func(name string) ([]byte, error) {
			if name == "p.json" {
				return content, nil
			}
			return nil, fs.ErrNotExist
		}
		out, err := parsePayloadArg(arg, read, strings.NewReader(string(content)))
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("accepted invalid JSON %q from %q", out, arg)
		}
	})
}
