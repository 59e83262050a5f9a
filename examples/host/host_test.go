package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/switchboardtest"
	"github.com/switchboardhq/switchboard/witness"
)

// env is one running host: its switchboard on its own bolt file, and the
// identity provider its humans sign in with.
type env struct {
	t     *testing.T
	sb    *switchboard.Switchboard
	srv   *httptest.Server
	is    *switchboardtest.Issuer
	host  *host
	clock *switchboardtest.StepClock // the Switchboard's and the pages' clock
	st    store.Store                // the Switchboard's store
}

func newEnv(t *testing.T, primary string, trust ...switchboard.Issuer) *env {
	t.Helper()
	return newEnvWith(t, primary, envOpts{}, trust...)
}

// envOpts change what newEnvWith builds.
type envOpts struct {
	host    func(*hostConfig, *switchboardtest.Issuer) // edits the host's configuration
	sb      func(*switchboard.Config)                  // edits the Switchboard's
	logName string                                     // the audit log's origin; default host.test/log
	logKey  *string                                    // receives the log's public key
	logSKey string                                     // the log's signing key; default a new one
}

// newEnvWith is newEnv with opts.
func newEnvWith(t *testing.T, primary string, opts envOpts, trust ...switchboard.Issuer) *env {
	t.Helper()
	is, err := switchboardtest.NewIssuer("switchboard")
	require.NoError(t, err)
	t.Cleanup(is.Close)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "sb.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, is: is, clock: &switchboardtest.StepClock{}, st: st}
	e.srv = httptest.NewUnstartedServer(nil)
	e.srv.Start()
	t.Cleanup(e.srv.Close)
	if opts.logName == "" {
		opts.logName = "host.test/log"
	}
	skey, vkey, err := switchboard.NewLogKey(opts.logName)
	require.NoError(t, err)
	if opts.logSKey != "" {
		skey = opts.logSKey
	}
	if opts.logKey != nil {
		*opts.logKey = vkey
	}
	sbc := &switchboard.Config{Issuers: append([]switchboard.Issuer{is.Config()}, trust...), LogKey: skey, Clock: e.clock}
	if opts.sb != nil {
		opts.sb(sbc)
	}
	sb, err := switchboard.New(st, sbc)
	require.NoError(t, err)
	t.Cleanup(func() { sb.Close() })
	e.sb = sb
	cfg := hostConfig{SB: sb, Store: st, Primary: primary, BaseURL: e.srv.URL, Clock: e.clock,
		SignIn: &SignIn{Issuer: is.URL(), ClientID: is.ClientID, RedirectURL: e.srv.URL + "/signin/callback"}}
	if opts.host != nil {
		opts.host(&cfg, is)
	}
	h, handler, err := buildHost(cfg)
	require.NoError(t, err)
	e.srv.Config.Handler, e.host = handler, h
	return e
}

// client is a browser or agent with its own cookie jar.
type client struct {
	t    *testing.T
	base string
	http *http.Client
}

func (e *env) client() *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: e.t, base: e.srv.URL, http: &http.Client{Jar: jar}}
}

func (c *client) do(method, path string, body any, hdr ...string) (int, map[string]any, http.Header) {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		require.NoError(c.t, err)
		rd = bytes.NewReader(j)
	}
	u := path
	if !strings.HasPrefix(path, "http") {
		u = c.base + path
	}
	req, err := http.NewRequest(method, u, rd)
	require.NoError(c.t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		require.NoError(c.t, json.Unmarshal(raw, &out), string(raw))
	}
	if e, ok := out["error"].(map[string]any); ok {
		assertStyled(c.t, e, method+" "+path)
	}
	return resp.StatusCode, out, resp.Header
}

// styledMessage is switchboard's one error style: "switchboard: " once,
// at the start, then the verb.
var styledMessage = regexp.MustCompile(`^switchboard: [a-z_]+( [a-z_]+){0,2}: `)

// assertStyled checks a JSON error body {"code","message"} against the one
// style; every error any test meets through client.do passes here.
func assertStyled(t *testing.T, e map[string]any, where string) {
	t.Helper()
	msg, _ := e["message"].(string)
	assert.NotEmpty(t, e["code"], "%s: the error has a code", where)
	assert.Equal(t, 1, strings.Count(msg, "switchboard: "), "%s: %q carries switchboard: once", where, msg)
	assert.Regexp(t, styledMessage, msg, "%s: the verb follows the prefix", where)
}

