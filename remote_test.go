package switchboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/agentcard"
)

// cardServer is a real HTTP server for one agent's card. Its handler can be
// swapped; it counts requests per path and conditional requests.
type cardServer struct {
	*httptest.Server
	mu          sync.Mutex
	hits        map[string]int
	conditional int
	handler     http.HandlerFunc
}

func newCardServer(t *testing.T, h http.HandlerFunc) *cardServer {
	cs := &cardServer{hits: map[string]int{}, handler: h}
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.mu.Lock()
		cs.hits[r.URL.Path]++
		if r.Header.Get("If-None-Match") != "" {
			cs.conditional++
		}
		h := cs.handler
		cs.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(cs.Close)
	return cs
}

func (cs *cardServer) count(path string) int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if path == "" {
		n := 0
		for _, v := range cs.hits {
			n += v
		}
		return n
	}
	return cs.hits[path]
}

func remoteCard(name string, tags ...string) agentcard.Card {
	if len(tags) == 0 {
		tags = []string{"general"}
	}
	return agentcard.Card{
		Name: name, Description: "a remote agent", Version: "1.0",
		SupportedInterfaces: []agentcard.Interface{{URL: "https://agent.example/a2a", ProtocolBinding: "JSONRPC", ProtocolVersion: "1.0"}},
		DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []agentcard.Skill{{ID: "s", Name: "Skill", Description: "does things", Tags: tags}},
	}
}

func serveJSON(body []byte, headers map[string]string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/agent-card.json" {
			http.NotFound(w, r)
			return
		}
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		if etag := headers["ETag"]; etag != "" && r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func remote(t *testing.T, o sb.RemoteOptions) *sb.RemoteDirectory {
	t.Helper()
	d, err := sb.NewRemoteDirectory(o)
	require.NoError(t, err)
	return d
}

func TestRemoteDirectoryFetchesOnlyAllowListedOrigins(t *testing.T) {
	allowed := newCardServer(t, serveJSON(mustJSON(t, remoteCard("Allowed", "maps")), nil))
	other := newCardServer(t, serveJSON(mustJSON(t, remoteCard("Other", "maps")), nil))
	d := remote(t, sb.RemoteOptions{Origins: []string{allowed.URL}})

	l, err := d.Lookup(ctx, allowed.URL)
	require.NoError(t, err)
	assert.Equal(t, "Allowed", l.Card.Name)
	assert.Equal(t, allowed.URL, l.ID)
	assert.NotEmpty(t, l.Card.Raw(), "the received JSON is kept")

	for _, id := range []string{other.URL, other.URL + "/", allowed.URL + "/evil", allowed.URL + "?x=1", "not a url", "file:///etc/passwd"} {
		_, err = d.Lookup(ctx, id)
		require.ErrorIs(t, err, sb.ErrNotFound, id)
	}
	assert.Zero(t, other.count(""), "a non-allow-listed origin is never contacted")

	_, err = sb.NewRemoteDirectory(sb.RemoteOptions{Origins: []string{"https://a.example/path"}})
	require.ErrorIs(t, err, sb.ErrInvalidArgument)
	_, err = sb.NewRemoteDirectory(sb.RemoteOptions{Origins: []string{allowed.URL}, Trust: agentcard.Trust{Policy: agentcard.SignaturesRequired}})
	require.ErrorIs(t, err, sb.ErrInvalidArgument, "a policy without keys")
}

