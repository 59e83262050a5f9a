package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// devEnv is the host as `go run ./examples/host -dev` runs it: a local
// issuer it trusts and offers sign-in and tokens from.
func devEnv(t *testing.T) (*switchboard.Switchboard, *httptest.Server) {
	t.Helper()
	is, err := switchboardtest.NewIssuer("switchboard-dev")
	require.NoError(t, err)
	t.Cleanup(is.Close)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "sb.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	sb, err := switchboard.New(st, &switchboard.Config{Issuers: []switchboard.Issuer{is.Config()}})
	require.NoError(t, err)
	t.Cleanup(func() { sb.Close() })
	h, err := newHost(hostConfig{SB: sb, Store: st, Dev: is})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for _, p := range [][2]string{{"alice", "alice-bot"}, {"bob", "bob-desk"}} {
		_, err := sb.Publish(context.Background(), switchboard.Persona{ID: p[1], Owner: is.Human(p[0]), Discoverable: true,
			Card: switchboard.PersonaCard(switchboard.CardFields{Name: p[1], Description: "an agent", Version: "1.0", URL: srv.URL + "/agents/" + p[1] + "/"})})
		require.NoError(t, err)
	}
	return sb, srv
}

// A JavaScript agent, written from the README and the nonce's
// specification only, makes first contact with the host in -dev mode: it
// checks its nonce against the vectors and the host, resolves bob-desk's
// card with the official A2A SDK, sends a real friend request, has bob
// approve it through the host, collects its credential, creates a todo
// with the official MCP TypeScript client, and reads bob's revocation as a
// tool error.
func TestFirstContactFromJavaScript(t *testing.T) {
	if _, err := os.Stat("../../interop/js/node_modules/@modelcontextprotocol/sdk"); err != nil {
		switchboardtest.Skip(t, "the JS interop packages are not installed: run `npm ci --prefix interop/js` (CI does)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		switchboardtest.Skip(t, "node is not installed; CI runs this test with Node.js")
	}
	sb, srv := devEnv(t)
	vectors, err := filepath.Abs("../../testdata/request-nonce.json")
	require.NoError(t, err)
	in, err := json.Marshal(map[string]string{"url": srv.URL, "vectors": vectors})
	require.NoError(t, err)
	cmd := exec.Command(node, "first-contact.mjs")
	cmd.Dir = "../../interop/js"
	cmd.Stdin = bytes.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), "stderr: %s", errb.String())
	var got struct {
		Vectors        int      `json:"vectors"`
		Card           string   `json:"card"`
		Edge           string   `json:"edge"`
		Tools          []string `json:"tools"`
		Created        bool     `json:"created"`
		RevokedIsError bool     `json:"revokedIsError"`
		RevokedText    string   `json:"revokedText"`
		Unauthorized   struct {
			Status    int    `json:"status"`
			Challenge string `json:"challenge"`
			Body      struct {
				Error struct{ Code, Message string } `json:"error"`
			} `json:"body"`
		} `json:"unauthorized"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
	assert.GreaterOrEqual(t, got.Vectors, 5)
	assert.Equal(t, "bob-desk", got.Card)
	assert.Equal(t, []string{"create_for"}, got.Tools, "the narrowed scope")
	assert.True(t, got.Created)
	assert.True(t, got.RevokedIsError, "a revoked credential is a tool error the client reads")
	assert.Contains(t, got.RevokedText, "unauthenticated")
	assert.Equal(t, http.StatusUnauthorized, got.Unauthorized.Status)
	assert.Equal(t, "Bearer", got.Unauthorized.Challenge)
	assert.Equal(t, "unauthenticated", got.Unauthorized.Body.Error.Code)

	_ = sb
}

// The README's curl walk-through (walkthrough.sh) runs against the host in
// -dev mode and ends with a todo created over MCP.
func TestCurlWalkthrough(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "sha256sum", "base64"} {
		if _, err := exec.LookPath(tool); err != nil {
			switchboardtest.Skip(t, "%s is not installed", tool)
		}
	}
	_, srv := devEnv(t)
	cmd := exec.Command("bash", "walkthrough.sh")
	cmd.Env = append(os.Environ(), "H="+srv.URL)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), "stdout: %s\nstderr: %s", out.String(), errb.String())
	assert.Contains(t, out.String(), `"why":"I forward invoices"`)
	assert.Contains(t, out.String(), `\"created\":true`)
}
