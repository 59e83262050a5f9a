package mcptools_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/mcptools"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

var inbox = switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbGet, switchboard.VerbList}}}

// bearer adds the credential to every request, as an agent's MCP client does.
type bearer struct {
	cred string
	rt   http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.cred)
	return b.rt.RoundTrip(r)
}

// connect opens an MCP session over streamable HTTP with the SDK's client.
func connect(t *testing.T, url string, cred switchboard.Credential) *mcp.ClientSession {
	t.Helper()
	return connectVia(t, url, bearer{string(cred), http.DefaultTransport})
}

// connectVia opens an MCP session whose HTTP requests go through rt.
func connectVia(t *testing.T, url string, rt http.RoundTripper) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: url, HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1,
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func toolNames(t *testing.T, s *mcp.ClientSession) []string {
	t.Helper()
	res, err := s.ListTools(context.Background(), nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

var toolErrorText = regexp.MustCompile(`^[a-z_]+: switchboard: [a-z_]+( [a-z_]+){0,2}: `)

// call calls a tool and returns its structured output, checked against the
// tool's own output schema, or the tool error's text.
func call(t *testing.T, s *mcp.ClientSession, name string, args any) (map[string]any, string) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	if res.IsError {
		require.Len(t, res.Content, 1)
		text := res.Content[0].(*mcp.TextContent).Text
		// The stable code, then switchboard's message: "switchboard: "
		// once, then the verb.
		assert.Regexp(t, toolErrorText, text)
		assert.Equal(t, 1, strings.Count(text, "switchboard: "), text)
		return nil, text
	}
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(b, &out))
	tools, err := s.ListTools(context.Background(), nil)
	require.NoError(t, err)
	for _, tl := range tools.Tools {
		if tl.Name == name {
			sb, _ := json.Marshal(tl.OutputSchema)
			var sch jsonschema.Schema
			require.NoError(t, json.Unmarshal(sb, &sch))
			rs, err := sch.Resolve(nil)
			require.NoError(t, err)
			require.NoError(t, rs.Validate(out), "output of %s fits its schema", name)
		}
	}
	return out, ""
}

func TestToolsOverStreamableHTTP(t *testing.T) {
	k := switchboardtest.NewKit(t, nil)
	k.Publish("alice", "alice-bot")
	k.Publish("bob", "bob-desk")
	grant, cred := k.Friend("alice-bot", "bob-desk", inbox)
	srv := httptest.NewServer(mcptools.Handler(k.SB, nil))
	t.Cleanup(srv.Close) // after the sessions close (cleanups run last first)

	s := connect(t, srv.URL, cred)
	assert.Equal(t, []string{"create_for", "get_todo", "list_todos"}, toolNames(t, s), "only the granted verbs")

	out, errText := call(t, s, "create_for", map[string]any{"queue": "inbox", "kind": "invoice.pay", "payload": map[string]any{"n": 118}, "dedup_key": "inv-118"})
	require.Empty(t, errText)
	assert.Equal(t, true, out["created"])
	td := out["todo"].(map[string]any)
	assert.Equal(t, map[string]any{"n": float64(118)}, td["payload"])
	id := td["id"].(string)

	out, _ = call(t, s, "create_for", map[string]any{"queue": "inbox", "kind": "invoice.pay", "dedup_key": "inv-118"})
	assert.Equal(t, false, out["created"], "dedup through the tool")
	assert.Equal(t, id, out["todo"].(map[string]any)["id"])

	out, _ = call(t, s, "get_todo", map[string]any{"id": id})
	assert.Equal(t, "queued", out["todo"].(map[string]any)["state"])
	out, _ = call(t, s, "list_todos", map[string]any{"queue": "inbox"})
	assert.Len(t, out["todos"], 1)

	// The worker's todo lands where bob's own worker sees it.
	w := k.Worker("bob-desk", "inbox")
	got, err := k.SB.Get(context.Background(), w, id)
	require.NoError(t, err)
	assert.Equal(t, grant.ID, got.Origin.Grant)

	// Refusals are tool errors; out-of-scope reads like absent.
	_, e1 := call(t, s, "create_for", map[string]any{"queue": "secret-queue", "kind": "k"})
	_, e2 := call(t, s, "create_for", map[string]any{"queue": "no-such-queue", "kind": "k"})
	assert.True(t, strings.HasPrefix(e1, "not_found: "), e1)
	assert.Equal(t, e1, strings.ReplaceAll(e2, "no-such-queue", "secret-queue"))
	_, e3 := call(t, s, "get_todo", map[string]any{"id": "todo_doesnotexist"})
	assert.True(t, strings.HasPrefix(e3, "not_found: "), e3)
	_, e4 := call(t, s, "create_for", map[string]any{"queue": "inbox", "kind": "k", "KIND": "x"})
	assert.True(t, strings.HasPrefix(e4, "invalid_argument: "), e4)
	_, e5 := call(t, s, "claim", map[string]any{"queue": "inbox"})
	assert.True(t, strings.HasPrefix(e5, "forbidden: "), "a verb the grant does not hold on a queue it has: %s", e5)

	// Revocation takes effect on the next call of the open session, as a
	// tool error the client reads (not an HTTP error it would throw).
	require.NoError(t, k.SB.Revoke(context.Background(), k.Human("bob"), grant.ID))
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_todo", Arguments: map[string]any{"id": id}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.True(t, strings.HasPrefix(res.Content[0].(*mcp.TextContent).Text, "unauthenticated: "), res.Content[0].(*mcp.TextContent).Text)
	// A new session with the revoked credential is refused at the door.
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	_, err = c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL,
		HTTPClient: &http.Client{Transport: bearer{string(cred), http.DefaultTransport}}, MaxRetries: -1}, nil)
	require.Error(t, err)
}