func TestRemoteDirectoryRefusesBadResponses(t *testing.T) {
	big := newCardServer(t, func(w http.ResponseWriter, r *http.Request) {
		// No Content-Length: streamed in chunks past the limit.
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"name":"`))
		for range 64 {
			_, _ = w.Write([]byte(strings.Repeat("x", 1024)))
			w.(http.Flusher).Flush()
		}
		_, _ = w.Write([]byte(`"}`))
	})
	d := remote(t, sb.RemoteOptions{Origins: []string{big.URL}, MaxBytes: 16 << 10})
	_, err := d.Lookup(ctx, big.URL)
	require.ErrorIs(t, err, sb.ErrNotFound)
	require.ErrorIs(t, err, sb.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "larger than")

	huge := newCardServer(t, serveJSON([]byte(`{"name":"`+strings.Repeat("x", 300<<10)+`"}`), nil))
	d = remote(t, sb.RemoteOptions{Origins: []string{huge.URL}})
	_, err = d.Lookup(ctx, huge.URL)
	require.ErrorIs(t, err, sb.ErrInvalidArgument, "over 256 KiB by default")

	release := make(chan struct{})
	defer close(release)
	slow := newCardServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	d = remote(t, sb.RemoteOptions{Origins: []string{slow.URL}, Timeout: 50 * time.Millisecond})
	_, err = d.Lookup(ctx, slow.URL)
	require.ErrorIs(t, err, sb.ErrNotFound)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	target := newCardServer(t, serveJSON(mustJSON(t, remoteCard("Elsewhere")), nil))
	redirecting := newCardServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/agent-card.json" {
			http.Redirect(w, r, target.URL+"/.well-known/agent-card.json", http.StatusFound)
			return
		}
		http.NotFound(w, r)
	})
	d = remote(t, sb.RemoteOptions{Origins: []string{redirecting.URL, target.URL}})
	_, err = d.Lookup(ctx, redirecting.URL)
	require.ErrorIs(t, err, sb.ErrNotFound)
	assert.Contains(t, err.Error(), "redirect to another origin")
	assert.Zero(t, target.count(""), "the redirect was not followed, even to another allow-listed origin")

	sameOrigin := newCardServer(t, nil)
	sameOrigin.handler = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/agent-card.json" {
			http.Redirect(w, r, "/cards/current.json", http.StatusFound)
			return
		}
		_, _ = w.Write(mustJSON(t, remoteCard("Moved")))
	}
	d = remote(t, sb.RemoteOptions{Origins: []string{sameOrigin.URL}})
	l, err := d.Lookup(ctx, sameOrigin.URL)
	require.NoError(t, err, "a same-origin redirect is followed")
	assert.Equal(t, "Moved", l.Card.Name)

	broken := newCardServer(t, serveJSON([]byte(`{"name":"no other fields"}`), nil))
	d = remote(t, sb.RemoteOptions{Origins: []string{broken.URL}})
	_, err = d.Lookup(ctx, broken.URL)
	require.ErrorIs(t, err, sb.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "missing description")
}

func TestRemoteDirectoryCaching(t *testing.T) {
	clk := &clock{t: time.Now().UTC()}
	body := mustJSON(t, remoteCard("Cached"))
	srv := newCardServer(t, serveJSON(body, map[string]string{"Cache-Control": "public, max-age=60", "ETag": `"v1"`}))
	d := remote(t, sb.RemoteOptions{Origins: []string{srv.URL}, Clock: clk})
	for range 3 {
		_, err := d.Lookup(ctx, srv.URL)
		require.NoError(t, err)
	}
	assert.Equal(t, 1, srv.count(""), "fresh for max-age")
	clk.Advance(61 * time.Second)
	l, err := d.Lookup(ctx, srv.URL)
	require.NoError(t, err)
	assert.Equal(t, "Cached", l.Card.Name)
	assert.Equal(t, 2, srv.count(""))
	assert.Equal(t, 1, srv.conditional, "revalidated with If-None-Match, answered 304")
	_, err = d.Lookup(ctx, srv.URL)
	require.NoError(t, err)
	assert.Equal(t, 2, srv.count(""), "the 304 renewed freshness")

	nostore := newCardServer(t, serveJSON(body, map[string]string{"Cache-Control": "no-store"}))
	d = remote(t, sb.RemoteOptions{Origins: []string{nostore.URL}, Clock: clk})
	for range 3 {
		_, err := d.Lookup(ctx, nostore.URL)
		require.NoError(t, err)
	}
	assert.Equal(t, 3, nostore.count(""))

	legacy := newCardServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/agent.json" {
			_, _ = w.Write(body)
			return
		}
		http.NotFound(w, r)
	})
	_, err = remote(t, sb.RemoteOptions{Origins: []string{legacy.URL}}).Lookup(ctx, legacy.URL)
	require.ErrorIs(t, err, sb.ErrNotFound, "the v0.2 path only when configured")
	_, err = remote(t, sb.RemoteOptions{Origins: []string{legacy.URL}, LegacyPath: true}).Lookup(ctx, legacy.URL)
	require.NoError(t, err)
}

