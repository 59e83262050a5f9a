package switchboard_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

var ctx = context.Background()

// clock is a settable test clock: time moves only when a test advances it,
// and After fires when an advance reaches its deadline.
type clock struct {
	mu      sync.Mutex
	t       time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.t
		return ch
	}
	c.waiters = append(c.waiters, waiter{c.t.Add(d), ch})
	return ch
}

// Advance moves the clock forward by d and fires every timer now due.
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.t) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.t
	}
	c.waiters = kept
}

// timers reports how many After channels are waiting to fire.
func (c *clock) timers() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.waiters) }

// testQuotas are the default quotas without the cooldown, so tests of other
// rules may withdraw and ask again. antispam_test.go tests the defaults.
var testQuotas = switchboard.Quotas{Cooldown: -1}

// backends are the stores every domain test runs on.
var backends = []struct {
	name string
	open func(t testing.TB) store.Store
}{
	{"memory", func(t testing.TB) store.Store { return memory.New() }},
	{"bolt", func(t testing.TB) store.Store {
		s, err := bolt.Open(filepath.Join(t.TempDir(), "switchboard.db"), nil)
		require.NoError(t, err)
		return s
	}},
}

// harness is one Switchboard on one backend with a real local issuer and
// three humans: alice (agent alice-bot), bob (personas bob-desk, discoverable,
// and bob-private, not) and carol (agent carol-bot).
type harness struct {
	t     testing.TB
	sb    *switchboard.Switchboard
	st    store.Store
	clock *clock
	iss   *switchboardtest.Issuer

	alice, bob, carol switchboard.Human
}

// eachBackend runs fn as a subtest on every backend.
func eachBackend(t *testing.T, fn func(t *testing.T, h *harness)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t)
			t.Cleanup(func() { _ = st.Close() })
			fn(t, newHarness(t, st))
		})
	}
}

func newHarness(t testing.TB, st store.Store) *harness {
	t.Helper()
	iss, err := switchboardtest.NewIssuer("switchboard-test")
	require.NoError(t, err)
	t.Cleanup(iss.Close)
	clk := &clock{t: time.Now().UTC().Truncate(time.Second)}
	sb, err := switchboard.New(st, &switchboard.Config{Clock: clk, Issuers: []switchboard.Issuer{iss.Config()}, Quotas: testQuotas})
	require.NoError(t, err)
	h := &harness{t: t, sb: sb, st: st, clock: clk, iss: iss,
		alice: iss.Human("alice"), bob: iss.Human("bob"), carol: iss.Human("carol")}
	h.publish(h.alice, "alice-bot", true)
	h.publish(h.bob, "bob-desk", true)
	h.publish(h.bob, "bob-private", false)
	h.publish(h.carol, "carol-bot", true)
	return h
}

func card(name string) agentcard.Card {
	return switchboard.PersonaCard(switchboard.CardFields{
		Name: name, Description: "test agent " + name, Version: "1.0.0",
		URL:    "https://hub.example/agents/" + name,
		Skills: []agentcard.Skill{{ID: "todo", Name: "Todos", Description: "takes todos", Tags: []string{"todo"}}},
	})
}

func (h *harness) publish(owner switchboard.Human, id string, discoverable bool) {
	h.t.Helper()
	_, err := h.sb.Publish(ctx, switchboard.Persona{ID: id, Owner: owner, Card: card(id), Discoverable: discoverable})
	require.NoError(h.t, err)
}

// token mints a valid ID token for human bound to the request.
func (h *harness) token(human switchboard.Human, from, to string, sc switchboard.Scope, why string) string {
	return h.iss.Token(switchboardtest.Login{Subject: human.Subject, Name: human.Subject + " Example", Email: human.Subject + "@example.com", Nonce: nonce(from, to, sc, why), At: h.clock.Now()})
}

// testSecret is the pickup secret of every request the tests send;
// testPickup is its verifier.
var testSecret, testPickup = switchboard.NewPickup()

// nonce is the RequestNonce of a request with testPickup.
func nonce(from, to string, sc switchboard.Scope, why string) string {
	return switchboard.RequestNonce(switchboard.FriendRequest{From: from, To: to, Scope: sc, Why: why, Pickup: testPickup})
}

// request sends a correctly signed friend request on behalf of human.
func (h *harness) request(human switchboard.Human, from, to string, sc switchboard.Scope, why string) (switchboard.Edge, error) {
	e, _, err := h.sb.Request(ctx, switchboard.FriendRequest{Pickup: testPickup,
		From: from, To: to, Scope: sc, Why: why, IDToken: h.token(human, from, to, sc, why),
	})
	return e, err
}

// friend makes from a friend of to with scope and returns the credential.
func (h *harness) friend(human, approver switchboard.Human, from, to string, sc switchboard.Scope) (switchboard.Grant, switchboard.Credential) {
	h.t.Helper()
	e, err := h.request(human, from, to, sc, "let me send you work")
	require.NoError(h.t, err)
	_, err = h.sb.Approve(ctx, approver, e.ID, nil)
	require.NoError(h.t, err)
	g, cred, err := h.sb.Collect(ctx, e.ID, testSecret)
	require.NoError(h.t, err)
	return g, cred
}

// worker vends the owner's own agent the drain verbs on its queues.
func (h *harness) worker(owner switchboard.Human, persona string, queues ...string) switchboard.Credential {
	h.t.Helper()
	var sc switchboard.Scope
	for _, q := range queues {
		sc = append(sc, switchboard.ScopeEntry{Queue: q, Verbs: []switchboard.Verb{
			switchboard.VerbList, switchboard.VerbGet, switchboard.VerbClaim, switchboard.VerbHeartbeat,
			switchboard.VerbComplete, switchboard.VerbFail, switchboard.VerbRelease, switchboard.VerbCancel,
		}})
	}
	_, cred, err := h.sb.Vend(ctx, owner, switchboard.VendRequest{Agent: persona, Scope: sc})
	require.NoError(h.t, err)
	return cred
}