// The drain verbs through a vended credential: claim, heartbeat, complete,
// fail, release, and an empty claim that waits.
func TestDrainTools(t *testing.T) {
	k := switchboardtest.NewKit(t, nil)
	k.Publish("bob", "bob-desk")
	w := k.Worker("bob-desk", "inbox")
	srv := httptest.NewServer(mcptools.Handler(k.SB, &mcptools.Options{MaxWait: 2 * time.Second}))
	t.Cleanup(srv.Close) // after the sessions close (cleanups run last first)
	s := connect(t, srv.URL, w)
	assert.Equal(t, []string{"claim", "complete", "create_for", "delete_webhook", "fail", "get_todo", "heartbeat", "list_todos", "list_webhooks", "redrive_webhook", "register_webhook", "release"}, toolNames(t, s))

	out, _ := call(t, s, "claim", map[string]any{"queue": "inbox"})
	assert.Equal(t, map[string]any{"empty": true}, out)
	start := time.Now()
	out, _ = call(t, s, "claim", map[string]any{"queue": "inbox", "wait": "100ms"})
	assert.Equal(t, true, out["empty"])
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	_, e := call(t, s, "claim", map[string]any{"queue": "inbox", "wait": "1h"})
	assert.True(t, strings.HasPrefix(e, "invalid_argument: "), e)

	for _, kind := range []string{"a", "b", "c"} {
		_, e := call(t, s, "create_for", map[string]any{"queue": "inbox", "kind": kind, "payload_base64": "AP8="})
		require.Empty(t, e)
	}
	claim := func() (string, string) {
		out, e := call(t, s, "claim", map[string]any{"queue": "inbox", "lease": "1m"})
		require.Empty(t, e)
		l := out["lease"].(map[string]any)
		assert.Equal(t, "AP8=", out["todo"].(map[string]any)["payload_base64"])
		return l["todo"].(string), l["token"].(string)
	}
	id, tok := claim()
	out, e = call(t, s, "heartbeat", map[string]any{"todo": id, "token": tok, "extend": "2m"})
	require.Empty(t, e)
	assert.Equal(t, id, out["lease"].(map[string]any)["todo"])
	out, e = call(t, s, "complete", map[string]any{"todo": id, "token": tok, "result": map[string]any{"paid": true}})
	require.Empty(t, e)
	assert.Equal(t, map[string]any{"ok": true}, out)
	_, e = call(t, s, "complete", map[string]any{"todo": id, "token": tok})
	assert.True(t, strings.HasPrefix(e, "lease_lost: ") || strings.HasPrefix(e, "invalid_transition: "), e)
	got, err := k.SB.Get(context.Background(), w, id)
	require.NoError(t, err)
	assert.JSONEq(t, `{"paid":true}`, string(got.Result))

	id, tok = claim()
	_, e = call(t, s, "fail", map[string]any{"todo": id, "token": tok, "reason": "upstream down"})
	require.Empty(t, e)
	got, _ = k.SB.Get(context.Background(), w, id)
	assert.Equal(t, switchboard.TodoQueued, got.State)
	assert.Equal(t, "upstream down", got.Error)

	id, tok = claim()
	_, e = call(t, s, "release", map[string]any{"todo": id, "token": "wrong"})
	assert.True(t, strings.HasPrefix(e, "lease_lost: "), e)
	_, e = call(t, s, "release", map[string]any{"todo": id, "token": tok})
	require.Empty(t, e)
}