func TestRemoteDirectorySignaturePolicies(t *testing.T) {
	key := newCardKey(t, "dir-1")
	signed, err := agentcard.Sign(remoteCard("Signed"), key.priv)
	require.NoError(t, err)
	signedJSON := mustJSON(t, signed)
	tampered := []byte(strings.Replace(string(signedJSON), `"Signed"`, `"Forged"`, 1))
	unsigned := mustJSON(t, remoteCard("Unsigned"))

	for _, tc := range []struct {
		policy agentcard.Policy
		body   []byte
		ok     bool
	}{
		{agentcard.SignaturesOff, tampered, true},
		{agentcard.SignaturesIfPresent, unsigned, true},
		{agentcard.SignaturesIfPresent, signedJSON, true},
		{agentcard.SignaturesIfPresent, tampered, false},
		{agentcard.SignaturesRequired, unsigned, false},
		{agentcard.SignaturesRequired, tampered, false},
		{agentcard.SignaturesRequired, signedJSON, true},
	} {
		srv := newCardServer(t, serveJSON(tc.body, nil))
		d := remote(t, sb.RemoteOptions{Origins: []string{srv.URL}, Trust: agentcard.Trust{Policy: tc.policy, Keys: key.pub}})
		_, err := d.Lookup(ctx, srv.URL)
		if tc.ok {
			require.NoError(t, err, "policy %d", tc.policy)
		} else {
			require.ErrorIs(t, err, sb.ErrNotFound, "policy %d", tc.policy)
			require.ErrorIs(t, err, sb.ErrCardSignature, "policy %d", tc.policy)
		}
	}
}

// Under SignaturesRequired, a signed card with a key appended that a
// lenient decoder would read as a field (a case variant, a duplicate) is
// refused: the card served is never one other than the one signed.
func TestRemoteDirectoryRefusesCardsThatDecodeDifferently(t *testing.T) {
	key := newCardKey(t, "dir-1")
	signed, err := agentcard.Sign(remoteCard("Signed"), key.priv)
	require.NoError(t, err)
	signedJSON := string(mustJSON(t, signed))
	for _, body := range []string{
		strings.Replace(signedJSON, `{"name":"Signed"`, `{"name":"Signed","NAME":"Forged"`, 1),
		strings.Replace(signedJSON, `{"name":"Signed"`, `{"name":"Signed","name":"Forged"`, 1),
		strings.Replace(signedJSON, `"protocolBinding":`, `"ProtocolBinding":"JSONRPC","protocolBinding":`, 1),
	} {
		require.NotEqual(t, signedJSON, body)
		srv := newCardServer(t, serveJSON([]byte(body), nil))
		d := remote(t, sb.RemoteOptions{Origins: []string{srv.URL}, Trust: agentcard.Trust{Policy: agentcard.SignaturesRequired, Keys: key.pub}})
		_, err := d.Lookup(ctx, srv.URL)
		require.ErrorIs(t, err, sb.ErrNotFound, body)
		require.ErrorIs(t, err, sb.ErrInvalidArgument, body)
	}
}

