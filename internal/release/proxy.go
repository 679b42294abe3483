// Package release makes what a release of the repository is made of,
// offline and with the standard library alone: a Go module proxy on disk
// (GOPROXY=file://…) serving every module of go.work at one version, as
// the public proxy would serve them from the tags, and the command's
// container image as an OCI image layout. scripts/release.sh, `make lint`
// and the tests of this package use it through tools/modproxy and
// tools/ociimage (docs/development.md, "Releases").
package release

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// ModulePrefix is the path of the core module; every other module of the
// repository is under it.
const ModulePrefix = "github.com/xadm/mensageria"

// Module is one module of the repository.
type Module struct {
	Path string // the module path, from its go.mod
	Dir  string // its directory, relative to the repository's root ("." for the core)
}

// Tag is the git tag of the module at version: vX.Y.Z for the core,
// <dir>/vX.Y.Z for a nested module (the layout the go command reads
// from a repository).
func (m Module) Tag(version string) string {
	if m.Dir == "." {
		return version
	}
	return m.Dir + "/" + version
}

// Modules reads the modules of the repository at root from its go.work
// `use` directives, the same list `make` works on.
func Modules(root string) ([]Module, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	var dirs []string
	inUse := false
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "use (":
			inUse = true
		case inUse && line == ")":
			inUse = false
		case inUse && line != "":
			dirs = append(dirs, line)
		case strings.HasPrefix(line, "use "):
			dirs = append(dirs, strings.TrimSpace(strings.TrimPrefix(line, "use ")))
		}
	}
	var mods []Module
	for _, d := range dirs {
		d = path.Clean(filepath.ToSlash(d))
		p, err := modulePath(filepath.Join(root, d, "go.mod"))
		if err != nil {
			return nil, err
		}
		mods = append(mods, Module{Path: p, Dir: d})
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("go.work in %s uses no module", root)
	}
	return mods, nil
}

func modulePath(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}

// Files lists the repository's files as a commit of the work tree would
// hold them: tracked files that still exist and untracked ones git does
// not ignore, slash-separated and relative to root, sorted. A release
// commit is clean, so there they are exactly the commit's files.
func Files(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w", root, err)
	}
	seen := map[string]bool{}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		// Only regular files go into a module zip; a tracked file deleted
		// in the work tree is not there to go.
		if fi, err := os.Lstat(filepath.Join(root, f)); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		files = append(files, f)
	}
	sort.Strings(files)
	return files, nil
}

// siblingRequire matches a requirement of one of the repository's modules
// in a go.mod: the module path and the version.
var siblingRequire = regexp.MustCompile(`(?m)^(\s*(?:require\s+)?` + regexp.QuoteMeta(ModulePrefix) + `(?:/[^\s]+)?)\s+(v[^\s]+)`)

// SetSiblingVersions returns gomod with every requirement of one of the
// repository's modules set to version (what a release commits before it
// tags).
func SetSiblingVersions(gomod []byte, version string) []byte {
	return siblingRequire.ReplaceAll(gomod, []byte("${1} "+version))
}

// SiblingVersions returns the versions gomod requires the repository's
// modules at, by module path.
func SiblingVersions(gomod []byte) map[string]string {
	vs := map[string]string{}
	for _, m := range siblingRequire.FindAllSubmatch(gomod, -1) {
		f := strings.Fields(string(m[1]))
		vs[f[len(f)-1]] = string(m[2])
	}
	return vs
}

// WriteProxy writes a module proxy into dir (a GOPROXY=file://dir) that
// serves each module of mods at version, made of files (from Files) of
// the tree at root, with its requirements of its siblings set to version
// as a release sets them. The zips hold what the go command's own zips of
// a tagged repository hold: the module's files, without nested modules'
// trees, and the repository's LICENSE when the module has none. at is the
// version's time (.info).
//
// It returns the go.sum lines of what it wrote (the modules' h1: hashes,
// as the go command computes them), so that a build against the proxy
// checks what it downloads without a checksum database, which knows
// nothing of a version made here.
func WriteProxy(root, dir, version string, at time.Time, mods []Module, files []string) ([]string, error) {
	var sums []string
	for _, m := range mods {
		s, err := writeModule(root, dir, version, at, m, mods, files)
		if err != nil {
			return nil, fmt.Errorf("module %s: %w", m.Path, err)
		}
		sums = append(sums, s...)
	}
	return sums, nil
}