// Over an in-memory transport the credential is fixed by Options.
func TestToolsWithFixedCredential(t *testing.T) {
	k := switchboardtest.NewKit(t, nil)
	k.Publish("alice", "alice-bot")
	k.Publish("bob", "bob-desk")
	_, cred := k.Friend("alice-bot", "bob-desk", switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}})
	srv := mcptools.NewServer(k.SB, &mcptools.Options{Credential: cred})
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent"}, nil).Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	defer cs.Close()
	assert.Equal(t, []string{"create_for"}, toolNames(t, cs))
	out, e := call(t, cs, "create_for", map[string]any{"queue": "inbox", "kind": "k"})
	require.Empty(t, e)
	assert.Equal(t, true, out["created"])
}

// The bearer verifier: no token, a malformed one and an unknown one are all
// 401 without the token in the answer; a grant without expiry works.
func TestVerifier(t *testing.T) {
	k := switchboardtest.NewKit(t, nil)
	k.Publish("bob", "bob-desk")
	w := k.Worker("bob-desk", "inbox")
	srv := httptest.NewServer(mcptools.Handler(k.SB, nil))
	t.Cleanup(srv.Close) // after the sessions close (cleanups run last first)
	for name, authz := range map[string]string{"none": "", "not bearer": "Basic eDp5", "malformed": "Bearer abc", "unknown": "Bearer " + string(w) + "x"} {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, name)
		assert.NotContains(t, body.String(), string(w), name)
		assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), name)
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal(body.Bytes(), &e), name)
		assert.Equal(t, "unauthenticated", e.Error.Code, name)
		assert.True(t, strings.HasPrefix(e.Error.Message, "switchboard: mcp: unauthenticated: "), "%s: %q", name, e.Error.Message)
		assert.Equal(t, 1, strings.Count(e.Error.Message, "switchboard: "), name)
		challenge := resp.Header.Get("WWW-Authenticate")
		assert.True(t, strings.HasPrefix(challenge, "Bearer"), name)
		switch name {
		case "none":
			assert.Equal(t, "Bearer", challenge, "no credential: no error code (RFC 6750 §3)")
		case "not bearer":
			assert.Contains(t, challenge, `error="invalid_request"`)
		default:
			assert.Contains(t, challenge, `error="invalid_token"`, name)
		}
	}
	info, err := mcptools.Verifier(k.SB)(context.Background(), string(w), nil)
	require.NoError(t, err)
	assert.True(t, info.Expiration.After(time.Now()), "a grant without expiry is accepted by the middleware")
	assert.Contains(t, info.Scopes, "claim")
	assert.NotContains(t, info.UserID, string(w))
}

