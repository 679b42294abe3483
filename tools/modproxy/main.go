// Command modproxy writes a Go module proxy on disk that serves every
// module of the repository's go.work, made of the work tree's files (as a
// commit of it would hold them), at one version, with the modules'
// requirements of one another set to that version: what the public proxy
// would serve once the release script has tagged that version. Point
// GOPROXY=file://DIR at it (before the usual proxy) to build a module with
// GOWORK=off against its siblings as they are in the tree.
//
//	go run ./tools/modproxy -out DIR [-version vX.Y.Z] [-gosum FILE]
//
// Without -version it serves the version the modules require of one
// another in their go.mod files (the last release's). It prints the
// version served; -gosum writes the go.sum lines of the modules served, for
// a build that checks them without a checksum database.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/xadm/mensageria/internal/release"
)

func main() {
	root := flag.String("root", ".", "the repository's root (where go.work is)")
	out := flag.String("out", "", "the proxy's directory (created)")
	version := flag.String("version", "", "the version to serve (default: the one the modules require of one another)")
	gosum := flag.String("gosum", "", "also write the go.sum lines of the modules served to this file")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "modproxy: -out is required")
		os.Exit(2)
	}
	if err := run(*root, *out, *version, *gosum); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(root, out, version, gosum string) error {
	mods, err := release.Modules(root)
	if err != nil {
		return err
	}
	if version == "" {
		if version, err = release.RequiredVersion(root, mods); err != nil {
			return err
		}
	}
	files, err := release.Files(root)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	sums, err := release.WriteProxy(root, abs, version, time.Now(), mods, files)
	if err != nil {
		return err
	}
	if gosum != "" {
		if err := os.WriteFile(gosum, []byte(strings.Join(sums, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Println(version)
	return nil
}
