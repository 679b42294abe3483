// Command ociimage writes mensageria's container image, from a static
// binary of the command, as an OCI image layout (and, with -tar, as one
// tar file for `podman load` / `docker load`): no registry, no daemon, no
// base image. The same inputs and SOURCE_DATE_EPOCH give the same digest.
// scripts/image.sh builds the binary from the module proxy and runs it.
//
//	go run ./tools/ociimage -binary BIN -version vX.Y.Z -revision REV -out DIR [-tar FILE] [-ca-certs FILE]
package main

import (
	"debug/elf"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/xadm/mensageria/internal/release"
)

func main() {
	binary := flag.String("binary", "", "the static mensageria executable")
	version := flag.String("version", "", "the module version (label org.opencontainers.image.version)")
	revision := flag.String("revision", "", "the VCS revision (label org.opencontainers.image.revision)")
	source := flag.String("source", "https://github.com/xadm/mensageria", "the repository (label org.opencontainers.image.source)")
	caCerts := flag.String("ca-certs", "", "a PEM CA bundle to ship as /etc/ssl/certs/ca-certificates.crt (none by default)")
	out := flag.String("out", "", "the OCI image layout's directory (created)")
	tarFile := flag.String("tar", "", "also write the layout as this tar file")
	flag.Parse()
	if *binary == "" || *version == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "ociimage: -binary, -version and -out are required")
		os.Exit(2)
	}
	if err := run(*binary, *version, *revision, *source, *caCerts, *out, *tarFile); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(binary, version, revision, source, caCerts, out, tarFile string) error {
	created := time.Unix(0, 0)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
		}
		created = time.Unix(n, 0)
	}
	im := release.Image{Version: version, Revision: revision, Source: source, Created: created}
	var err error
	if im.Binary, err = os.ReadFile(binary); err != nil {
		return err
	}
	if im.Arch, err = goarch(binary); err != nil {
		return err
	}
	if caCerts != "" {
		if im.CACerts, err = os.ReadFile(caCerts); err != nil {
			return err
		}
	}
	d, err := release.WriteImage(out, im)
	if err != nil {
		return err
	}
	if tarFile != "" {
		if err := release.ArchiveLayout(out, tarFile, created); err != nil {
			return err
		}
	}
	fmt.Println(d)
	return nil
}

// goarch is the image's architecture: the binary's.
func goarch(binary string) (string, error) {
	f, err := elf.Open(binary)
	if err != nil {
		return "", fmt.Errorf("%s: not a Linux executable: %w", binary, err)
	}
	defer f.Close()
	if err := release.CheckStatic(f); err != nil {
		return "", fmt.Errorf("%s: %w (build it with CGO_ENABLED=0)", binary, err)
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	}
	return "", fmt.Errorf("%s: machine %v not supported", binary, f.Machine)
}