// create_for takes the caller's W3C trace context and claim hands it to
// the worker; a malformed one is an invalid_argument tool error.
func TestTraceOverMCP(t *testing.T) {
	k := switchboardtest.NewKit(t, nil)
	k.Publish("bob", "bob-desk")
	w := k.Worker("bob-desk", "inbox")
	srv := httptest.NewServer(mcptools.Handler(k.SB, nil))
	t.Cleanup(srv.Close)
	s := connect(t, srv.URL, w)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	_, e := call(t, s, "create_for", map[string]any{"queue": "inbox", "kind": "k", "trace": map[string]any{"traceparent": tp, "tracestate": "rojo=1"}})
	require.Empty(t, e)
	out, e := call(t, s, "claim", map[string]any{"queue": "inbox"})
	require.Empty(t, e)
	assert.Equal(t, map[string]any{"traceparent": tp, "tracestate": "rojo=1"}, out["todo"].(map[string]any)["trace"])
	_, e = call(t, s, "create_for", map[string]any{"queue": "inbox", "kind": "k", "trace": map[string]any{"traceparent": "nope"}})
	assert.True(t, strings.HasPrefix(e, "invalid_argument: "), e)
}

// dpopClient signs a fresh DPoP proof of every request it sends, as an
// agent's DPoP-aware HTTP client does; nonce, when set, is put in each.
type dpopClient struct {
	cred  string
	key   *switchboardtest.ProofKey
	nonce string
	rt    http.RoundTripper
}

func (d *dpopClient) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	u := *r.URL
	u.RawQuery = ""
	r.Header.Set("Authorization", "DPoP "+d.cred)
	r.Header.Set("DPoP", d.key.Sign(switchboardtest.ProofClaims{JTI: rand.Text(), Method: r.Method, URL: u.String(), IssuedAt: time.Now(), Token: d.cred, Nonce: d.nonce}))
	return d.rt.RoundTrip(r)
}

// A grant bound to a key works over MCP only as a DPoP token with a proof
// of each request; bearer use of its credential and bad proofs are 401s
// with DPoP challenges (RFC 9449 §7.1).
func TestDPoPOverStreamableHTTP(t *testing.T) {
	k := switchboardtest.NewKit(t, nil)
	k.Publish("alice", "alice-bot")
	k.Publish("bob", "bob-desk")
	key, err := switchboardtest.NewProofKey("ES256")
	require.NoError(t, err)
	_, cred := k.BoundFriend("alice-bot", "bob-desk", inbox, key)
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	t.Cleanup(srv.Close)
	srv.Config.Handler = mcptools.Handler(k.SB, &mcptools.Options{URL: srv.URL})

	s := connectVia(t, srv.URL, &dpopClient{cred: string(cred), key: key, rt: http.DefaultTransport})
	assert.Equal(t, []string{"create_for", "get_todo", "list_todos"}, toolNames(t, s))
	out, errText := call(t, s, "create_for", map[string]any{"queue": "inbox", "kind": "k"})
	require.Empty(t, errText)
	assert.Equal(t, true, out["created"])

	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	post := func(authz, proof string) *http.Response {
		req, err := http.NewRequest("POST", srv.URL, strings.NewReader(initialize))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", authz)
		if proof != "" {
			req.Header.Set("DPoP", proof)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	code := func(resp *http.Response) string {
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return body.Error.Code
	}

	// The leaked credential as a bearer token.
	resp := post("Bearer "+string(cred), "")
	require.Equal(t, 401, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("WWW-Authenticate"), `DPoP error="invalid_token"`)
	assert.Contains(t, resp.Header.Get("WWW-Authenticate"), `algs="`+switchboard.DPoPAlgorithms+`"`)
	assert.Equal(t, "dpop_required", code(resp))
	// As a DPoP token without a proof, with one for another URL, and a replay.
	resp = post("DPoP "+string(cred), "")
	require.Equal(t, 401, resp.StatusCode)
	assert.Equal(t, "dpop_required", code(resp))
	resp = post("DPoP "+string(cred), key.Proof("POST", srv.URL+"/elsewhere", string(cred), time.Now()).JWT)
	require.Equal(t, 401, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("WWW-Authenticate"), `DPoP error="invalid_dpop_proof"`)
	assert.Equal(t, "invalid_dpop_proof", code(resp))
	proof := key.Proof("POST", srv.URL, string(cred), time.Now()).JWT
	resp = post("DPoP "+string(cred), proof)
	require.Equal(t, 200, resp.StatusCode)
	resp = post("DPoP "+string(cred), proof)
	require.Equal(t, 401, resp.StatusCode, "a replayed proof")
	assert.Contains(t, resp.Header.Get("WWW-Authenticate"), "replayed")
	// Another key's proof.
	other, err := switchboardtest.NewProofKey("EdDSA")
	require.NoError(t, err)
	resp = post("DPoP "+string(cred), other.Proof("POST", srv.URL, string(cred), time.Now()).JWT)
	require.Equal(t, 401, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("WWW-Authenticate"), "another key")

	// A proof naming another server, relayed here with that server's Host
	// header (as a server an agent was tricked into calling would): the
	// URL proofs must name is configured, never read from the request.
	req, err := http.NewRequest("POST", srv.URL, strings.NewReader(initialize))
	require.NoError(t, err)
	req.Host = "evil.example"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "DPoP "+string(cred))
	req.Header.Set("DPoP", key.Proof("POST", "http://evil.example/", string(cred), time.Now()).JWT)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 401, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("WWW-Authenticate"), "another URL")

	// Without Options.URL, DPoP is not served at all.
	bare := httptest.NewServer(mcptools.Handler(k.SB, nil))
	t.Cleanup(bare.Close)
	req, err = http.NewRequest("POST", bare.URL, strings.NewReader(initialize))
	require.NoError(t, err)
	req.Header.Set("Authorization", "DPoP "+string(cred))
	req.Header.Set("DPoP", key.Proof("POST", bare.URL, string(cred), time.Now()).JWT)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotImplemented, resp.StatusCode)
}

