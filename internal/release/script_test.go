package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReleaseScriptTagsEveryModule runs scripts/release.sh (without its
// build step, which TestGoInstallFromModuleProxy stands for) in a clone
// of HEAD: it refuses a CHANGELOG without the version's section, then
// moves every sibling requirement and go.work replacement to the version,
// commits that, and tags each module, annotated; a second run refuses the
// existing tags.
func TestReleaseScriptTagsEveryModule(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	// The clone's commits and tags need an author, whatever the machine's
	// git config says.
	gitEnv := append(os.Environ(), "GIT_AUTHOR_NAME=release test", "GIT_AUTHOR_EMAIL=release@test",
		"GIT_COMMITTER_NAME=release test", "GIT_COMMITTER_EMAIL=release@test")
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = gitEnv
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out, err := exec.Command("git", "clone", "-q", "--no-hardlinks", root, dir).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	release := func(version string) (string, error) {
		cmd := exec.Command("bash", "scripts/release.sh", "--no-build", version)
		cmd.Dir = dir
		cmd.Env = append(gitEnv, "GOWORK=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	const version = "v0.2.0"
	if out, err := release(version); err == nil || !strings.Contains(out, "CHANGELOG.md has no") {
		t.Fatalf("a release without its CHANGELOG section: %v\n%s", err, out)
	}
	if out, err := release("0.2"); err == nil || !strings.Contains(out, "not a semantic version") {
		t.Fatalf("a release of 0.2: %v\n%s", err, out)
	}
	changelog := filepath.Join(dir, "CHANGELOG.md")
	data, err := os.ReadFile(changelog)
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), "## [Unreleased]", "## [Unreleased]\n\n## [0.2.0] - 2026-12-04", 1))
	if err := os.WriteFile(changelog, data, 0o644); err != nil {
		t.Fatal(err)
	}
	git("commit", "-q", "-am", "changelog: 0.2.0")
	out, err := release(version)
	if err != nil {
		t.Fatalf("release.sh %s: %v\n%s", version, err, out)
	}
	t.Logf("release.sh:\n%s", out)

	mods, err := Modules(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		if typ := strings.TrimSpace(git("cat-file", "-t", m.Tag(version))); typ != "tag" {
			t.Errorf("%s is a %s, want an annotated tag", m.Tag(version), typ)
		}
		gomod, err := os.ReadFile(filepath.Join(dir, m.Dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		for p, v := range SiblingVersions(gomod) {
			if v != version {
				t.Errorf("%s/go.mod requires %s at %s, want %s", m.Dir, p, v, version)
			}
		}
		if strings.Contains(string(gomod), "replace") {
			t.Errorf("%s/go.mod has a replace", m.Dir)
		}
	}
	work, err := os.ReadFile(filepath.Join(dir, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		if !strings.Contains(string(work), m.Path+" "+version+" => ") {
			t.Errorf("go.work does not replace %s %s", m.Path, version)
		}
		if strings.Contains(string(work), m.Path+" v0.1.0 =>") {
			t.Errorf("go.work still replaces %s v0.1.0", m.Path)
		}
	}
	if subject := git("log", "-1", "--format=%s"); !strings.HasPrefix(subject, "release: "+version) {
		t.Errorf("the release commit is %q", subject)
	}
	if tagged := strings.TrimSpace(git("rev-list", "-n1", version)); tagged != strings.TrimSpace(git("rev-parse", "HEAD")) {
		t.Errorf("the tag %s is not at the release commit", version)
	}
	if st := git("status", "--porcelain"); st != "" {
		t.Errorf("the tree is not clean after the release:\n%s", st)
	}
	if out, err := release(version); err == nil || !strings.Contains(out, "exists") {
		t.Fatalf("a second release of %s: %v\n%s", version, err, out)
	}
}