func scope(queue string, verbs ...switchboard.Verb) switchboard.Scope {
	return switchboard.Scope{{Queue: queue, Verbs: verbs}}
}

// dump is every key and value in the store, by table, for before/after
// comparisons. Tables are discovered through a recording wrapper.
func dump(t *testing.T, st store.Store, tables []string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	err := st.View(ctx, func(tx store.Tx) error {
		for _, tb := range tables {
			m := map[string]string{}
			if err := tx.Scan(tb, nil, nil, func(k, v []byte) bool { m[string(k)] = string(v); return true }); err != nil {
				return err
			}
			out[tb] = m
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// faultyStore wraps a real store, records the tables written, and can fail
// the n-th Put of the next Update.
type faultyStore struct {
	store.Store
	mu     sync.Mutex
	tables map[string]bool
	failAt int // 0: never
}

var errInjected = errors.New("injected failure")

func (f *faultyStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	f.mu.Lock()
	failAt := f.failAt
	f.mu.Unlock()
	return f.Store.Update(ctx, func(tx store.Tx) error {
		return fn(&faultyTx{Tx: tx, f: f, failAt: failAt})
	})
}

func (f *faultyStore) tableList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for t := range f.tables {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

type faultyTx struct {
	store.Tx
	f      *faultyStore
	failAt int
	puts   int
}

func (t *faultyTx) Put(table string, k, v []byte) error {
	t.puts++
	if t.failAt > 0 && t.puts == t.failAt {
		return errInjected
	}
	t.f.mu.Lock()
	t.f.tables[table] = true
	t.f.mu.Unlock()
	return t.Tx.Put(table, k, v)
}

// flakyStore is a real store that fails on demand, writing nothing: the
// failUpdate-th Update and the failView-th View from when each was set
// (0: none), and every View while failViews is set.
type flakyStore struct {
	store.Store
	failUpdate  atomic.Int32
	failView    atomic.Int32
	failViews   atomic.Bool
	viewsFailed atomic.Int32 // Views it failed
}

// errUnreachable is what flakyStore's failed calls return.
var errUnreachable = errors.New("the database cannot be reached")

func (f *flakyStore) Update(ctx context.Context, fn func(store.Tx) error) error {
	if f.failUpdate.Load() > 0 && f.failUpdate.Add(-1) == 0 {
		return errUnreachable
	}
	return f.Store.Update(ctx, fn)
}

func (f *flakyStore) View(ctx context.Context, fn func(store.Tx) error) error {
	if f.failViews.Load() || f.failView.Load() > 0 && f.failView.Add(-1) == 0 {
		f.viewsFailed.Add(1)
		return errUnreachable
	}
	return f.Store.View(ctx, fn)
}

func memoryStore(t testing.TB) store.Store {
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// cardKey is an ES256 card-signing key and the key set that trusts it.
type cardKey struct {
	priv jose.JSONWebKey
	pub  *jose.JSONWebKeySet
}

func newCardKey(t *testing.T, kid string) cardKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return cardKey{
		priv: jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: "ES256"},
		pub:  &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: k.Public(), KeyID: kid, Algorithm: "ES256", Use: "sig"}}},
	}
}

// TestMain runs the tests, then names on stderr each test that skipped
// for want of something on this machine, and why (switchboardtest.Skip).
func TestMain(m *testing.M) { switchboardtest.Main(m) }

// sameWords asserts that got, an error naming name, reads exactly as want,
// an error naming wantName: a not-found names what the caller asked for,
// and nothing else tells "does not exist" from "not yours" apart.
func sameWords(t *testing.T, want error, wantName string, got error, name, msg string) {
	t.Helper()
	require.Error(t, want)
	require.Error(t, got)
	assert.Equal(t, want.Error(), strings.ReplaceAll(got.Error(), strconv.Quote(name), strconv.Quote(wantName)), msg)
}

// unpackEvents rewrites the audit log's blocks (several events to a
// record, as a store at layout 9 writes them; see auditlog.Layout.Entries)
// as one event to a record under its seq — the form every version reads,
// and the one the tests that damage a single event's record edit. The log
// itself is unchanged: the same events, the same tree hashes.
func unpackEvents(t *testing.T, st store.Store) {
	t.Helper()
	require.NoError(t, st.Update(ctx, func(tx store.Tx) error {
		type rec struct{ k, v []byte }
		var blocks []rec
		if err := tx.Scan("events", nil, nil, func(k, v []byte) bool {
			if len(k) == 9 {
				blocks = append(blocks, rec{bytes.Clone(k), bytes.Clone(v)})
			}
			return true
		}); err != nil {
			return err
		}
		for _, b := range blocks {
			last := binary.BigEndian.Uint64(b.k)
			count, w := binary.Uvarint(b.v)
			v := b.v[w:]
			for seq := last - count + 1; seq <= last; seq++ {
				l, w := binary.Uvarint(v)
				n := int(l) + auditlog.LeafHashes(seq-1)*tlog.HashSize
				if err := tx.Put("events", be64(seq), bytes.Clone(v[w:w+n])); err != nil {
					return err
				}
				v = v[w+n:]
			}
			if err := tx.Delete("events", b.k); err != nil {
				return err
			}
		}
		return nil
	}))
}