// With server nonces required, the first proof is answered use_dpop_nonce
// with a nonce, and a proof carrying it is accepted.
func TestDPoPNonceOverHTTP(t *testing.T) {
	k := switchboardtest.NewKit(t, &switchboard.Config{DPoP: &switchboard.DPoPConfig{RequireNonce: true}})
	k.Publish("alice", "alice-bot")
	k.Publish("bob", "bob-desk")
	key, err := switchboardtest.NewProofKey("EdDSA")
	require.NoError(t, err)
	_, cred := k.BoundFriend("alice-bot", "bob-desk", inbox, key)
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	t.Cleanup(srv.Close)
	srv.Config.Handler = mcptools.Handler(k.SB, &mcptools.Options{URL: srv.URL})
	d := &dpopClient{cred: string(cred), key: key, rt: http.DefaultTransport}
	req, err := http.NewRequest("POST", srv.URL, strings.NewReader(`{}`))
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: d}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 401, resp.StatusCode)
	assert.Contains(t, resp.Header.Get("WWW-Authenticate"), `DPoP error="use_dpop_nonce"`)
	d.nonce = resp.Header.Get("DPoP-Nonce")
	require.NotEmpty(t, d.nonce)

	s := connectVia(t, srv.URL, d)
	_, errText := call(t, s, "create_for", map[string]any{"queue": "inbox", "kind": "k"})
	require.Empty(t, errText)
}