// A Switchboard consults only its configured directories.
func TestSwitchboardDirectories(t *testing.T) {
	eachBackend(t, func(t *testing.T, h *harness) {
		srv := newCardServer(t, serveJSON(mustJSON(t, remoteCard("Remote maps", "maps")), nil))
		rd := remote(t, sb.RemoteOptions{Origins: []string{srv.URL}})
		c := card("Bob maps")
		c.Skills[0].Tags = []string{"maps"}
		_, err := h.sb.Publish(ctx, sb.Persona{ID: "bob-maps", Owner: h.bob, Card: c, Discoverable: true})
		require.NoError(t, err)

		both := h.withConfig(t, nil, func(c *sb.Config) { c.Directories = []sb.Directory{sb.NewLocalDirectory(h.st), rd} })
		found, err := both.Search(ctx, sb.Query{Tag: "MAPS"})
		require.NoError(t, err)
		require.Len(t, found, 2)
		assert.Equal(t, "bob-maps", found[0].ID)
		assert.Equal(t, srv.URL, found[1].ID)
		l, err := both.Lookup(ctx, srv.URL)
		require.NoError(t, err)
		assert.Equal(t, "Remote maps", l.Card.Name)
		found, err = both.Search(ctx, sb.Query{Name: "bob"})
		require.NoError(t, err)
		require.Len(t, found, 2, "bob-private is not discoverable")
		assert.Equal(t, []string{"bob-desk", "bob-maps"}, []string{found[0].ID, found[1].ID})
		_, err = both.Search(ctx, sb.Query{})
		require.ErrorIs(t, err, sb.ErrInvalidArgument)

		// Only the remote directory: local personas do not resolve, so
		// they cannot be requested.
		onlyRemote := h.withConfig(t, nil, func(c *sb.Config) { c.Directories = []sb.Directory{rd} })
		_, err = onlyRemote.Lookup(ctx, "bob-desk")
		require.ErrorIs(t, err, sb.ErrNotFound)
		before := lastSeq(t, h)
		_, errNotListed := h.request(h.alice, "alice-bot", "bob-desk", inboxCreate, "hi")
		_, errUnknown := h.request(h.alice, "alice-bot", "nobody", inboxCreate, "hi")
		require.ErrorIs(t, errNotListed, sb.ErrNotFound)
		sameWords(t, errUnknown, "nobody", errNotListed, "bob-desk", "not listed reads as unknown")
		assert.Equal(t, before, lastSeq(t, h))
		// A remote card resolves, but there is no human here to approve.
		_, err = h.request(h.alice, "alice-bot", srv.URL, inboxCreate, "hi")
		require.Error(t, err)

		// A lookup returns the card and nothing else.
		h.withConfig(t, nil, nil)
		l, err = h.sb.Lookup(ctx, "bob-desk")
		require.NoError(t, err)
		b, err := json.Marshal(l)
		require.NoError(t, err)
		assert.NotContains(t, string(b), h.iss.URL(), "no owner")
		assert.NotContains(t, string(b), "owner")
		assert.NotContains(t, string(b), "bob-private", "no other personas")
	})
}

// Search looks every allow-listed origin up, keeps origin order, and leaves
// out origins that fail.
func TestRemoteDirectorySearch(t *testing.T) {
	var origins []string
	for i, name := range []string{"Tide tables", "Berth plans", "Tide alerts"} {
		tag := "tides"
		if i == 1 {
			tag = "berths"
		}
		srv := newCardServer(t, serveJSON(mustJSON(t, remoteCard(name, tag)), nil))
		origins = append(origins, srv.URL)
	}
	down := newCardServer(t, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) })
	clk := &clock{t: time.Now().UTC()}
	d := remote(t, sb.RemoteOptions{Origins: append(origins, down.URL), Clock: clk})
	found, err := d.Search(ctx, sb.Query{Tag: "tides"})
	require.NoError(t, err)
	require.Len(t, found, 2)
	want := d.Origins()
	var got []string
	for _, l := range found {
		got = append(got, l.ID)
		assert.Contains(t, l.Card.Name, "Tide")
	}
	assert.True(t, slices.IsSorted(got) && slices.Contains(want, got[0]) && slices.Contains(want, got[1]), "origin order: %v", got)
	found, err = d.Search(ctx, sb.Query{Tag: "tides", Limit: 1})
	require.NoError(t, err)
	require.Len(t, found, 1)
	assert.Equal(t, got[0], found[0].ID)
	assert.Equal(t, 1, down.count(""), "a failure is remembered: the origin was asked once")
	_, err = d.Lookup(ctx, down.URL)
	require.ErrorIs(t, err, sb.ErrNotFound)
	assert.Contains(t, err.Error(), "503")
	clk.Advance(31 * time.Second)
	_, err = d.Lookup(ctx, down.URL)
	require.Error(t, err)
	assert.Equal(t, 2, down.count(""), "asked again after RetryAfter")
}
