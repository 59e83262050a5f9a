package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// tryItCommands returns the README's "Try it" block, a command a line.
func tryItCommands(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "## Try it")
	require.True(t, ok, "the README has a Try it section")
	_, block, ok := strings.Cut(section, "```sh\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)
	var out []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// The README's "Try it" path, every command as written, in order, on a
// fresh directory: the dev host, the walkthrough, a restart of the host
// and the walkthrough again (the same humans and agents carry on), a
// request left pending for the inbox, the JavaScript agent, and each CLI
// command against the host's store while it runs. The only changes made
// to the commands: the host listens on a free port instead of 8080 (the
// URLs follow), `go run` is a binary built once, and the backup goes to
// the test's directory.
func TestTryItFromTheREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the host and the CLI; skipped with -short")
	}
	for _, tool := range []string{"bash", "curl", "sha256sum", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			switchboardtest.Skip(t, "%s is not installed (the walkthrough needs it)", tool)
		}
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	dir := t.TempDir()
	bin := func(pkg, name string) string {
		out := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = root
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build %s: %s", pkg, b)
		return out
	}
	hostBin, cliBin := bin("./examples/host", "host"), bin("./cmd/switchboard", "switchboard")

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	base := "http://" + addr
	rewrite := func(s string) string {
		s = strings.ReplaceAll(s, "127.0.0.1:8080", addr)
		return strings.ReplaceAll(s, "/tmp/switchboard-backup.db", filepath.Join(dir, "backup.db"))
	}

	var host *exec.Cmd
	hostLog := new(logBuffer)
	start := func(args []string) {
		host = exec.Command(hostBin, append(args, "-addr", addr)...)
		host.Dir = dir
		host.Stdout, host.Stderr = hostLog, hostLog
		require.NoError(t, host.Start())
		require.Eventually(t, func() bool {
			resp, err := http.Get(base + "/dev/issuer/.well-known/openid-configuration")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		}, 30*time.Second, 50*time.Millisecond, "the host did not start: %s", hostLog)
	}
	stop := func() {
		if host != nil {
			_ = host.Process.Signal(os.Interrupt)
			_ = host.Wait() // Wait, not Process.Wait: it also waits for the log's copier
		}
	}
	t.Cleanup(stop)
	var hostArgs []string
	run := func(line string) string {
		t.Helper()
		cmd := exec.Command("bash", "-c", line)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "H="+base)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s\n%s\nhost log:\n%s", line, out, hostLog)
		t.Logf("$ %s\n%s", line, out)
		return string(out)
	}
	// What each CLI command's comment in the block promises, as text its
	// output must hold: a command that runs but shows nothing is a failure.
	shows := map[string][]string{
		" queues":               {"bob-desk/inbox", "#bob/_approvals"},
		" todos bob-desk/inbox": {"invoice.pay", "queued"},
		" connections ":         {"granted", "alice-bot", "bob-desk", `queue "inbox": create todos`},
		" audit verify":         {"ok: events 1–"},
		" audit checkpoint":     {"switchboard/log\n", "— switchboard/log "},
		" audit prove 3":        {`"index": 2`, `"hashes"`},
		" backup ":              {"wrote "},
	}
	ran := 0
	for _, line := range tryItCommands(t) {
		cmdText, _, _ := strings.Cut(line, " # ")
		cmdText = strings.TrimSpace(rewrite(cmdText))
		switch {
		case strings.HasPrefix(line, "#") && strings.Contains(line, "start it again"):
			stop()
			start(hostArgs)
		case strings.HasPrefix(line, "#"):
		case strings.HasPrefix(cmdText, "go run ./examples/host"):
			hostArgs = strings.Fields(strings.TrimPrefix(cmdText, "go run ./examples/host"))
			start(hostArgs)
		case strings.HasPrefix(cmdText, "bash examples/host/"):
			run(strings.Replace(cmdText, "bash examples/host/", "bash "+root+"/examples/host/", 1))
		case strings.HasPrefix(cmdText, "npm ci --prefix interop/js"):
			if _, err := exec.LookPath("node"); err != nil {
				t.Logf("skipped (node is not installed; CI runs it): %s", cmdText)
				continue
			}
			// A copy of interop/js: npm ci empties node_modules first, and
			// the root package's JavaScript tests read the repository's
			// copy while this runs (go test runs packages in parallel).
			js := filepath.Join(dir, "repo")
			for _, f := range []string{"interop/js/package.json", "interop/js/package-lock.json", "interop/js/first-contact.mjs", "testdata/request-nonce.json"} {
				b, err := os.ReadFile(filepath.Join(root, f))
				require.NoError(t, err)
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(js, f)), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(js, f), b, 0o644))
			}
			run(strings.ReplaceAll(cmdText, "interop/js", js+"/interop/js"))
		case strings.HasPrefix(cmdText, "go run ./cmd/switchboard"):
			if strings.Contains(cmdText, " audit checkpoint") {
				// The log grows just before, so the host's own stored
				// checkpoint is behind the snapshot's: a second signer's
				// checkpoint must not leave the host refusing its own.
				growLog(t, base, "before-cli")
			}
			out := run(cliBin + strings.TrimPrefix(cmdText, "go run ./cmd/switchboard"))
			matched := false
			for cmdPart, wants := range shows {
				if !strings.Contains(cmdText, cmdPart) {
					continue
				}
				matched = true
				for _, want := range wants {
					require.Contains(t, out, want, "%s shows what the README says it does", cmdText)
				}
			}
			require.True(t, matched, "this test knows what %q should show", cmdText)
		default:
			t.Fatalf("the Try it block has a command this test does not know how to run: %s", line)
		}
		ran++
	}
	require.GreaterOrEqual(t, ran, 12, "the Try it block ran")
	require.FileExists(t, filepath.Join(dir, ".switchboard-dev", "switchboard.db"), "the dev host kept its state in its directory")
	kept := filepath.Join(dir, ".switchboard-dev", "log.key.checkpoint")
	require.FileExists(t, kept, "and its last checkpoint beside its log key")
	require.FileExists(t, filepath.Join(dir, "backup.db"))

	// After the CLI signed a checkpoint of a snapshot of its store, the
	// host goes on signing its own: 20 more times, each after the log
	// grew, on a short reap interval, with no checkpoint problem logged.
	stop()
	start(append(hostArgs, "-reap-interval", "20ms"))
	size := keptSize(t, kept)
	for i := range 20 {
		growLog(t, base, "after-cli-"+strconv.Itoa(i))
		require.Eventually(t, func() bool { return keptSize(t, kept) > size }, 30*time.Second, 10*time.Millisecond,
			"round %d: the host signs and keeps a checkpoint of the grown log (kept: %d events)\nhost log:\n%s", i, size, hostLog)
		size = keptSize(t, kept)
	}
	require.NotContains(t, hostLog.String(), "cannot be checkpointed", "the host never failed to checkpoint")
}