// sessionRequest sends one raw HTTP request of an MCP session: a POST of a
// tools/list message, a GET of the session's stream or a DELETE ending it,
// with the Authorization header authz (none if empty) and, if proof is not
// empty, a DPoP header. It returns the status.
func sessionRequest(t *testing.T, url, method, session, authz, proof string) int {
	t.Helper()
	var body *strings.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"jsonrpc":"2.0","id":99,"method":"tools/list"}`)
	} else {
		body = strings.NewReader("")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	require.NoError(t, err)
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	} else {
		req.Header.Set("Accept", "text/event-stream")
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	if proof != "" {
		req.Header.Set("DPoP", proof)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close() // a GET's stream stays open otherwise
	return resp.StatusCode
}

// sessionTransfer makes every request of an official MCP client carry
// another session's id once its own session is open: a client trying to
// take over that session with its own credential.
type sessionTransfer struct {
	session string
	rt      http.RoundTripper
}

func (s sessionTransfer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Mcp-Session-Id") != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Mcp-Session-Id", s.session)
	}
	return s.rt.RoundTrip(r)
}

// A session belongs to the credential (and key) that opened it. Every
// other credential — another grant's, a revoked one, a junk string, none,
// the bound credential without its key — is refused on every method (401,
// 403 or 404), through raw HTTP and through the official client, and the
// session goes on as if nothing was tried: its own client still lists
// and calls tools. Its own credential, revoked, still meets tool errors
// on POST, and GET and DELETE are authenticated like the opening request.
func TestSessionBelongsToItsCredential(t *testing.T) {
	k := switchboardtest.NewKit(t, nil)
	for _, p := range [][2]string{{"alice", "alice-bot"}, {"bob", "bob-desk"}, {"carol", "carol-bot"}, {"dave", "dave-bot"}, {"erin", "erin-bot"}} {
		k.Publish(p[0], p[1])
	}
	aliceGrant, alice := k.Friend("alice-bot", "bob-desk", inbox)
	_, carol := k.Friend("carol-bot", "bob-desk", inbox)
	daveGrant, dave := k.Friend("dave-bot", "bob-desk", inbox)
	require.NoError(t, k.SB.Revoke(context.Background(), k.Human("bob"), daveGrant.ID))
	key, err := switchboardtest.NewProofKey("ES256")
	require.NoError(t, err)
	_, erin := k.BoundFriend("erin-bot", "bob-desk", inbox, key)
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	t.Cleanup(srv.Close)
	srv.Config.Handler = mcptools.Handler(k.SB, &mcptools.Options{URL: srv.URL})

	s := connect(t, srv.URL, alice)
	id := s.ID()
	require.NotEmpty(t, id)
	works := func(what string) {
		t.Helper()
		_, e := call(t, s, "list_todos", map[string]any{"queue": "inbox"})
		require.Empty(t, e, "after %s, the session's own client is refused", what)
	}
	works("opening")

	other, err := switchboardtest.NewProofKey("ES256")
	require.NoError(t, err)
	intruders := map[string]func(method string) (authz, proof string){
		"another grant's credential": func(string) (string, string) { return "Bearer " + string(carol), "" },
		"a revoked credential":       func(string) (string, string) { return "Bearer " + string(dave), "" },
		"a junk string":              func(string) (string, string) { return "Bearer sbg_" + strings.Repeat("x", 43), "" },
		"a non-switchboard string":   func(string) (string, string) { return "Bearer hello", "" },
		"no credential":              func(string) (string, string) { return "", "" },
		"a bound grant's DPoP": func(m string) (string, string) {
			return "DPoP " + string(erin), key.Proof(m, srv.URL, string(erin), time.Now()).JWT
		},
		"the session's credential as DPoP with a stranger's key": func(m string) (string, string) {
			return "DPoP " + string(alice), other.Proof(m, srv.URL, string(alice), time.Now()).JWT
		},
	}
	for name, as := range intruders {
		for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
			authz, proof := as(m)
			code := sessionRequest(t, srv.URL, m, id, authz, proof)
			assert.Contains(t, []int{401, 403, 404}, code, "%s with %s answered %d", m, name, code)
		}
		works(name)
	}

	// The official client, with its own valid credential, taking over the
	// session by its id: every call fails, and the session is untouched.
	c := mcp.NewClient(&mcp.Implementation{Name: "intruder", Version: "1"}, nil)
	taken, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL,
		HTTPClient: &http.Client{Transport: sessionTransfer{id, bearer{string(carol), http.DefaultTransport}}}, MaxRetries: -1}, nil)
	if err == nil {
		_, err = taken.ListTools(context.Background(), nil)
		assert.Error(t, err, "another grant's client used the session")
		_, err = taken.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_todos", Arguments: map[string]any{"queue": "inbox"}})
		assert.Error(t, err, "another grant's client called a tool in the session")
		_ = taken.Close() // its DELETE carries the session's id: refused too
	}
	works("a transfer with the official client")

	// The session's own credential reaches its stream (409: the client
	// holds the session's one stream already).
	assert.Contains(t, []int{200, 409}, sessionRequest(t, srv.URL, http.MethodGet, id, "Bearer "+string(alice), ""))

	// Revoked mid-session: its POSTs reach the tools, which refuse each
	// call as a tool error; GET and DELETE are refused at the door.
	require.NoError(t, k.SB.Revoke(context.Background(), k.Human("bob"), aliceGrant.ID))
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_todos", Arguments: map[string]any{"queue": "inbox"}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	assert.True(t, strings.HasPrefix(res.Content[0].(*mcp.TextContent).Text, "unauthenticated: "))
	assert.Equal(t, 401, sessionRequest(t, srv.URL, http.MethodGet, id, "Bearer "+string(alice), ""))
	assert.Equal(t, 401, sessionRequest(t, srv.URL, http.MethodDelete, id, "Bearer "+string(alice), ""))
}

// A session's own live credential ends it with DELETE; the session is gone.
func TestSessionEndsWithItsCredential(t *testing.T) {
	k := switchboardtest.NewKit(t, nil)
	k.Publish("alice", "alice-bot")
	k.Publish("bob", "bob-desk")
	_, cred := k.Friend("alice-bot", "bob-desk", inbox)
	srv := httptest.NewServer(mcptools.Handler(k.SB, nil))
	t.Cleanup(srv.Close)
	s := connect(t, srv.URL, cred)
	assert.Equal(t, 204, sessionRequest(t, srv.URL, http.MethodDelete, s.ID(), "Bearer "+string(cred), ""))
	assert.Equal(t, 404, sessionRequest(t, srv.URL, http.MethodPost, s.ID(), "Bearer "+string(cred), ""))
}

// A friend holding the drain verbs works another friend's todos over the
// MCP tools and learns nothing of that friend: no claim, get_todo or
// list_todos answer names alice's agent, grant, edge, human, dedup key or
// tracestate (the library's model test checks every field; this checks
// the tools hand out what it checks).
func TestFriendDrainToolsNameNoOtherFriend(t *testing.T) {
	k := switchboardtest.NewKit(t, nil)
	for _, p := range [][2]string{{"alice", "alice-bot"}, {"bob", "bob-desk"}, {"carol", "carol-bot"}} {
		k.Publish(p[0], p[1])
	}
	aliceGrant, alice := k.Friend("alice-bot", "bob-desk", inbox)
	drain := switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbGet, switchboard.VerbList,
		switchboard.VerbClaim, switchboard.VerbComplete}}}
	_, carol := k.Friend("carol-bot", "bob-desk", drain)
	for i := range 3 {
		_, _, err := k.SB.CreateFor(context.Background(), alice, "inbox", switchboard.NewTodo{Kind: "job", DedupKey: fmt.Sprint("dk-alice-", i),
			Trace: switchboard.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "alicevendor=secret"}})
		require.NoError(t, err)
	}
	srv := httptest.NewServer(mcptools.Handler(k.SB, nil))
	t.Cleanup(srv.Close)
	s := connect(t, srv.URL, carol)
	aliceHuman, _ := json.Marshal(k.Human("alice"))
	forbidden := []string{"alice-bot", aliceGrant.ID, aliceGrant.EdgeID, string(aliceHuman), `"sub":"alice"`, "dk-alice", "alicevendor"}
	clean := func(tool string, out map[string]any) {
		t.Helper()
		b, err := json.Marshal(out)
		require.NoError(t, err)
		for _, f := range forbidden {
			require.NotContains(t, string(b), f, "%s tells carol of alice", tool)
		}
	}
	var ids []string
	for range 2 {
		out, e := call(t, s, "claim", map[string]any{"queue": "inbox"})
		require.Empty(t, e)
		clean("claim", out)
		l := out["lease"].(map[string]any)
		ids = append(ids, l["todo"].(string))
		_, e = call(t, s, "complete", map[string]any{"todo": l["todo"], "token": l["token"]})
		require.Empty(t, e)
	}
	for _, id := range ids {
		out, e := call(t, s, "get_todo", map[string]any{"id": id})
		require.Empty(t, e)
		clean("get_todo", out)
	}
	out, e := call(t, s, "list_todos", map[string]any{"queue": "inbox"})
	require.Empty(t, e)
	require.Len(t, out["todos"], 2, "carol lists the todos she claimed")
	clean("list_todos", out)
}