func writeModule(root, dir, version string, at time.Time, m Module, mods []Module, files []string) ([]string, error) {
	esc, err := escapePath(m.Path)
	if err != nil {
		return nil, err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return nil, err
	}
	gomod, err := os.ReadFile(filepath.Join(root, m.Dir, "go.mod"))
	if err != nil {
		return nil, err
	}
	gomod = SetSiblingVersions(gomod, version)
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, at.UTC()})
	if err != nil {
		return nil, err
	}
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	prefix := m.Path + "@" + version + "/"
	contents := map[string][]byte{}
	for _, f := range moduleFiles(m, mods, files) {
		rel := f
		if m.Dir != "." {
			rel = strings.TrimPrefix(f, m.Dir+"/")
		}
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		if rel == "go.mod" {
			data = gomod
		}
		contents[prefix+rel] = data
	}
	if _, ok := contents[prefix+"LICENSE"]; !ok && m.Dir != "." {
		if data, err := os.ReadFile(filepath.Join(root, "LICENSE")); err == nil {
			contents[prefix+"LICENSE"] = data
		}
	}
	names := make([]string, 0, len(contents))
	for n := range contents {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := addZipFile(zw, n, contents[n]); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{
		version + ".info": info,
		version + ".mod":  gomod,
		version + ".zip":  zbuf.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return nil, err
		}
	}
	if err := appendList(filepath.Join(vdir, "list"), version); err != nil {
		return nil, err
	}
	return []string{
		m.Path + " " + version + " " + hash1(contents),
		m.Path + " " + version + "/go.mod " + hash1(map[string][]byte{"go.mod": gomod}),
	}, nil
}

// hash1 is the go command's h1: hash of a set of files (golang.org/x/mod's
// dirhash.Hash1): the SHA-256 of the lines "<sha256 hex>  <name>\n" of the
// files in name order.
func hash1(files map[string][]byte) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%x  %s\n", sha256.Sum256(files[n]), n)
	}
	return "h1:" + base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// moduleFiles is the part of files that is m's: under its directory and
// under no nested module's.
func moduleFiles(m Module, mods []Module, files []string) []string {
	var out []string
	for _, f := range files {
		if m.Dir != "." && !strings.HasPrefix(f, m.Dir+"/") {
			continue
		}
		if owner(f, mods) != m.Dir {
			continue
		}
		out = append(out, f)
	}
	return out
}

// owner is the directory of the innermost module holding the file f.
func owner(f string, mods []Module) string {
	best := "."
	for _, m := range mods {
		if m.Dir != "." && strings.HasPrefix(f, m.Dir+"/") && len(m.Dir) > len(best) {
			best = m.Dir
		}
	}
	return best
}

func addZipFile(zw *zip.Writer, name string, data []byte) error {
	w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate})
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

func appendList(list, version string) error {
	old, err := os.ReadFile(list)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(old))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == version {
			return nil
		}
	}
	return os.WriteFile(list, append(old, []byte(version+"\n")...), 0o644)
}

// escapePath is the go command's case-encoding of a module path in a
// proxy's URLs: an upper-case letter becomes '!' and its lower case.
func escapePath(p string) (string, error) {
	var b strings.Builder
	for _, r := range p {
		switch {
		case r == '!' || r >= 0x80:
			return "", fmt.Errorf("module path %q: not escapable here", p)
		case 'A' <= r && r <= 'Z':
			b.WriteByte('!')
			b.WriteRune(r + ('a' - 'A'))
		default:
			b.WriteRune(r)
		}
	}
	return b.String(), nil
}

// RequiredVersion is the one version at which the modules of mods require
// one another (the last release's), or an error when they disagree or
// require none.
func RequiredVersion(root string, mods []Module) (string, error) {
	version := ""
	for _, m := range mods {
		gomod, err := os.ReadFile(filepath.Join(root, m.Dir, "go.mod"))
		if err != nil {
			return "", err
		}
		for p, v := range SiblingVersions(gomod) {
			if version != "" && v != version {
				return "", fmt.Errorf("%s/go.mod requires %s at %s, another module requires a sibling at %s: run scripts/release.sh or set them alike", m.Dir, p, v, version)
			}
			version = v
		}
	}
	if version == "" {
		return "", fmt.Errorf("no module of go.work requires another")
	}
	return version, nil
}
