package cli

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
)

// ownModules is the path prefix of the repository's modules, whose
// versions `mensageria version` lists besides the command's own.
const ownModules = "github.com/xadm/mensageria"

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the command's module version, its VCS revision and the versions of the modules it was built from",
		Long: `version prints what the Go toolchain recorded in the binary: the module
version (v0.1.0 for 'go install …@v0.1.0', (devel) for a build from a
checkout), the VCS revision and whether the tree had uncommitted changes
(a build from a checkout with -buildvcs, the default), the Go version, and
the versions of the repository's other modules the command was built
from. Nothing is read from a config or a database.`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			info, ok := debug.ReadBuildInfo()
			if !ok {
				return daemon.Fail("this binary carries no build information")
			}
			writeVersion(a.io.Out, info)
			return nil
		}),
	}
}

// writeVersion prints info as `mensageria version` shows it: the first
// line is "mensageria VERSION", then one "name: value" line each.
func writeVersion(w io.Writer, info *debug.BuildInfo) {
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	revision := settings["vcs.revision"]
	if revision == "" {
		revision = "unknown"
	}
	if settings["vcs.modified"] == "true" {
		revision += " (modified)"
	}
	fmt.Fprintf(w, "mensageria %s\n", version)
	fmt.Fprintf(w, "revision: %s\n", revision)
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(w, "commit time: %s\n", t)
	}
	fmt.Fprintf(w, "go: %s\n", info.GoVersion)
	for _, d := range info.Deps {
		if d.Path != ownModules && !strings.HasPrefix(d.Path, ownModules+"/") {
			continue
		}
		v := d.Version
		if r := d.Replace; r != nil {
			v = r.Version
			if v == "" {
				v = "(devel, from " + r.Path + ")"
			}
		}
		fmt.Fprintf(w, "module %s: %s\n", d.Path, v)
	}
}