// One error style, the host's JSON: every error switchboard names
// (switchboardtest.ErrorCases, made by real calls) answers with
// StatusOf's status and code and the library's own message, unchanged.
// The host's own refusals (routes, bodies, sign-in) are checked by
// client.do in every test that meets one.
func TestErrorsReadOneWayInJSON(t *testing.T) {
	e := newEnv(t, "")
	for _, c := range switchboardtest.ErrorCases(t) {
		rec := httptest.NewRecorder()
		e.host.fail(rec, httptest.NewRequest("GET", "/x", nil), c.Err)
		st := switchboard.StatusOf(c.Err)
		assert.Equal(t, st.HTTP, rec.Code, c.Name)
		if st.HTTP == http.StatusNoContent {
			continue
		}
		var body struct {
			Error map[string]any `json:"error"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), c.Name)
		assert.Equal(t, st.Code, body.Error["code"], c.Name)
		assert.Equal(t, c.Err.Error(), body.Error["message"], c.Name)
		assertStyled(t, body.Error, c.Name)
	}
}

// signIn logs subject in through the host: a nonce from the host, an ID
// token carrying it from the identity provider, the session cookie back.
func (e *env) signIn(subject string) *client {
	c := e.client()
	code, out, _ := c.do("POST", "/login/start", "{}")
	require.Equal(e.t, 200, code)
	tok := e.is.Token(switchboardtest.Login{Subject: subject, Name: subject, Email: subject + "@example.com", Nonce: out["nonce"].(string), At: time.Now()})
	code, out, _ = c.do("POST", "/login", map[string]string{"id_token": tok})
	require.Equal(e.t, 200, code, out)
	return c
}

func (c *client) publish(id, name string, discoverable bool) agentcard.Card {
	card := switchboard.PersonaCard(switchboard.CardFields{Name: name, Description: "does " + name, Version: "1.0", URL: c.base + "/agents/" + id})
	code, out, _ := c.do("PUT", "/me/personas/"+id, map[string]any{"card": card, "discoverable": discoverable})
	require.Equal(c.t, 200, code, out)
	return card
}

type bearer struct{ cred string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.cred)
	return http.DefaultTransport.RoundTrip(r)
}

func mcpSession(t *testing.T, endpoint, cred string) *mcp.ClientSession {
	t.Helper()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{cred}}, MaxRetries: -1}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

var asked = switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor, switchboard.VerbList}}}

// The whole flow over real HTTP on one host.
func TestWholeFlowOverHTTP(t *testing.T) {
	e := newEnv(t, "")
	bob := e.signIn("bob")
	alice := e.signIn("alice")
	bob.publish("bob-desk", "Bob's desk", true)
	alice.publish("alice-bot", "Alice's bot", true)

	// Discovery at the well-known path, with a 304 on revalidation.
	agent := e.client()
	code, card, hdr := agent.do("GET", "/agents/bob-desk/.well-known/agent-card.json", nil)
	require.Equal(t, 200, code)
	assert.Equal(t, "Bob's desk", card["name"])
	assert.Contains(t, hdr.Get("Cache-Control"), "max-age")
	code, _, _ = agent.do("GET", "/agents/bob-desk/.well-known/agent-card.json", nil, "If-None-Match", hdr.Get("ETag"))
	assert.Equal(t, http.StatusNotModified, code)
	code, _, _ = agent.do("GET", "/agents/nobody/.well-known/agent-card.json", nil)
	assert.Equal(t, 404, code)

	// The friend request, bound to alice's ID token.
	secret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: asked, Why: "send invoices", Pickup: pickup}
	req.IDToken = e.is.RequestToken("alice", req, time.Now())
	code, out, _ := agent.do("POST", "/agents/bob-desk/friend-requests", req)
	require.Equal(t, http.StatusCreated, code, out)
	edgeID := out["edge"].(map[string]any)["id"].(string)
	code, _, _ = agent.do("POST", "/agents/bob-desk/friend-requests", req)
	assert.Equal(t, http.StatusOK, code, "an identical retry is idempotent")

	// Bob sees it, and approves it narrowed to create_for.
	code, out, _ = bob.do("GET", "/me/approvals", nil)
	require.Equal(t, 200, code)
	aps := out["approvals"].([]any)
	require.Len(t, aps, 1)
	assert.Contains(t, aps[0].(map[string]any)["text"], "send invoices")
	code, _, _ = alice.do("POST", "/me/edges/"+edgeID+"/approve", "{}")
	assert.Equal(t, 404, code, "not alice's to approve: reads as absent")
	code, out, _ = bob.do("POST", "/me/edges/"+edgeID+"/approve", map[string]any{"scope": switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbCreateFor}}}})
	require.Equal(t, 200, code, out)
	grantID := out["grant"].(map[string]any)["id"].(string)

	// The requesting agent collects its credential, once.
	code, out, _ = agent.do("POST", "/edges/"+edgeID+"/collect", map[string]string{"secret": secret})
	require.Equal(t, 200, code, out)
	cred := out["credential"].(string)
	code, _, _ = agent.do("POST", "/edges/"+edgeID+"/collect", map[string]string{"secret": secret})
	assert.Equal(t, 404, code, "only once")

	// MCP over streamable HTTP with the credential: only the granted tool.
	s := mcpSession(t, e.srv.URL+"/mcp", cred)
	tools, err := s.ListTools(context.Background(), nil)
	require.NoError(t, err)
	require.Len(t, tools.Tools, 1)
	assert.Equal(t, "create_for", tools.Tools[0].Name)
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_for", Arguments: map[string]any{"queue": "inbox", "kind": "invoice.pay", "payload": map[string]any{"n": 1}}})
	require.NoError(t, err)
	require.False(t, res.IsError, res.Content)

	// Bob revokes; the next call of the open session fails.
	code, _, _ = bob.do("POST", "/me/grants/"+grantID+"/revoke", "{}")
	require.Equal(t, http.StatusNoContent, code)
	res, err = s.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_for", Arguments: map[string]any{"queue": "inbox", "kind": "invoice.pay"}})
	require.True(t, err != nil || res.IsError, "a revoked grant is refused on the next call")
}

// Two organisations, each with its own host, store and identity provider.
func TestTwoHosts(t *testing.T) {
	// Each host witnesses the other's audit log (C2SP tlog-witness): X's
	// witness knows Y's log key, Y's knows X's, and each asks the other.
	xLog, xLogV, err := switchboard.NewLogKey("x.test/log")
	require.NoError(t, err)
	yLog, yLogV, err := switchboard.NewLogKey("y.test/log")
	require.NoError(t, err)
	xWit, xWitV, err := witness.NewKey("x.test/witness")
	require.NoError(t, err)
	yWit, yWitV, err := witness.NewKey("y.test/witness")
	require.NoError(t, err)
	askY, askX := &witness.Client{}, &witness.Client{}
	witnessOf := func(name string, key ed25519.PrivateKey, logKey string) func(*hostConfig, *switchboardtest.Issuer) {
		return func(c *hostConfig, _ *switchboardtest.Issuer) {
			origin, _, _ := strings.Cut(logKey, "+")
			w, err := witness.NewServer(witness.Config{Name: name, Key: key, Store: memory.New(), Logs: []witness.Log{{Origin: origin, Keys: []string{logKey}}}})
			require.NoError(t, err)
			c.Witness = w
		}
	}
	x := newEnvWith(t, "", envOpts{logSKey: xLog, host: witnessOf("x.test/witness", xWit, yLogV),
		sb: func(c *switchboard.Config) { c.Witnesses = []switchboard.WitnessConfig{{Witness: askY, Key: yWitV}} }})
	// Y trusts X's issuer for friend requests, besides its own.
	y := newEnvWith(t, "bob-desk", envOpts{logSKey: yLog, host: witnessOf("y.test/witness", yWit, xLogV),
		sb: func(c *switchboard.Config) { c.Witnesses = []switchboard.WitnessConfig{{Witness: askX, Key: xWitV}} }}, x.is.Config())
	askY.URL, askX.URL = y.srv.URL+"/witness/add-checkpoint", x.srv.URL+"/witness/add-checkpoint"
	bob := y.signIn("bob")
	bob.publish("bob-desk", "Bob's desk", true)
	alice := x.signIn("alice")
	aliceCard := alice.publish("alice-bot", "Alice's bot", false)

	// X's agent finds Y's persona through a remote directory that
	// allow-lists Y's origin; the card names where Y takes requests.
	remote, err := switchboard.NewRemoteDirectory(switchboard.RemoteOptions{Origins: []string{y.srv.URL}})
	require.NoError(t, err)
	l, err := remote.Lookup(context.Background(), y.srv.URL)
	require.NoError(t, err)
	endpoint := l.Card.SupportedInterfaces[0].URL
	require.True(t, strings.HasPrefix(endpoint, y.srv.URL+"/agents/"))
	to := endpoint[strings.LastIndex(endpoint, "/")+1:]

	// The request goes to Y, proven by alice's token from X's issuer.
	xu, _ := url.Parse(x.is.URL())
	secret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{From: "alice-bot@" + xu.Host, To: to, Scope: asked, Why: "send invoices", Pickup: pickup}
	req.IDToken = x.is.RequestToken("alice", req, time.Now())
	agent := x.client()
	code, out, _ := agent.do("POST", endpoint+"/friend-requests", map[string]any{
		"from": req.From, "to": req.To, "scope": req.Scope, "why": req.Why, "pickup": req.Pickup, "id_token": req.IDToken, "from_card": aliceCard})
	require.Equal(t, http.StatusCreated, code, out)
	edgeID := out["edge"].(map[string]any)["id"].(string)

	// Y's human approves on Y; X's agent collects from Y and works on Y.
	code, out, _ = bob.do("GET", "/me/approvals", nil)
	require.Equal(t, 200, code)
	require.Len(t, out["approvals"], 1)
	code, _, _ = bob.do("POST", "/me/edges/"+edgeID+"/approve", "{}")
	require.Equal(t, 200, code)
	code, out, _ = agent.do("POST", y.srv.URL+"/edges/"+edgeID+"/collect", map[string]string{"secret": secret})
	require.Equal(t, 200, code, out)
	s := mcpSession(t, y.srv.URL+"/mcp", out["credential"].(string))
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_for", Arguments: map[string]any{"queue": "inbox", "kind": "invoice.pay", "dedup_key": "inv-1"}})
	require.NoError(t, err)
	require.False(t, res.IsError, res.Content)
	todos, err := y.sb.List(context.Background(), mustVend(t, y, "bob", "bob-desk"), "inbox", nil)
	require.NoError(t, err)
	require.Len(t, todos, 1)
	assert.Equal(t, req.From, todos[0].Origin.Agent)

	// A guest name must carry its own issuer's host: no squatting on names
	// of other identity providers.
	_, pickup2 := switchboard.NewPickup()
	bad := switchboard.FriendRequest{From: "alice-bot@evil.example", To: to, Scope: asked, Why: "w", Pickup: pickup2}
	bad.IDToken = x.is.RequestToken("alice", bad, time.Now())
	code, _, _ = agent.do("POST", endpoint+"/friend-requests", map[string]any{"from": bad.From, "to": bad.To, "scope": bad.Scope, "why": bad.Why, "pickup": bad.Pickup, "id_token": bad.IDToken, "from_card": aliceCard})
	assert.Equal(t, 400, code)

	// Each host's checkpoints carry the other's cosignature.
	for _, h := range []struct {
		e           *env
		log, wit    string
		name, other string
	}{{x, xLogV, yWitV, "x", "y.test/witness"}, {y, yLogV, xWitV, "y", "x.test/witness"}} {
		cp, err := h.e.sb.Checkpoint(context.Background())
		require.NoError(t, err, h.name)
		_, names, err := switchboard.OpenWitnessedCheckpoint(cp.Note, h.log, []string{h.wit}, 1)
		require.NoError(t, err, h.name)
		require.Equal(t, []string{h.other}, names)
	}

	// Whoever can write X's store rewrites its history — and, so that X
	// itself has nothing to compare with, deletes its stored checkpoint
	// and what it knew of Y's witness. The running X still remembers the
	// tree it signed, and refuses. Restarted, X has nothing left to
	// compare with and signs the forgery (its key is real), but Y's
	// witness, which cosigned X's genuine log, refuses it: X's checkpoint
	// is not cosigned, and X reports the log broken.
	require.NoError(t, switchboardtest.RewriteAuditEvent(context.Background(), x.st, 1, func(leaf []byte) []byte {
		return bytes.Replace(leaf, []byte(`"persona.published"`), []byte(`"persona.unpublish"`), 1)
	}))
	require.NoError(t, x.st.Update(context.Background(), func(tx store.Tx) error {
		return errors.Join(tx.Delete("meta", []byte("checkpoint")), tx.Delete("meta", []byte("checkpoint_frontier")), tx.Delete("meta", []byte("witness\x00y.test/witness")))
	}))
	alice.publish("alice-bot-2", "Alice's second bot", false) // the log grows
	_, err = x.sb.Checkpoint(context.Background())
	require.ErrorIs(t, err, switchboard.ErrAuditBroken)
	require.ErrorContains(t, err, "this process sequenced or signed")
	restarted, err := switchboard.New(x.st, &switchboard.Config{Issuers: []switchboard.Issuer{x.is.Config()}, LogKey: xLog, Clock: x.clock,
		Witnesses: []switchboard.WitnessConfig{{Witness: askY, Key: yWitV}}})
	require.NoError(t, err)
	defer restarted.Close()
	_, err = restarted.Checkpoint(context.Background())
	require.ErrorIs(t, err, switchboard.ErrAuditBroken)
	require.ErrorContains(t, err, "witness y.test/witness refused")
	require.ErrorIs(t, err, switchboard.ErrWitnessRefused)
	require.NoError(t, x.st.View(context.Background(), func(tx store.Tx) error {
		_, err := tx.Get("meta", []byte("checkpoint"))
		require.ErrorIs(t, err, store.ErrNotFound, "the forgery Y refused is not stored: later checks never compare against it")
		return nil
	}))
}

func mustVend(t *testing.T, e *env, owner, persona string) switchboard.Credential {
	_, cred, err := e.sb.Vend(context.Background(), e.is.Human(owner), switchboard.VendRequest{Agent: persona,
		Scope: switchboard.Scope{{Queue: "inbox", Verbs: []switchboard.Verb{switchboard.VerbList}}}})
	require.NoError(t, err)
	return cred
}

// Status codes for bad bodies, missing or wrong credentials and foreign ids.
func TestStatusCodes(t *testing.T) {
	e := newEnv(t, "")
	bob := e.signIn("bob")
	bob.publish("bob-desk", "Bob's desk", true)
	anon := e.client()
	wrongSecret, _ := switchboard.NewPickup()
	big := `{"secret":"` + strings.Repeat("a", maxBody) + `"}`
	cases := []struct {
		name   string
		c      *client
		method string
		path   string
		body   any
		hdr    []string
		want   int
		code   string
	}{
		{"not JSON", anon, "POST", "/agents/bob-desk/friend-requests", "from=x", nil, 400, "invalid_argument"},
		{"wrong content type", anon, "POST", "/edges/e/collect", nil, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"duplicate key", anon, "POST", "/agents/bob-desk/friend-requests", `{"from":"a","from":"b"}`, nil, 400, "invalid_argument"},
		{"unknown field", anon, "POST", "/edges/e/collect", `{"secret":"s","credential":"x"}`, nil, 400, "invalid_argument"},
		{"too large", anon, "POST", "/edges/e/collect", big, nil, 413, "too_large"},
		{"bad token", anon, "POST", "/agents/bob-desk/friend-requests", map[string]any{"from": "alice-bot", "scope": asked, "why": "w", "pickup": strings.Repeat("A", 43), "id_token": "x.y.z"}, nil, 401, "provenance_rejected"},
		{"to mismatch", anon, "POST", "/agents/bob-desk/friend-requests", map[string]any{"from": "a", "to": "other"}, nil, 400, "invalid_argument"},
		{"collect wrong secret", anon, "POST", "/edges/edge_nope/collect", map[string]string{"secret": wrongSecret}, nil, 404, "not_found"},
		{"human not signed in", anon, "GET", "/me/approvals", nil, nil, 401, "unauthenticated"},
		{"foreign edge", bob, "POST", "/me/edges/edge_nope/deny", "{}", nil, 404, "not_found"},
		{"foreign grant", bob, "POST", "/me/grants/grant_nope/revoke", "{}", nil, 404, "not_found"},
		{"login without start", anon, "POST", "/login", `{"id_token":"x"}`, nil, 401, "unauthenticated"},
		{"guest id on publish", bob, "PUT", "/me/personas/x@y", map[string]any{"card": map[string]any{}}, nil, 400, "invalid_argument"},
	}
	for _, tc := range cases {
		code, out, _ := tc.c.do(tc.method, tc.path, tc.body, tc.hdr...)
		assert.Equal(t, tc.want, code, tc.name)
		if assert.NotNil(t, out, tc.name) {
			assert.Equal(t, tc.code, out["error"].(map[string]any)["code"], tc.name)
		}
	}
	// MCP: no credential and a wrong one are 401, without echoing it.
	for _, authz := range []string{"", "Bearer sbk_wrong"} {
		code, _, _ := anon.do("POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, "Authorization", authz, "Accept", "application/json, text/event-stream")
		assert.Equal(t, 401, code, authz)
	}
}

// The session cookie alone never acts: a cross-site browser request is
// refused before any route, and every state-changing human route wants
// application/json — an empty-bodied form POST approves nothing.
func TestCrossSiteRequestsAreRefused(t *testing.T) {
	e := newEnv(t, "")
	bob := e.signIn("bob")
	alice := e.signIn("alice")
	bob.publish("bob-desk", "Bob's desk", true)
	alice.publish("alice-bot", "Alice's bot", true)
	_, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: asked, Why: "w", Pickup: pickup}
	req.IDToken = e.is.RequestToken("alice", req, time.Now())
	code, out, _ := e.client().do("POST", "/agents/bob-desk/friend-requests", req)
	require.Equal(t, http.StatusCreated, code, out)
	edgeID := out["edge"].(map[string]any)["id"].(string)

	for _, path := range []string{"/me/edges/" + edgeID + "/approve", "/me/edges/" + edgeID + "/deny", "/logout"} {
		code, out, _ = bob.do("POST", path, "{}", "Sec-Fetch-Site", "cross-site")
		assert.Equal(t, http.StatusForbidden, code, path)
		assert.Equal(t, "cross_origin", out["error"].(map[string]any)["code"], path)
		code, _, _ = bob.do("POST", path, "{}", "Origin", "https://evil.example", "Sec-Fetch-Site", "")
		assert.Equal(t, http.StatusForbidden, code, "%s with a foreign Origin", path)
		code, _, _ = bob.do("POST", path, nil, "Content-Type", "application/x-www-form-urlencoded")
		assert.Equal(t, http.StatusUnsupportedMediaType, code, "%s as a form", path)
	}
	code, out, _ = bob.do("GET", "/me/approvals", nil)
	require.Equal(t, 200, code)
	assert.Len(t, out["approvals"].([]any), 1, "still pending: nothing approved or denied")
	code, out, _ = bob.do("GET", "/no/such/route", nil)
	assert.Equal(t, 404, code)
	assert.Equal(t, "not_found", out["error"].(map[string]any)["code"], "unknown routes answer the JSON error too")
}

// Guest names are keyed on the whole issuer: two tenants of one provider
// (same host, different paths) never share a name.
func TestGuestNamesKeyOnTheWholeIssuer(t *testing.T) {
	a, err := issuerKey("https://idp.example/tenant-a")
	require.NoError(t, err)
	b, err := issuerKey("https://idp.example/tenant-b")
	require.NoError(t, err)
	root, err := issuerKey("https://idp.example")
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
	assert.Equal(t, "idp.example", root)
	assert.Regexp(t, `^idp\.example:t-[0-9a-f]{8}$`, a)
}

// The nonce route answers what RequestNonce computes, with its canonical
// text; cards are served at the persona's URL too.
func TestNonceRouteAndCardURLs(t *testing.T) {
	e := newEnv(t, "")
	bob := e.signIn("bob")
	bob.publish("bob-desk", "Bob's desk", true)
	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: asked, Why: "<b>why</b>", Pickup: "p"}
	code, out, _ := e.client().do("POST", "/friend-requests/nonce", req)
	require.Equal(t, 200, code, out)
	assert.Equal(t, switchboard.RequestNonce(req), out["nonce"])
	assert.Equal(t, string(switchboard.RequestNonceInput(req)), out["canonical"])
	for _, p := range []string{"/agents/bob-desk", "/agents/bob-desk/", "/agents/bob-desk/.well-known/agent-card.json"} {
		code, card, _ := e.client().do("GET", p, nil)
		assert.Equal(t, 200, code, p)
		assert.Equal(t, "Bob's desk", card["name"], p)
	}
}

// dpopTransport signs a DPoP proof of each request with key.
type dpopTransport struct {
	cred string
	key  *switchboardtest.ProofKey
}

func (d dpopTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	u := *r.URL
	u.RawQuery = ""
	r.Header.Set("Authorization", "DPoP "+d.cred)
	r.Header.Set("DPoP", d.key.Proof(r.Method, u.String(), d.cred, time.Now()).JWT)
	return http.DefaultTransport.RoundTrip(r)
}

// A friend request bound to the agent's key over HTTP: the credential is
// collected only with a proof of the collect request, and used over /mcp
// only as a DPoP token; each refusal carries a DPoP challenge.
func TestBoundGrantOverHTTP(t *testing.T) {
	e := newEnv(t, "")
	bob := e.signIn("bob")
	alice := e.signIn("alice")
	bob.publish("bob-desk", "Bob's desk", true)
	alice.publish("alice-bot", "Alice's bot", true)
	key, err := switchboardtest.NewProofKey("ES256")
	require.NoError(t, err)

	agent := e.client()
	secret, pickup := switchboard.NewPickup()
	req := switchboard.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: asked, Why: "bound", Pickup: pickup, Key: key.JWK()}
	code, out, _ := agent.do("POST", "/friend-requests/nonce", req)
	require.Equal(t, 200, code, out)
	require.Equal(t, switchboard.RequestNonce(req), out["nonce"], "the host's nonce covers the key")
	req.IDToken = e.is.RequestToken("alice", req, time.Now())
	code, out, _ = agent.do("POST", "/agents/bob-desk/friend-requests", req)
	require.Equal(t, http.StatusCreated, code, out)
	edge := out["edge"].(map[string]any)
	require.Equal(t, key.Thumbprint(), edge["jkt"])
	edgeID := edge["id"].(string)
	code, out, _ = bob.do("POST", "/me/edges/"+edgeID+"/approve", "{}")
	require.Equal(t, 200, code, out)

	collect := "/edges/" + edgeID + "/collect"
	code, out, hdr := agent.do("POST", collect, map[string]string{"secret": secret})
	require.Equal(t, 401, code, "the pickup secret alone")
	assert.Equal(t, "dpop_required", out["error"].(map[string]any)["code"])
	assert.Contains(t, hdr.Get("WWW-Authenticate"), `DPoP error="invalid_token"`)
	code, out, hdr = agent.do("POST", collect, map[string]string{"secret": secret}, "DPoP", key.Proof("POST", e.srv.URL+"/elsewhere", secret, time.Now()).JWT)
	require.Equal(t, 401, code, out)
	assert.Contains(t, hdr.Get("WWW-Authenticate"), `DPoP error="invalid_dpop_proof"`)
	code, out, _ = agent.do("POST", collect, map[string]string{"secret": secret}, "DPoP", key.Proof("POST", e.srv.URL+collect, secret, time.Now()).JWT)
	require.Equal(t, 200, code, out)
	cred := out["credential"].(string)

	_, err = mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: e.srv.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{cred}}, MaxRetries: -1}, nil)
	require.Error(t, err, "the leaked credential as a bearer token")
	s, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: e.srv.URL + "/mcp", HTTPClient: &http.Client{Transport: dpopTransport{cred, key}}, MaxRetries: -1}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_for", Arguments: map[string]any{"queue": "inbox", "kind": "invoice.pay"}})
	require.NoError(t, err)
	require.False(t, res.IsError, res.Content)
}

// docs/reference.md: "session cookies are HttpOnly, Secure over TLS and
// SameSite=Lax" — every cookie the sign-in sets, as the browser receives it.
func TestSessionCookiesAreWhatTheDocsSay(t *testing.T) {
	e := newEnv(t, "")
	c := e.client()
	code, out, hdr := c.do("POST", "/login/start", "{}")
	require.Equal(t, 200, code)
	tok := e.is.Token(switchboardtest.Login{Subject: "bob", Name: "bob", Email: "bob@example.com", Nonce: out["nonce"].(string), At: time.Now()})
	code, _, hdr2 := c.do("POST", "/login", map[string]string{"id_token": tok})
	require.Equal(t, 200, code)
	var cookies []*http.Cookie
	for _, h := range []http.Header{hdr, hdr2} {
		cookies = append(cookies, (&http.Response{Header: h}).Cookies()...)
	}
	require.NotEmpty(t, cookies)
	for _, ck := range cookies {
		require.True(t, ck.HttpOnly, ck.Name)
		require.Equal(t, http.SameSiteLaxMode, ck.SameSite, ck.Name)
		require.False(t, ck.Secure, "%s: not over plain HTTP", ck.Name)
	}
}
