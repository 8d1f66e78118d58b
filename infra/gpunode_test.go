// Package infra holds the deployment's infrastructure as code; its tests check that the
// pieces agree with each other and with the binaries they run.
package infra

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/upstream"
	"gopkg.in/yaml.v3"
)

type cloudConfig struct {
	WriteFiles []struct {
		Path        string `yaml:"path"`
		Permissions string `yaml:"permissions"`
		Content     string `yaml:"content"`
	} `yaml:"write_files"`
	Runcmd [][]string `yaml:"runcmd"`
	Users  []struct {
		Name string `yaml:"name"`
	} `yaml:"users"`
}

// unitValue is the value of key in a systemd unit, continuation lines joined.
func unitValue(unit, key string) string {
	joined := strings.ReplaceAll(unit, "\\\n", " ")
	for _, line := range strings.Split(joined, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// The GPU-node bootstrap installs exactly the unit file kept beside it, with the agent's
// secrets in a file only root reads, and starts it.
func TestCloudInitInstallsTheAgentUnit(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("gpu-node", "cloud-init.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(raw), "#cloud-config\n") {
		t.Fatal("cloud-init.yaml must start with #cloud-config, or cloud-init ignores it")
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(raw, &cc); err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(filepath.Join("gpu-node", "hostedtrain-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	perms := map[string]string{}
	for _, f := range cc.WriteFiles {
		files[f.Path], perms[f.Path] = f.Content, f.Permissions
	}
	if files["/etc/systemd/system/hostedtrain-agent.service"] != string(unit) {
		t.Error("cloud-init.yaml's copy of the unit differs from gpu-node/hostedtrain-agent.service")
	}
	env := files["/etc/hostedtrain/agent.env"]
	if perms["/etc/hostedtrain/agent.env"] != "0600" || !strings.Contains(env, "HOSTEDTRAIN_AGENT_TOKEN=") {
		t.Errorf("agent.env: mode %q; it holds the agent token and must be 0600", perms["/etc/hostedtrain/agent.env"])
	}
	// Every variable the unit expands is set in agent.env.
	for _, m := range regexp.MustCompile(`\$\{(\w+)\}`).FindAllStringSubmatch(string(unit), -1) {
		if !strings.Contains(env, "\n"+m[1]+"=") && !strings.HasPrefix(env, m[1]+"=") {
			t.Errorf("the unit expands ${%s}, which agent.env does not set", m[1])
		}
	}
	// The agent runs as root (it gives each job slot its own user and network) and jobs run
	// in its sandbox, never without it.
	if u := unitValue(string(unit), "User"); u != "root" {
		t.Errorf("the unit runs as %q; the sandbox needs the agent to run as root", u)
	}
	if strings.Contains(string(unit), "unsafe-no-sandbox") {
		t.Error("the unit turns the sandbox off")
	}
	last := cc.Runcmd[len(cc.Runcmd)-1]
	if strings.Join(last, " ") != "systemctl enable --now hostedtrain-agent.service" {
		t.Errorf("the bootstrap ends with %v, not starting the agent", last)
	}
}

// The unit's command line is one the agent accepts, and systemd waits long enough for a drain.
func TestTheAgentUnitMatchesTheAgent(t *testing.T) {
	t.Parallel()
	unit, err := os.ReadFile(filepath.Join("gpu-node", "hostedtrain-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "gpuagent")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/hostedtrain/hostedtrain/cmd/gpuagent").CombinedOutput(); err != nil {
		t.Fatalf("build gpuagent: %v\n%s", err, out)
	}
	help, _ := exec.Command(bin, "-h").CombinedOutput() // -h exits 2 after printing the flags
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+-([\w-]+)`).FindAllStringSubmatch(string(help), -1) {
		known[m[1]] = true
	}
	if len(known) < 10 {
		t.Fatalf("could not read gpuagent's flags from:\n%s", help)
	}
	start := unitValue(string(unit), "ExecStart")
	if !strings.HasPrefix(start, "/usr/local/bin/gpuagent ") {
		t.Fatalf("ExecStart %q", start)
	}
	flags := map[string]string{}
	for _, m := range regexp.MustCompile(`--([\w-]+)\s+("[^"]*"|\S+)`).FindAllStringSubmatch(start, -1) {
		if !known[m[1]] {
			t.Errorf("the unit passes --%s, which gpuagent does not have", m[1])
		}
		flags[m[1]] = strings.Trim(m[2], `"`)
	}
	// The pipelines are the agent's defaults, in the prime-rl checkout cloud-init installs.
	for _, f := range []string{"rl-command", "preflight-command", "install-command", "eval-command", "gepa-command", "serve-command"} {
		if _, ok := flags[f]; ok {
			t.Errorf("the unit sets --%s; the agent's default runs the pinned upstream's own commands", f)
		}
	}
	if flags["prime-rl"] != "/opt/prime-rl" {
		t.Errorf("--prime-rl %q, want /opt/prime-rl, where cloud-init installs it", flags["prime-rl"])
	}
	if _, ok := flags["allow-unpinned"]; ok {
		t.Error("the unit allows an unpinned prime-rl")
	}
	grace, err1 := time.ParseDuration(flags["stop-grace"])
	drain, err2 := time.ParseDuration(flags["drain-timeout"])
	stop, err3 := strconv.Atoi(unitValue(string(unit), "TimeoutStopSec"))
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatalf("stop-grace %q, drain-timeout %q, TimeoutStopSec: %v %v %v", flags["stop-grace"], flags["drain-timeout"], err1, err2, err3)
	}
	if time.Duration(stop)*time.Second < grace+drain {
		t.Errorf("TimeoutStopSec=%d is shorter than --stop-grace + --drain-timeout (%s): systemd would kill a drain", stop, grace+drain)
	}
	if unitValue(string(unit), "KillMode") != "mixed" {
		t.Error("KillMode must be mixed: SIGTERM to the agent alone, which stops its pipelines itself")
	}
}

// The node image installs exactly the upstream versions the agent is pinned to: prime-rl at its
// commit with the submodules (verifiers among them) and its own environments, the prime CLI at
// its release; and the agent's unit points at that checkout.
func TestCloudInitInstallsThePinnedUpstream(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("gpu-node", "cloud-init.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(raw, &cc); err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	for _, c := range cc.Runcmd {
		script.WriteString(strings.Join(c, " ") + "\n")
	}
	for _, want := range []string{
		"git clone https://github.com/PrimeIntellect-ai/prime-rl /opt/prime-rl",
		"git checkout --detach " + upstream.PrimeRLCommit,
		"submodule update --init -- deps/verifiers",
		"uv sync --all-extras --all-packages",
		"uv tool install prime==" + upstream.PrimeCLIVersion,
		"/usr/local/bin/gpuagent versions --prime-rl /opt/prime-rl",
	} {
		if !strings.Contains(script.String(), want) {
			t.Errorf("cloud-init's runcmd lacks %q:\n%s", want, script.String())
		}
	}
	if strings.Contains(script.String(), "--depth 1") {
		t.Error("a shallow clone cannot check out the pinned commit")
	}
}
