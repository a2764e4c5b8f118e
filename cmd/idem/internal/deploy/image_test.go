package deploy

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// caBundle is the host's CA bundle that scripts/image copies into the image.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// podman returns podman's path, failing t (never skipping it) when it is
// missing: scripts/test installs it.
func podman(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("podman")
	if err != nil {
		t.Fatal("podman is not installed: scripts/test installs it (apt-get install podman) when run as root; " +
			"install Debian's podman package and run the tests again")
	}
	return p
}

// command runs name args with env added to the environment and returns its
// stdout, failing t with its stderr when it fails.
func command(t *testing.T, env []string, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// imageConfig is the part of `podman image inspect` the test reads.
type imageConfig struct {
	Architecture string
	Os           string
	Config       struct {
		User         string
		Env          []string
		Entrypoint   []string
		Cmd          []string
		ExposedPorts map[string]struct{}
		Volumes      map[string]struct{}
		WorkingDir   string
		Labels       map[string]string
	}
}

// The Dockerfile, built by scripts/image as an operator builds it, gives a
// static, non-root image: /idem runs on a machine with nothing else, the
// volume is writable by its user, the settings make serve listen beyond
// the container, and the labels say which source it is.
func TestImage(t *testing.T) {
	t.Parallel()
	pm := podman(t)
	// As root, the images go to a store of the test's own (vfs needs no
	// kernel support), so nothing is left in the machine's store and no
	// other image is touched. Rootless podman keeps its default store.
	var env []string
	if os.Geteuid() == 0 {
		dir := t.TempDir()
		conf := filepath.Join(dir, "storage.conf")
		body := fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n",
			filepath.Join(dir, "root"), filepath.Join(dir, "run"))
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		env = []string{"CONTAINERS_STORAGE_CONF=" + conf}
	}
	version := fmt.Sprintf("test-%d", os.Getpid())
	build := exec.Command(filepath.Join("scripts", "image"), "--name", "localhost/idem-test", "--version", version)
	build.Env, build.Dir = append(os.Environ(), env...), ".."
	var stdout, stderr bytes.Buffer
	build.Stdout, build.Stderr = &stdout, &stderr
	if err := build.Run(); err != nil {
		t.Fatalf("scripts/image: %v\n%s", err, stderr.String())
	}
	out := stdout.String()
	// A clean build warns of nothing (an unconsumed TARGETARCH did).
	for line := range strings.Lines(stderr.String()) {
		if strings.Contains(strings.ToLower(line), "warn") {
			t.Errorf("the image build warns: %s", strings.TrimSpace(line))
		}
	}
	id := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	if !regexp.MustCompile(`^(sha256:)?[0-9a-f]{64}$`).MatchString(id) {
		t.Fatalf("scripts/image printed %q, want the image ID last", out)
	}
	t.Cleanup(func() {
		cmd := exec.Command(pm, "rmi", "--force", id)
		cmd.Env = append(os.Environ(), env...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("podman rmi %s: %v\n%s", id, err, b)
		}
	})

	t.Run("config", func(t *testing.T) {
		var images []imageConfig
		if err := json.Unmarshal([]byte(command(t, env, "", pm, "image", "inspect", id)), &images); err != nil || len(images) != 1 {
			t.Fatalf("podman image inspect: %v (%d images)", err, len(images))
		}
		img := images[0]
		c := img.Config
		if img.Os != "linux" || img.Architecture != runtime.GOARCH {
			t.Errorf("platform %s/%s, want linux/%s", img.Os, img.Architecture, runtime.GOARCH)
		}
		if c.User != "65532:65532" {
			t.Errorf("user %q, want 65532:65532 (non-root)", c.User)
		}
		if !slices.Equal(c.Entrypoint, []string{"/idem"}) || !slices.Equal(c.Cmd, []string{"serve"}) {
			t.Errorf("entrypoint %q cmd %q, want [/idem] [serve]", c.Entrypoint, c.Cmd)
		}
		for _, want := range []string{"IDEM_ADDR=0.0.0.0:8080", "IDEM_DB=sqlite:/data/idem.db"} {
			if !slices.Contains(c.Env, want) {
				t.Errorf("env %q lacks %s", c.Env, want)
			}
		}
		if _, ok := c.ExposedPorts["8080/tcp"]; !ok || len(c.ExposedPorts) != 1 {
			t.Errorf("exposed ports %v, want 8080/tcp", c.ExposedPorts)
		}
		if _, ok := c.Volumes["/data"]; !ok || c.WorkingDir != "/data" {
			t.Errorf("volumes %v, working dir %q: want /data for both", c.Volumes, c.WorkingDir)
		}
		head := strings.TrimSpace(command(t, nil, "..", "git", "rev-parse", "HEAD"))
		for label, want := range map[string]string{
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.revision": head,
			"org.opencontainers.image.source":   "https://github.com/idemhq/idem",
			"org.opencontainers.image.title":    "idem",
			"io.idem.image.os":                  "linux",
			"io.idem.image.arch":                runtime.GOARCH,
			"io.idem.image.platform":            "linux/" + runtime.GOARCH,
		} {
			if got := c.Labels[label]; got != want {
				t.Errorf("label %s = %q, want %q", label, got, want)
			}
		}
		tags := command(t, env, "", pm, "image", "inspect", "--format", "{{json .RepoTags}}", id)
		for _, want := range []string{"localhost/idem-test:" + version, "localhost/idem-test:latest"} {
			if !strings.Contains(tags, `"`+want+`"`) {
				t.Errorf("tags %s lack %s", strings.TrimSpace(tags), want)
			}
		}
	})

	t.Run("filesystem", func(t *testing.T) {
		files := exportImage(t, pm, env, id)
		var names []string
		for name := range files {
			names = append(names, name)
		}
		slices.Sort(names)
		want := []string{"data/", "etc/", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt", "idem"}
		if !slices.Equal(names, want) {
			t.Errorf("image files %q, want exactly %q", names, want)
		}
		if d := files["data/"]; d.hdr == nil || d.hdr.Uid != 65532 || d.hdr.Gid != 65532 || d.hdr.Mode&0o700 != 0o700 {
			t.Errorf("/data is not a directory the user 65532 can write: %+v", d.hdr)
		}
		hostCAs, err := os.ReadFile(caBundle)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(files["etc/ssl/certs/ca-certificates.crt"].body, hostCAs) {
			t.Error("the image's CA bundle is not the build machine's")
		}
		bin := files["idem"]
		if bin.hdr == nil || bin.hdr.Mode&0o111 == 0 {
			t.Fatalf("/idem is missing or not executable: %+v", bin.hdr)
		}
		path := filepath.Join(t.TempDir(), "idem")
		if err := os.WriteFile(path, bin.body, 0o755); err != nil {
			t.Fatal(err)
		}
		checkStatic(t, path)

		// The image's binary runs here as it will in the container: alone.
		help := command(t, nil, t.TempDir(), path, "--help")
		if !strings.Contains(help, "idem makes retried work happen once") || !strings.Contains(help, "idem serve") {
			t.Errorf("/idem --help:\n%s", help)
		}
		if v := command(t, nil, t.TempDir(), path, "version"); !strings.HasPrefix(v, "idem "+version+" ") || !strings.Contains(v, runtime.Version()) {
			t.Errorf("/idem version: %q", v)
		}
		// CGO is off: the SQLite driver must be the pure Go one.
		dir := t.TempDir()
		migrated := command(t, nil, dir, path, "migrate", "--db", "sqlite:"+filepath.Join(dir, "idem.db"))
		if !regexp.MustCompile(`^migrated sqlite: version (\d+) of (\d+)\n$`).MatchString(migrated) {
			t.Errorf("/idem migrate on SQLite: %q", migrated)
		}
	})
}

// file is one entry of an exported image.
type file struct {
	hdr  *tar.Header
	body []byte
}

// exportImage returns the image's files by name, read from `podman export`
// of a container created (never started) from it.
func exportImage(t *testing.T, pm string, env []string, id string) map[string]file {
	t.Helper()
	cid := strings.TrimSpace(command(t, env, "", pm, "create", id))
	defer command(t, env, "", pm, "rm", "--force", cid)
	tarball := filepath.Join(t.TempDir(), "fs.tar")
	command(t, env, "", pm, "export", "--output", tarball, cid)
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string]file{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimPrefix(hdr.Name, "/")] = file{hdr: hdr, body: body}
	}
}

// checkStatic fails t unless path is a static Linux executable for this
// machine's architecture, built as scripts/image promises.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
	if f.Machine != machine {
		t.Errorf("ELF machine %s, want %s", f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary names a dynamic loader (PT_INTERP): it is not static")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %q (%v): it is not static", libs, err)
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for key, want := range map[string]string{"CGO_ENABLED": "0", "-tags": "timetzdata", "-trimpath": "true", "GOOS": "linux"} {
		if settings[key] != want {
			t.Errorf("build setting %s = %q, want %q", key, settings[key], want)
		}
	}
}