// growLog adds events to a running dev host's audit log: bob signs in and
// publishes a persona named after tag.
func growLog(t *testing.T, base, tag string) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar}
	resp, err := c.Post(base+"/dev/login", "application/json", strings.NewReader(`{"subject":"bob","name":"Bob Example","email":"bob@example.com"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	card := `{"discoverable":false,"card":{"name":"Bob ` + tag + `","description":"grows the log","version":"1.0","supportedInterfaces":[{"url":"` + base + `/agents/bob-` + tag + `/","protocolBinding":"urn:switchboard:discovery:v1","protocolVersion":"1.0"}],"capabilities":{},"defaultInputModes":["application/json"],"defaultOutputModes":["application/json"],"skills":[]}}`
	req, err := http.NewRequest(http.MethodPut, base+"/me/personas/bob-"+tag, strings.NewReader(card))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err = c.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Less(t, resp.StatusCode, 300, "publish: %s", b)
}

// keptSize is the size of the checkpoint kept in file (0: none yet).
func keptSize(t *testing.T, file string) uint64 {
	t.Helper()
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	lines := strings.SplitN(string(b), "\n", 3)
	require.Len(t, lines, 3, "a checkpoint note")
	n, err := strconv.ParseUint(lines[1], 10, 64)
	require.NoError(t, err)
	return n
}

// logBuffer collects a child's output; the child's copier goroutine writes
// while the test may read it for a failure message.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
