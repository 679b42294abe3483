package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestImage packs the command installed from the module proxy as
// scripts/image.sh does, twice, and checks the image: the same digest
// both times, its config (user, entrypoint, labels), its files (no shell,
// nothing but the binary and what it needs), the binary static, and the
// binary from the layer runs `mensageria version`. A container runtime,
// where one works (podman, or docker with a daemon), runs the image too.
func TestImage(t *testing.T) {
	bin, version, _ := installFromProxy(t)
	binary, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	im := Image{
		Binary: binary, Version: version, Revision: "3c5b5b6f0123456789abcdef0123456789abcdef",
		Source: "https://github.com/xadm/mensageria", Created: time.Unix(1764800000, 0), Arch: "amd64",
		CACerts: []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"),
	}
	if out, err := exec.Command("go", "env", "GOARCH").Output(); err == nil {
		im.Arch = strings.TrimSpace(string(out))
	}
	dir := t.TempDir()
	d1, err := WriteImage(filepath.Join(dir, "a"), im)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := WriteImage(filepath.Join(dir, "b"), im)
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Fatalf("the same inputs gave two images: %s and %s", d1, d2)
	}
	layout := filepath.Join(dir, "a")

	var idx index
	readJSON(t, filepath.Join(layout, "index.json"), &idx)
	if len(idx.Manifests) != 1 || idx.Manifests[0].Digest != d1 || idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Fatalf("index.json: %+v", idx)
	}
	var man manifest
	readJSON(t, blob(layout, d1), &man)
	var cfg ImageConfig
	readJSON(t, blob(layout, man.Config.Digest), &cfg)
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (not root)", cfg.Config.User)
	}
	if !reflect.DeepEqual(cfg.Config.Entrypoint, []string{"mensageria"}) {
		t.Errorf("entrypoint %q", cfg.Config.Entrypoint)
	}
	if cfg.OS != "linux" || cfg.Architecture != im.Arch {
		t.Errorf("platform %s/%s", cfg.OS, cfg.Architecture)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.revision": im.Revision,
		"org.opencontainers.image.source":   im.Source,
		"org.opencontainers.image.created":  "2025-12-03T22:13:20Z",
	} {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("label %s=%q, want %q", k, got, want)
		}
	}

	// The one layer: its files, owners and modes.
	if len(man.Layers) != 1 || len(cfg.RootFS.DiffIDs) != 1 {
		t.Fatalf("%d layers, %d diff ids", len(man.Layers), len(cfg.RootFS.DiffIDs))
	}
	gz, err := os.ReadFile(blob(layout, man.Layers[0].Digest))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if digest(raw) != cfg.RootFS.DiffIDs[0] {
		t.Fatalf("the layer's diff id %s is not its content's %s", cfg.RootFS.DiffIDs[0], digest(raw))
	}
	tr := tar.NewReader(bytes.NewReader(raw))
	var names []string
	var inImage []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == ImageBinary {
			if h.Mode != 0o755 || h.Uid != 0 {
				t.Errorf("%s: mode %o uid %d, want 755 owned by root (the user cannot change it)", h.Name, h.Mode, h.Uid)
			}
			if inImage, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
		if !h.ModTime.Equal(im.Created) {
			t.Errorf("%s: time %v, want %v", h.Name, h.ModTime, im.Created)
		}
	}
	sort.Strings(names)
	want := []string{"etc/", "etc/group", "etc/passwd", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt",
		"home/", "home/nonroot/", "tmp/", "usr/", "usr/local/", "usr/local/bin/", ImageBinary, "var/", "var/lib/", "var/lib/mensageria/"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("the layer holds\n%q\nwant (no shell, nothing else)\n%q", names, want)
	}
	extracted := filepath.Join(dir, "mensageria")
	if err := os.WriteFile(extracted, inImage, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(extracted)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckStatic(f); err != nil {
		t.Errorf("the image's binary: %v", err)
	}
	f.Close()
	out, err := exec.Command(extracted, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "mensageria "+version+"\n") {
		t.Fatalf("the image's binary, run: %v\n%s", err, out)
	}

	archive := filepath.Join(dir, "image.tar")
	if err := ArchiveLayout(layout, archive, im.Created); err != nil {
		t.Fatal(err)
	}
	runInContainer(t, archive, version)
}

// runInContainer runs `mensageria version` in the image where a container
// runtime works here, and says so where none does.
func runInContainer(t *testing.T, archive, version string) {
	t.Helper()
	var load, run []string
	if p, err := exec.LookPath("podman"); err == nil {
		load = []string{p, "load", "-i", archive}
		run = []string{p, "run", "--rm", "localhost/mensageria:" + version, "version"}
	} else if p, err := exec.LookPath("docker"); err == nil && exec.Command(p, "info").Run() == nil {
		load = []string{p, "load", "-i", archive}
		run = []string{p, "run", "--rm", "mensageria:" + version, "version"}
	} else {
		t.Logf("no container runtime works here (no podman; docker without a daemon): the image's binary ran from its layer instead")
		return
	}
	if out, err := exec.Command(load[0], load[1:]...).CombinedOutput(); err != nil {
		t.Logf("%s: %v\n%s (a runtime that cannot load images here; the binary ran from the layer)", strings.Join(load, " "), err, out)
		return
	}
	out, err := exec.Command(run[0], run[1:]...).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "mensageria "+version+"\n") {
		t.Fatalf("%s: %v\n%s", strings.Join(run, " "), err, out)
	}
}

func blob(layout, d string) string {
	return filepath.Join(layout, "blobs", "sha256", strings.TrimPrefix(d, "sha256:"))
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
