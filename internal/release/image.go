package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// The image's user: not root, with no login shell (the image has no shell
// at all). 65532 is the "nonroot" of distroless images, so volumes
// prepared for those fit.
const (
	ImageUID  = 65532
	ImageUser = "65532:65532"
	// ImageBinary is where the command is in the image; the image's PATH
	// is its directory, so the entrypoint names it alone.
	ImageBinary = "usr/local/bin/mensageria"
)

// Media types of an OCI image layout.
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Image is what the command's container image is made of.
type Image struct {
	Binary   []byte    // the static mensageria executable (CGO_ENABLED=0)
	CACerts  []byte    // a PEM bundle for TLS to brokers and receivers; none when nil
	Version  string    // the module version, org.opencontainers.image.version
	Revision string    // the VCS revision, org.opencontainers.image.revision
	Source   string    // the repository's URL, org.opencontainers.image.source
	Created  time.Time // every timestamp of the image (SOURCE_DATE_EPOCH): the same inputs give the same digest
	Arch     string    // GOARCH of Binary
}

// ImageConfig is the part of an OCI image configuration the image sets.
type ImageConfig struct {
	Created      string `json:"created"`
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		User       string            `json:"User"`
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd,omitempty"`
		Env        []string          `json:"Env"`
		WorkingDir string            `json:"WorkingDir"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
	} `json:"history"`
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// Labels are the image's org.opencontainers.image labels.
func (im Image) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "mensageria",
		"org.opencontainers.image.description": "Guaranteed machine-to-machine delivery: outbox relay, receive daemon, web console",
		"org.opencontainers.image.version":     im.Version,
		"org.opencontainers.image.revision":    im.Revision,
		"org.opencontainers.image.source":      im.Source,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.created":     im.Created.UTC().Format(time.RFC3339),
	}
}

// WriteImage writes im as an OCI image layout into dir (oci-layout,
// index.json, blobs/sha256/…), one layer, no base image: the executable,
// /etc/passwd and /etc/group naming its user, a writable home and /tmp,
// and the CA bundle when given. It returns the manifest's digest, which
// depends on nothing but im.
func WriteImage(dir string, im Image) (string, error) {
	if im.Arch == "" {
		return "", fmt.Errorf("image: no architecture")
	}
	layerTar, err := imageLayer(im)
	if err != nil {
		return "", err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
	if err != nil {
		return "", err
	}
	if _, err := zw.Write(layerTar); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	created := im.Created.UTC().Format(time.RFC3339)
	var cfg ImageConfig
	cfg.Created = created
	cfg.Architecture = im.Arch
	cfg.OS = "linux"
	cfg.Config.User = ImageUser
	cfg.Config.Entrypoint = []string{"mensageria"}
	cfg.Config.Cmd = []string{"--help"}
	cfg.Config.Env = []string{"PATH=/usr/local/bin"}
	if im.CACerts != nil {
		cfg.Config.Env = append(cfg.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt")
	}
	cfg.Config.WorkingDir = "/home/nonroot"
	cfg.Config.Labels = im.Labels()
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{digest(layerTar)}
	cfg.History = append(cfg.History, struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
	}{created, "tools/ociimage: mensageria " + im.Version})

	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return "", err
	}
	put := func(data []byte) (string, error) {
		d := digest(data)
		return d, os.WriteFile(filepath.Join(blobs, d[len("sha256:"):]), data, 0o644)
	}
	layerDigest, err := put(gz.Bytes())
	if err != nil {
		return "", err
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	cfgDigest, err := put(cfgJSON)
	if err != nil {
		return "", err
	}
	man, err := json.Marshal(manifest{
		SchemaVersion: 2,
		MediaType:     mediaManifest,
		Config:        descriptor{MediaType: mediaConfig, Digest: cfgDigest, Size: int64(len(cfgJSON))},
		Layers:        []descriptor{{MediaType: mediaLayer, Digest: layerDigest, Size: int64(gz.Len())}},
		Annotations:   im.Labels(),
	})
	if err != nil {
		return "", err
	}
	manDigest, err := put(man)
	if err != nil {
		return "", err
	}
	idx, err := json.Marshal(index{
		SchemaVersion: 2,
		MediaType:     mediaIndex,
		Manifests: []descriptor{{
			MediaType: mediaManifest, Digest: manDigest, Size: int64(len(man)),
			// The tag `podman load` gives it (ref.name), and `docker load`'s.
			Annotations: map[string]string{
				"org.opencontainers.image.ref.name": im.Version,
				"io.containerd.image.name":          "docker.io/library/mensageria:" + im.Version,
			},
		}},
	})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644); err != nil {
		return "", err
	}
	return manDigest, os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
}

func digest(data []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(data)) }

// imageLayer is the image's one layer, uncompressed: entries in name
// order, every timestamp im.Created, owners numeric.
func imageLayer(im Image) ([]byte, error) {
	type entry struct {
		mode int64
		uid  int
		data []byte // nil for a directory
	}
	files := map[string]entry{
		"etc/":                {mode: 0o755},
		"etc/passwd":          {mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		"etc/group":           {mode: 0o644, data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		"home/":               {mode: 0o755},
		"home/nonroot/":       {mode: 0o700, uid: ImageUID},
		"tmp/":                {mode: 0o1777},
		"usr/":                {mode: 0o755},
		"usr/local/":          {mode: 0o755},
		"usr/local/bin/":      {mode: 0o755},
		ImageBinary:           {mode: 0o755, data: im.Binary},
		"var/":                {mode: 0o755},
		"var/lib/":            {mode: 0o755},
		"var/lib/mensageria/": {mode: 0o750, uid: ImageUID},
	}
	if im.CACerts != nil {
		files["etc/ssl/"] = entry{mode: 0o755}
		files["etc/ssl/certs/"] = entry{mode: 0o755}
		files["etc/ssl/certs/ca-certificates.crt"] = entry{mode: 0o644, data: im.CACerts}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := files[n]
		h := &tar.Header{
			Name: n, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: im.Created.UTC(),
			Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(e.data)),
		}
		if e.data == nil {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ArchiveLayout writes the OCI image layout in dir as one tar file (an
// "oci-archive", what `podman load` and `docker load` take), entries in
// name order with every timestamp at.
func ArchiveLayout(dir, file string, at time.Time) error {
	var names []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(n)))
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, ModTime: at.UTC(), Size: int64(len(data)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(file, buf.Bytes(), 0o644)
}

// CheckStatic refuses an executable that needs a dynamic loader or shared
// libraries: the image has neither.
func CheckStatic(f *elf.File) error {
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("dynamically linked (has an interpreter)")
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return fmt.Errorf("needs shared libraries %v", libs)
	}
	return nil
}
