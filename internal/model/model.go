// Package model checks switchboard's promises as a whole: a reference
// model of what the library's users can observe, and random histories of
// the public verbs a host, a human, an agent and an operator call —
// generated, run and, when one breaks a promise, shrunk to a short
// readable script by pgregory.net/rapid. Each step's outcome is predicted
// by the model and compared; invariants are checked after every step.
//
// The model holds personas, friend edges (pending, approved, denied,
// withdrawn, expired, replaced, revoked), grants (live, expired at their
// instant, lapsed uncollected, replaced, revoked), the todos of one queue
// with their states, priorities, availability, attempts and leases, dedup
// keys, webhooks and the deliveries queued to them, and the audit log's
// checkpoints. Verbs: request, approve (narrowed, with a lifetime), deny,
// withdraw, collect, revoke (either side), create (with dedup keys and
// priorities), claim, claim N, complete and claim, work, heartbeat,
// complete, fail, release, cancel, redrive, register a webhook, friend
// views (Get, List), reap, checkpoint, check the log, verify the audit
// log, and the clock stepping past leases, backoffs, pickup windows,
// expiries and retention windows. Adversarial steps: a rewrite of the
// store (an event rewritten and retention's mark moved), a second signer
// on the same store, a witness that refuses or hangs, and, where the store
// joins an application's transaction, writes and proofs rolled back.
//
// Check runs it; the root package runs it on the memory and bolt stores
// in every go test, store/postgres on PostgreSQL. -rapid.checks and
// -rapid.steps make longer runs; a failing history is saved under
// testdata/rapid and run first from then on.
package model

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"
	"pgregory.net/rapid"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/switchboardtest"
	"github.com/switchboardhq/switchboard/witness"
)

// Options says what store a history runs on and what it supports.
type Options struct {
	// Open returns a new, empty store for one history, which may keep its
	// files in dir; it is closed after.
	Open func(dir string) (store.Store, error)
	// Tx, if set, begins an application's transaction the store's calls
	// can join (store/postgres's WithTx): the context calls join it under,
	// and its commit and rollback. Histories then include writes and DPoP
	// proofs made inside one and rolled back or committed.
	Tx func(ctx context.Context) (context.Context, func() error, func() error, error)
	// NoRestore leaves out the restore of an older copy of the store
	// (where a process's sequencer runs beside the history, as on
	// PostgreSQL, what it saw of the log is not the model's to predict).
	NoRestore bool
}

// The model's fixed world: three humans, their agents, one queue.
const (
	queue  = "inbox"
	target = "bob-desk"
)

var friends = []string{"alice-bot", "carol-bot"}

var ownerOf = map[string]string{"alice-bot": "alice", "carol-bot": "carol", target: "bob"}

// Timing, short enough that histories cross every window.
const (
	pendingTTL     = 40 * time.Minute
	pickupWindow   = 20 * time.Minute
	dedupRetention = time.Hour
	todoRetention  = 3 * time.Hour
	eventRetention = 6 * time.Hour
	defaultLease   = 5 * time.Minute
	maxAttempts    = 3
)

// Check runs random histories against a Switchboard on the stores o.Open
// gives, and fails t with the shortest history it finds that breaks a
// promise.
func Check(t *testing.T, o Options) {
	t.Helper()
	iss, err := switchboardtest.NewIssuer("model")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iss.Close)
	skey, vkey, err := sb.NewLogKey("model.test/log")
	if err != nil {
		t.Fatal(err)
	}
	wpriv, wkey, err := witness.NewKey("model.test/witness")
	if err != nil {
		t.Fatal(err)
	}
	if f := flag.Lookup("rapid.steps"); f != nil && f.Value.String() == f.DefValue {
		// Histories long enough to reach the interactions: a
		// replacement then a claim, a lifetime then a step past it.
		_ = f.Value.Set("100")
		defer f.Value.Set(f.DefValue)
	}
	rapid.Check(t, func(rt *rapid.T) {
		w := newWorld(rt, o, iss, skey, vkey, wpriv, wkey)
		defer w.close()
		rt.Repeat(w.actions())
	})
}

// clock is the histories' clock: it moves only when a step moves it.
// After waits in real time (the sequencer's and subscriptions' polling).
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) After(d time.Duration) <-chan time.Time {
	return time.After(min(d, 50*time.Millisecond))
}
func (c *clock) step(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// witnessMode is how the model's witness answers.
type witnessMode int

const (
	witnessOK witnessMode = iota
	witnessRefuses
	witnessHangs
)

// modelWitness is a real witness.Server that can be told to refuse (as a
// witness that saw another history would) or to hang.
type modelWitness struct {
	mu   sync.Mutex
	srv  *witness.Server
	mode witnessMode
}

func (m *modelWitness) AddCheckpoint(ctx context.Context, old uint64, proof []tlog.Hash, cp []byte) ([]byte, error) {
	m.mu.Lock()
	mode := m.mode
	m.mu.Unlock()
	switch mode {
	case witnessRefuses:
		return nil, fmt.Errorf("%w: the model's witness saw another history", sb.ErrWitnessRefused)
	case witnessHangs:
		<-ctx.Done()
		return nil, ctx.Err()
	}
	// A witness that answers answers, however long a loaded machine (the
	// race detector, other tests) takes over it: the short Timeout the
	// model configures is for the hanging witness alone.
	return m.srv.AddCheckpoint(context.WithoutCancel(ctx), old, proof, cp)
}

type edge struct {
	n             int // creation order: histories pick by it, never by random ids, so a replay picks the same
	id, from, why string
	requested     sb.Scope
	state         sb.EdgeState
	secret        string
	grant         string
	expires       time.Time // a pending edge's lapse
	req           sb.FriendRequest
}

type grant struct {
	n                int // creation order
	id, holder, edge string
	scope            sb.Scope
	state            sb.GrantState
	expires          time.Time
	collectBy        time.Time // zero once collected
	replacedBy       string
	replaces         string
	cred             sb.Credential
	friend           bool
}

// live is Grant.live's rule.
func (g *grant) live(now time.Time) bool {
	return g.state == sb.GrantActive && (g.expires.IsZero() || now.Before(g.expires)) &&
		(g.collectBy.IsZero() || now.Before(g.collectBy))
}

func (g *grant) has(v sb.Verb) bool { return g.scope.Allows(queue, v) }

type todo struct {
	id, title, origin, dedup string
	state                    sb.TodoState
	priority                 int
	available                time.Time
	seq                      int
	attempts                 int
	lease                    string // the current lease's token
	leaseExpires, claimedAt  time.Time
	holder                   string // the grant holding the lease
	claimedBy                map[string]bool
	ended                    time.Time
	purged                   bool
}

// lease is a lease the model handed out, current or not.
type lease struct {
	l     sb.Lease
	grant string // the grant that claimed it
}

type hook struct {
	id, grant  string
	deliveries int             // queued while its grant was live
	dead       map[string]bool // the deliveries there were when its grant died (nil while live)
}

// world is one history: the Switchboard under test and the model.
type world struct {
	t           *rapid.T
	o           Options
	st          store.Store
	sb          *sb.Switchboard
	cfg         sb.Config
	clock       *clock
	iss         *switchboardtest.Issuer
	wit         *modelWitness
	vkey, wkey  string
	dir         string
	worker      *grant
	edges       map[string]*edge
	grants      map[string]*grant
	todos       map[string]*todo
	order       []string
	seq         int
	dedup       map[string]string // grant \x00 key → todo id
	leases      []lease
	hooks       map[string]*hook
	checkpoints []sb.Checkpoint
	tampered    bool // the log's checks must refuse from now on (rewritten, or restored behind what was signed)
	rewritten   bool // an event was rewritten: VerifyAudit must fail
	backup      *backup
	seenSize    uint64    // the largest log this process signed or checked
	seenAt      time.Time // when
	seenEpoch   int       // in which history
	// epochs are the histories the log has had: each restore of an
	// older copy starts one, branching from the copy's at its size.
	epochs       []epochOf
	epoch        int   // the current one
	cpEpoch      []int // the epoch of each of checkpoints
	requests     int
	logLen       uint64
	lastStored   []byte // the stored checkpoint last seen
	steps        int    // steps run
	logTouched   bool   // the last step signed, checked or rewrote the log
	friendOfEdge map[string]string
}

func newWorld(t *rapid.T, o Options, iss *switchboardtest.Issuer, skey, vkey string, wpriv ed25519.PrivateKey, wkey string) *world {
	dir, err := os.MkdirTemp("", "model")
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, o: o, iss: iss, vkey: vkey, wkey: wkey, dir: dir, epochs: []epochOf{{parent: -1}},
		clock: &clock{t: time.Date(2031, 3, 1, 9, 0, 0, 0, time.UTC)},
		edges: map[string]*edge{}, grants: map[string]*grant{}, todos: map[string]*todo{},
		dedup: map[string]string{}, hooks: map[string]*hook{}, friendOfEdge: map[string]string{}}
	if w.st, err = o.Open(dir); err != nil {
		t.Fatal(err)
	}
	srv, err := witness.NewServer(witness.Config{Name: "model.test/witness", Key: wpriv, Store: memory.New(),
		Logs: []witness.Log{{Origin: "model.test/log", Keys: []string{vkey}}}, Logger: slog.New(slog.DiscardHandler),
		Now: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	w.wit = &modelWitness{srv: srv}
	w.cfg = sb.Config{
		Clock: w.clock, Issuers: []sb.Issuer{iss.Config()}, Logger: slog.New(slog.DiscardHandler),
		Quotas:     sb.Quotas{Cooldown: -1, RequesterBurst: 10000, TargetBurst: 10000, LiveEdgesPerRequester: 1000, PendingPerTarget: 1000},
		PendingTTL: pendingTTL, PickupWindow: pickupWindow, DedupRetention: dedupRetention, TodoRetention: todoRetention,
		EventRetention: eventRetention, DefaultLease: defaultLease, MaxAttempts: maxAttempts, MaxTokenAge: 24 * time.Hour,
		LogKey: skey, Checkpoints: sb.CheckpointFile(filepath.Join(dir, "kept")),
		Witnesses: []sb.WitnessConfig{{Witness: w.wit, Key: wkey, Timeout: 30 * time.Millisecond}},
		Webhooks:  &sb.WebhookConfig{Key: bytes.Repeat([]byte{7}, 32), Origins: []string{"https://hooks.model.test"}},
	}
	w.sb, err = sb.New(w.st, &w.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for id, owner := range ownerOf {
		_, err := w.sb.Publish(ctx, sb.Persona{ID: id, Owner: iss.Human(owner), Discoverable: true,
			Card: sb.PersonaCard(sb.CardFields{Name: id, Description: "the model's " + id, Version: "1.0", URL: "https://model.test/agents/" + id})})
		if err != nil {
			t.Fatal(err)
		}
	}
	drain := sb.Scope{{Queue: queue, Verbs: []sb.Verb{sb.VerbList, sb.VerbGet, sb.VerbClaim, sb.VerbHeartbeat,
		sb.VerbComplete, sb.VerbFail, sb.VerbRelease, sb.VerbCancel, sb.VerbRedrive}}}
	g, cred, err := w.sb.Vend(ctx, iss.Human("bob"), sb.VendRequest{Agent: target, Scope: drain})
	if err != nil {
		t.Fatal(err)
	}
	w.worker = &grant{id: g.ID, holder: target, scope: g.Scope, state: sb.GrantActive, cred: cred}
	w.grants[g.ID] = w.worker
	return w
}

func (w *world) close() {
	_ = w.sb.Close()
	_ = w.st.Close()
	_ = os.RemoveAll(w.dir)
}

// step logs one step of the history in words: the readable script a
// failing (shrunk) history prints.
func (w *world) step(format string, args ...any) {
	w.t.Logf("%s  "+format, append([]any{w.clock.Now().Format("15:04:05")}, args...)...)
}

func (w *world) now() time.Time { return w.clock.Now() }

// fail reports a broken promise, in the model's names: every id the
// model knows becomes its name (t3, grant 2 of alice-bot, request 4), and
// any other id a placeholder — the same failure reads the same in every
// run, which is what lets rapid shrink the history that shows it.
func (w *world) fail(format string, args ...any) {
	w.t.Helper()
	msg := fmt.Sprintf(format, args...)
	var names []string
	for id, td := range w.todos {
		names = append(names, id, td.title)
	}
	for id, g := range w.grants {
		names = append(names, id, fmt.Sprintf("grant %d of %s", g.n, g.holder))
	}
	for id, e := range w.edges {
		names = append(names, id, e.why)
	}
	for id, h := range w.hooks {
		names = append(names, id, "webhook of "+w.grants[h.grant].holder)
	}
	for _, l := range w.leases {
		names = append(names, l.l.Token, "lease of "+w.todos[l.l.TodoID].title)
	}
	msg = strings.NewReplacer(names...).Replace(msg)
	msg = anyID.ReplaceAllString(msg, "${1}_…")
	w.t.Fatalf("PROMISE BROKEN: %s", msg)
}

// anyID matches the ids switchboard makes.
var anyID = regexp.MustCompile(`\b(todo|grant|edge|lease|whk|hook|webhook)_[0-9A-Za-z_-]+`)

// expect compares an error with the model's expectation: nil, or an error
// matching want.
func (w *world) expect(what string, err, want error) {
	w.t.Helper()
	switch {
	case want == nil && err != nil:
		w.fail("%s: want success, got %v", what, err)
	case want != nil && !errors.Is(err, want):
		w.fail("%s: want an error matching %q, got %v", what, want, err)
	}
}

func (w *world) actions() map[string]func(*rapid.T) {
	a := map[string]func(*rapid.T){
		// Weights: rapid draws actions uniformly, so the common ones
		// are listed more than once, and befriend runs a whole
		// request, approval and collection in one step.
		"befriend":  w.befriend,
		"befriend2": w.befriend,
		"create2":   w.create,
		"create3":   w.create,
		"claim2":    w.claim,
		"claim3":    w.claim,
		"step2":     w.stepClock,
		"request":   w.request,
		"resend":    w.resend,
		"approve":   w.approve,
		"deny":      w.deny,
		"withdraw":  w.withdraw,
		"collect":   w.collect,
		"revoke":    w.revoke,
		"create":    w.create,
		"claim":     w.claim,
		"cmpclaim":  w.completeAndClaim,
		"work":      w.work,
		"heart":     w.heartbeat,
		"finish":    w.finish,
		"cancel":    w.cancel,
		"redrive":   w.redrive,
		"hook":      w.registerHook,
		"view":      w.view,
		"step":      w.stepClock,
		"reap":      w.reap,
		"cp":        w.checkpoint,
		"checklog":  w.checkLog,
		"signer2":   w.secondSigner,
		"witness":   w.setWitness,
		"tamper":    w.tamper,
		"":          w.invariants,
	}
	if !w.o.NoRestore {
		a["backup"] = w.takeBackup
		a["restore"] = w.restore
	}
	if w.o.Tx != nil {
		a["txcreate"] = w.txCreate
		a["txprove"] = w.txProve
	}
	return a
}

// ---- friending ----

func (w *world) directionPending(from string) *edge {
	for _, e := range w.edges {
		if e.from == from && e.state == sb.EdgePending {
			return e
		}
	}
	return nil
}

func (w *world) liveEdge(from string) *edge {
	for _, e := range w.edges {
		if e.from == from && e.state == sb.EdgeApproved {
			return e
		}
	}
	return nil
}

var grantable = []sb.Verb{sb.VerbCreateFor, sb.VerbGet, sb.VerbList, sb.VerbClaim, sb.VerbHeartbeat, sb.VerbComplete, sb.VerbFail, sb.VerbRelease, sb.VerbWebhook}

func drawVerbs(t *rapid.T, from []sb.Verb, label string) []sb.Verb {
	vs := rapid.SliceOfNDistinct(rapid.SampledFrom(from), 1, len(from), func(v sb.Verb) sb.Verb { return v }).Draw(t, label)
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	return vs
}

func (w *world) request(t *rapid.T) {
	from := rapid.SampledFrom(friends).Draw(t, "from")
	verbs := drawVerbs(t, grantable, "verbs")
	w.requests++
	why := fmt.Sprintf("request %d", w.requests)
	secret, pickup := sb.NewPickup()
	r := sb.FriendRequest{From: from, To: target, Scope: sb.Scope{{Queue: queue, Verbs: verbs}}, Why: why, Pickup: pickup}
	r.IDToken = w.iss.RequestToken(ownerOf[from], r, w.now())
	w.step("%s asks %s for %v (%s)", from, target, verbs, why)
	e, created, err := w.sb.Request(context.Background(), r)
	if p := w.directionPending(from); p != nil {
		if !w.lapsed(p) {
			w.expect("a second pending request in one direction", err, sb.ErrConflict)
			return
		}
		w.expireEdge(p) // the next look at a lapsed request expires it
	}
	w.expect("request", err, nil)
	if !created || e.State != sb.EdgePending {
		w.fail("request: created %v, state %s", created, e.State)
	}
	w.edges[e.ID] = &edge{n: len(w.edges) + 1, id: e.ID, from: from, why: why, requested: sb.Normalize(r.Scope), state: sb.EdgePending,
		secret: secret, expires: w.now().Add(pendingTTL), req: r}
}

// resend sends a pending request again, the same token and all: an
// idempotent retry, or a replay once the edge moved on.
func (w *world) resend(t *rapid.T) {
	var es []*edge
	for _, e := range w.edges {
		es = append(es, e)
	}
	if len(es) == 0 {
		t.Skip("no request")
	}
	sort.Slice(es, func(i, j int) bool { return es[i].n < es[j].n })
	e := pick(t, es, "edge", func(e *edge) string { return e.why })
	w.step("%s sends %s again", e.from, e.why)
	got, created, err := w.sb.Request(context.Background(), e.req)
	if e.state == sb.EdgePending && w.now().Before(e.expires) {
		w.expect("an identical retry of a pending request", err, nil)
		if created || got.ID != e.id {
			w.fail("the retry made a new edge (%s, created %v)", got.ID, created)
		}
		return
	}
	if err == nil && created {
		w.fail("a spent token made a new request %s", got.ID)
	}
}

func (w *world) pendingEdges() []*edge {
	var es []*edge
	for _, e := range w.edges {
		if e.state == sb.EdgePending {
			es = append(es, e)
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].n < es[j].n })
	return es
}

// lapse expires a pending edge past its lapse, as the next look at it does.
func (w *world) lapsed(e *edge) bool { return e.state == sb.EdgePending && !w.now().Before(e.expires) }

func (w *world) approve(t *rapid.T) {
	es := w.pendingEdges()
	if len(es) == 0 {
		t.Skip("nothing pending")
	}
	w.approveEdge(t, pick(t, es, "edge", func(e *edge) string { return e.why }))
}

func (w *world) approveEdge(t *rapid.T, e *edge) {
	var narrowed sb.Scope
	if rapid.Bool().Draw(t, "narrow") {
		narrowed = sb.Scope{{Queue: queue, Verbs: drawVerbs(t, e.requested[0].Verbs, "narrowed")}}
	}
	var expires time.Time
	if life := rapid.SampledFrom([]time.Duration{0, 30 * time.Minute, 2 * time.Hour}).Draw(t, "lifetime"); life > 0 {
		expires = w.now().Add(life)
	}
	w.step("bob approves %s (%s) narrowed to %v, lasting until %v", e.why, e.from, narrowed, expires.Format("15:04"))
	g, err := w.sb.ApproveWith(context.Background(), w.iss.Human("bob"), e.id, sb.ApproveOptions{Scope: narrowed, ExpiresAt: expires})
	if w.lapsed(e) {
		if err == nil {
			w.fail("approved a lapsed request")
		}
		w.expireEdge(e)
		return
	}
	w.expect("approve", err, nil)
	scope := e.requested
	if narrowed != nil {
		scope = sb.Intersect(e.requested, narrowed)
	}
	if !sb.Equal(g.Scope, scope) || !sb.Subset(g.Scope, e.requested) {
		w.fail("approve: granted %v, want %v (requested %v, narrowed %v)", g.Scope, scope, e.requested, narrowed)
	}
	ng := &grant{n: len(w.grants) + 1, id: g.ID, holder: e.from, edge: e.id, scope: scope, state: sb.GrantActive, expires: expires,
		collectBy: w.now().Add(pickupWindow), friend: true}
	if old := w.liveEdge(e.from); old != nil {
		og := w.grants[old.grant]
		if og.live(w.now()) {
			og.state, og.replacedBy, ng.replaces = sb.GrantRevoked, ng.id, og.id
			old.state = sb.EdgeReplaced
			w.dropHooks(og.id)
		} else {
			w.revokeGrant(og)
			old.state = sb.EdgeRevoked
		}
	}
	e.state, e.grant = sb.EdgeApproved, g.ID
	w.grants[g.ID] = ng
}

func (w *world) expireEdge(e *edge) { e.state = sb.EdgeExpired }

// befriend is a friend's whole first contact in one step: it asks, bob
// approves (replacing a grant in the same direction, if any), and it
// collects.
func (w *world) befriend(t *rapid.T) {
	before := len(w.edges)
	w.request(t)
	if len(w.edges) == before {
		return // refused (a request already pending)
	}
	var e *edge
	for _, x := range w.edges {
		if x.why == fmt.Sprintf("request %d", w.requests) {
			e = x
		}
	}
	w.approveEdge(t, e)
	if e.state == sb.EdgeApproved {
		w.collectEdge(e)
	}
}

func (w *world) settle(t *rapid.T, deny bool) {
	es := w.pendingEdges()
	if len(es) == 0 {
		t.Skip("nothing pending")
	}
	e := pick(t, es, "edge", func(e *edge) string { return e.why })
	var err error
	if deny {
		w.step("bob denies %s", e.why)
		err = w.sb.Deny(context.Background(), w.iss.Human("bob"), e.id)
	} else {
		w.step("%s withdraws %s", ownerOf[e.from], e.why)
		err = w.sb.Withdraw(context.Background(), w.iss.Human(ownerOf[e.from]), e.id)
	}
	if w.lapsed(e) {
		if err == nil {
			w.fail("settled a lapsed request")
		}
		w.expireEdge(e)
		return
	}
	w.expect("deny/withdraw", err, nil)
	e.state = map[bool]sb.EdgeState{true: sb.EdgeDenied, false: sb.EdgeWithdrawn}[deny]
}

func (w *world) deny(t *rapid.T)     { w.settle(t, true) }
func (w *world) withdraw(t *rapid.T) { w.settle(t, false) }

func (w *world) collect(t *rapid.T) {
	var es []*edge
	for _, e := range w.edges {
		if e.grant != "" {
			es = append(es, e)
		}
	}
	if len(es) == 0 {
		t.Skip("nothing approved")
	}
	sort.Slice(es, func(i, j int) bool { return es[i].n < es[j].n })
	w.collectEdge(pick(t, es, "edge", func(e *edge) string { return e.why }))
}

func (w *world) collectEdge(e *edge) {
	g := w.grants[e.grant]
	w.step("%s collects the credential of %s", e.from, e.why)
	_, cred, err := w.sb.Collect(context.Background(), e.id, e.secret)
	if e.state == sb.EdgeApproved && g.cred == "" && g.live(w.now()) {
		w.expect("collect", err, nil)
		g.cred, g.collectBy = cred, time.Time{}
		return
	}
	if err == nil {
		w.fail("collected %s again, or after it ended (grant %s, edge %s)", g.id, g.state, e.state)
	}
}

// revokeGrant revokes g in the model, as revokeGrant does: its queued work
// and that of the grants it replaced, cancelled.
func (w *world) revokeGrant(g *grant) {
	if g.state != sb.GrantActive {
		return
	}
	g.state = sb.GrantRevoked
	for id, n := g.id, 0; id != "" && n < 64; n++ {
		for _, td := range w.todos {
			if td.origin == id && td.state == sb.TodoQueued {
				w.end(td, sb.TodoCancelled)
			}
		}
		id = w.grants[id].replaces
	}
	w.dropHooks(g.id)
}

// dropHooks forgets the webhooks of grant id: its revocation deleted them.
func (w *world) dropHooks(id string) {
	for hid, h := range w.hooks {
		if h.grant == id {
			delete(w.hooks, hid)
		}
	}
}

func (w *world) friendGrants() []*grant {
	var gs []*grant
	for _, g := range w.grants {
		if g.friend {
			gs = append(gs, g)
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].n < gs[j].n })
	return gs
}

func (w *world) revoke(t *rapid.T) {
	gs := w.friendGrants()
	if len(gs) == 0 {
		t.Skip("no grant")
	}
	g := pick(t, gs, "grant", func(g *grant) string { return g.holder + " " + g.id })
	who := rapid.SampledFrom([]string{"bob", ownerOf[g.holder]}).Draw(t, "by")
	w.step("%s revokes %s's grant %s", who, g.holder, g.id)
	err := w.sb.Revoke(context.Background(), w.iss.Human(who), g.id)
	w.expect("revoke", err, nil)
	e := w.edges[g.edge]
	if g.state == sb.GrantActive {
		w.revokeGrant(g)
		if e.state == sb.EdgeApproved {
			e.state = sb.EdgeRevoked
		}
	} else if g.replacedBy == "" {
		// Revoking a grant revoked before finishes cancelling its work.
		w.revokeGrant(&grant{id: g.id, state: sb.GrantActive, replaces: g.replaces})
	}
}

// ---- todos ----

func (w *world) credentialed() []*grant {
	var gs []*grant
	for _, g := range w.friendGrants() {
		if g.cred != "" {
			gs = append(gs, g)
		}
	}
	return gs
}

// originLive is originLive's rule.
func (w *world) originLive(id string) bool {
	for n := 0; id != "" && n < 64; n++ {
		g := w.grants[id]
		if g.live(w.now()) {
			return true
		}
		if g.state != sb.GrantRevoked || g.replacedBy == "" {
			return false
		}
		id = g.replacedBy
	}
	return false
}

func (w *world) create(t *rapid.T) {
	gs := w.credentialed()
	if len(gs) == 0 {
		t.Skip("no credential")
	}
	g := pick(t, gs, "grant", func(g *grant) string { return g.holder + " " + g.id })
	key := rapid.SampledFrom([]string{"", "k1", "k2"}).Draw(t, "dedup")
	prio := rapid.IntRange(0, 2).Draw(t, "priority")
	w.seq++
	title := fmt.Sprintf("t%d", w.seq)
	w.step("%s creates %s (dedup %q, priority %d)", g.holder, title, key, prio)
	td, created, err := w.sb.CreateFor(context.Background(), g.cred, queue, sb.NewTodo{Kind: "job", Title: title, Priority: prio, DedupKey: key})
	switch {
	case !g.live(w.now()):
		w.expect("create under a dead grant", err, sb.ErrUnauthenticated)
		return
	case !g.has(sb.VerbCreateFor):
		w.expect("create without create_for", err, sb.ErrForbidden)
		return
	}
	w.expect("create", err, nil)
	if key != "" {
		if id, ok := w.dedup[g.id+"\x00"+key]; ok {
			old := w.todos[id]
			if !old.purged && (!old.state.Terminal() || w.now().Before(old.ended.Add(dedupRetention))) {
				if created || td.ID != id {
					w.fail("dedup key %q: want todo %s again, got %s (created %v)", key, id, td.ID, created)
				}
				return
			}
		}
	}
	if !created {
		w.fail("create: an existing todo %s came back", td.ID)
	}
	w.todos[td.ID] = &todo{id: td.ID, title: title, origin: g.id, dedup: key, state: sb.TodoQueued, priority: prio,
		available: w.now(), seq: w.seq, claimedBy: map[string]bool{}}
	w.order = append(w.order, td.ID)
	if key != "" {
		w.dedup[g.id+"\x00"+key] = td.ID
	}
}

// end ends a todo in the model, with the webhook its outcome queues.
func (w *world) end(td *todo, state sb.TodoState) {
	td.state, td.ended, td.lease = state, w.now(), ""
	w.outcome(td)
}

// outcome counts the delivery an outcome queues to the webhooks of the
// grant that created td, while it is live.
func (w *world) outcome(td *todo) {
	g := w.grants[td.origin]
	if g == nil || !g.live(w.now()) || !g.has(sb.VerbWebhook) {
		return
	}
	for _, h := range w.hooks {
		if h.grant == g.id {
			h.deliveries++
		}
	}
}

// recover re-queues or dead-letters td's lapsed lease, as a claim or Reap
// does.
func (w *world) recover(td *todo) {
	if td.state != sb.TodoLeased || w.now().Before(td.leaseExpires) {
		return
	}
	if td.attempts >= maxAttempts {
		w.end(td, sb.TodoDead)
		return
	}
	td.state, td.lease, td.available = sb.TodoQueued, "", w.now()
}

// ready lists the queued todos due now, in claim order.
func (w *world) ready() []*todo {
	var out []*todo
	for _, id := range w.order {
		td := w.todos[id]
		if td.state == sb.TodoQueued && !td.purged && !td.available.After(w.now()) {
			out = append(out, td)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.priority != b.priority {
			return a.priority > b.priority
		}
		if !a.available.Equal(b.available) {
			return a.available.Before(b.available)
		}
		return a.seq < b.seq
	})
	return out
}

// predictClaim is what a claim of n by g must do: the todos it hands out,
// in order, cancelling each dead grant's todo it meets first.
func (w *world) predictClaim(g *grant, n int) []*todo {
	for _, id := range w.order {
		w.recover(w.todos[id])
	}
	var out []*todo
	for _, td := range w.ready() {
		if len(out) == n {
			break
		}
		if td.origin != g.id && !w.originLive(td.origin) {
			w.end(td, sb.TodoCancelled)
			continue
		}
		out = append(out, td)
	}
	return out
}

// took records that g leased td with l.
func (w *world) took(g *grant, td *todo, l sb.Lease, d time.Duration) {
	if d == 0 {
		d = defaultLease
	}
	td.attempts++
	td.state, td.lease, td.leaseExpires, td.claimedAt, td.holder = sb.TodoLeased, l.Token, w.now().Add(d), w.now(), g.id
	td.claimedBy[g.id] = true
	if !l.ExpiresAt.Equal(td.leaseExpires) || l.Attempt != td.attempts {
		w.fail("claim of %s: lease until %v attempt %d, want %v attempt %d", td.title, l.ExpiresAt, l.Attempt, td.leaseExpires, td.attempts)
	}
	w.leases = append(w.leases, lease{l: l, grant: g.id})
}

// claimers are the grants that may claim: the owner's worker, and friends
// holding claim.
func (w *world) claimers() []*grant {
	gs := []*grant{w.worker}
	for _, g := range w.credentialed() {
		if g.has(sb.VerbClaim) {
			gs = append(gs, g)
		}
	}
	return gs
}

// compareClaim checks what a claim handed out against the prediction.
func (w *world) compareClaim(what string, g *grant, got []sb.Claimed, err error, want []*todo, d time.Duration) {
	w.t.Helper()
	if len(want) == 0 {
		if what == "CompleteAndClaim" {
			// "An empty queue is not an error: the completion stands
			// and next is empty."
			w.expect(what+" with nothing ready", err, nil)
			if len(got) > 0 {
				w.fail("%s handed out %d todos from an empty queue", what, len(got))
			}
			return
		}
		w.expect(what+" of an empty queue", err, sb.ErrQueueEmpty)
		return
	}
	w.expect(what, err, nil)
	if len(got) != len(want) {
		w.fail("%s: handed out %d todos, want %d (%v)", what, len(got), len(want), titles(want))
	}
	for i, c := range got {
		if c.Todo.ID != want[i].id {
			w.fail("%s: handed out %s, want %s (the queue in order: %v)", what, c.Todo.ID, want[i].title, titles(want))
		}
		w.took(g, want[i], c.Lease, d)
		if g.friend && c.Todo.Origin.Grant != "" && c.Todo.Origin.Grant != g.id {
			w.fail("%s: a friend sees the grant %s of another party's todo", what, c.Todo.Origin.Grant)
		}
	}
}

// pick draws one of xs, logged by its name.
func pick[X any](t *rapid.T, xs []X, label string, name func(X) string) X {
	names := make([]string, len(xs))
	for i, x := range xs {
		names[i] = fmt.Sprintf("%d: %s", i, name(x))
	}
	n := rapid.SampledFrom(names).Draw(t, label)
	var i int
	fmt.Sscanf(n, "%d:", &i)
	return xs[i]
}

func titles(ts []*todo) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.title)
	}
	return out
}

func (w *world) claim(t *rapid.T) {
	g := pick(t, w.claimers(), "claimer", func(g *grant) string { return g.holder + " " + g.id })
	n := rapid.IntRange(1, 3).Draw(t, "n")
	d := rapid.SampledFrom([]time.Duration{0, time.Minute, 10 * time.Minute}).Draw(t, "lease")
	opts := &sb.ClaimOptions{Lease: d}
	if !g.live(w.now()) {
		_, err := w.sb.ClaimN(context.Background(), g.cred, queue, n, opts)
		w.expect("claim under a dead grant", err, sb.ErrUnauthenticated)
		return
	}
	w.step("%s claims %d (lease %v)", g.holder, n, d)
	want := w.predictClaim(g, n)
	if n == 1 && rapid.Bool().Draw(t, "single") {
		td, l, err := w.sb.Claim(context.Background(), g.cred, queue, opts)
		var got []sb.Claimed
		if err == nil {
			got = []sb.Claimed{{Todo: td, Lease: l}}
		}
		w.compareClaim("Claim", g, got, err, want, d)
		return
	}
	got, err := w.sb.ClaimN(context.Background(), g.cred, queue, n, opts)
	w.compareClaim("ClaimN", g, got, err, want, d)
}

// current is the leases the model holds that are current (their todo is
// still leased under them and unexpired).
func (w *world) held(g *grant) []lease {
	var out []lease
	for _, l := range w.leases {
		td := w.todos[l.l.TodoID]
		if l.grant == g.id && td.state == sb.TodoLeased && td.lease == l.l.Token && w.now().Before(td.leaseExpires) {
			out = append(out, l)
		}
	}
	return out
}

func (w *world) completeAndClaim(t *rapid.T) {
	ls := w.held(w.worker)
	if len(ls) == 0 || !w.grants[w.worker.id].live(w.now()) {
		t.Skip("no lease held")
	}
	l := pick(t, ls, "lease", func(l lease) string { return w.todos[l.l.TodoID].title + " " + l.l.Token })
	n := rapid.IntRange(1, 2).Draw(t, "n")
	td := w.todos[l.l.TodoID]
	w.step("bob-desk completes %s and claims %d", td.title, n)
	got, err := w.sb.CompleteAndClaim(context.Background(), w.worker.cred, l.l, nil, n, nil)
	w.end(td, sb.TodoDone)
	want := w.predictClaim(w.worker, n)
	w.compareClaim("CompleteAndClaim", w.worker, got, err, want, 0)
}

func (w *world) work(t *rapid.T) {
	w.step("bob-desk works the queue until it is empty")
	var got []string
	err := w.sb.Work(context.Background(), w.worker.cred, queue, func(_ context.Context, td sb.Todo) ([]byte, error) {
		got = append(got, td.ID)
		return nil, nil
	}, &sb.WorkOptions{UntilEmpty: true})
	w.expect("Work", err, nil)
	var want []string
	for {
		next := w.predictClaim(w.worker, 1)
		if len(next) == 0 {
			break
		}
		next[0].attempts++
		next[0].claimedBy[w.worker.id] = true
		w.end(next[0], sb.TodoDone)
		want = append(want, next[0].id)
	}
	if !slices.Equal(got, want) {
		w.fail("Work handled %v, want %v", got, want)
	}
}

// anyLease is a lease the model handed out, current or stale.
func (w *world) anyLease(t *rapid.T) lease {
	if len(w.leases) == 0 {
		t.Skip("no lease")
	}
	return pick(t, w.leases, "lease", func(l lease) string { return w.todos[l.l.TodoID].title + " " + l.l.Token })
}

// leaseErr is what a lease verb by l's holder must answer now.
func (w *world) leaseErr(l lease, v sb.Verb) error {
	g := w.grants[l.grant]
	td := w.todos[l.l.TodoID]
	switch {
	case !g.live(w.now()):
		return sb.ErrUnauthenticated
	case !g.has(v) || td.purged:
		return sb.ErrNotFound // what the grant may not address looks like what does not exist
	case td.state != sb.TodoLeased || td.lease != l.l.Token || !w.now().Before(td.leaseExpires):
		return sb.ErrLeaseLost
	}
	return nil
}

func (w *world) heartbeat(t *rapid.T) {
	l := w.anyLease(t)
	d := rapid.SampledFrom([]time.Duration{0, 2 * time.Minute, 30 * time.Minute}).Draw(t, "for")
	td := w.todos[l.l.TodoID]
	g := w.grants[l.grant]
	w.step("%s heartbeats %s for %v", g.holder, td.title, d)
	got, err := w.sb.Heartbeat(context.Background(), g.cred, l.l, d)
	want := w.leaseErr(l, sb.VerbHeartbeat)
	w.expect("heartbeat", err, want)
	if want != nil {
		return
	}
	if d == 0 {
		d = defaultLease
	}
	exp := w.now().Add(d)
	if ceiling := td.claimedAt.Add(24 * time.Hour); exp.After(ceiling) {
		exp = ceiling
	}
	if exp.After(td.leaseExpires) {
		td.leaseExpires = exp
	}
	if !got.ExpiresAt.Equal(td.leaseExpires) {
		w.fail("heartbeat: lease until %v, want %v", got.ExpiresAt, td.leaseExpires)
	}
}

func (w *world) finish(t *rapid.T) {
	l := w.anyLease(t)
	how := rapid.SampledFrom([]sb.Verb{sb.VerbComplete, sb.VerbFail, sb.VerbRelease}).Draw(t, "how")
	td := w.todos[l.l.TodoID]
	g := w.grants[l.grant]
	w.step("%s %ss %s", g.holder, how, td.title)
	var err error
	ctx := context.Background()
	switch how {
	case sb.VerbComplete:
		err = w.sb.Complete(ctx, g.cred, l.l, []byte(`{"ok":true}`))
	case sb.VerbFail:
		err = w.sb.Fail(ctx, g.cred, l.l, "could not")
	case sb.VerbRelease:
		err = w.sb.Release(ctx, g.cred, l.l)
	}
	want := w.leaseErr(l, how)
	w.expect(string(how), err, want)
	if want != nil {
		return
	}
	switch how {
	case sb.VerbComplete:
		w.end(td, sb.TodoDone)
	case sb.VerbFail:
		if td.attempts >= maxAttempts {
			w.end(td, sb.TodoDead)
			return
		}
		backoff := 30 * time.Second << (td.attempts - 1)
		td.state, td.lease, td.available = sb.TodoQueued, "", w.now().Add(min(backoff, 15*time.Minute))
		w.outcome(td)
	case sb.VerbRelease:
		td.attempts--
		td.state, td.lease, td.available = sb.TodoQueued, "", w.now()
	}
}

func (w *world) pickTodo(t *rapid.T) *todo {
	if len(w.order) == 0 {
		t.Skip("no todo")
	}
	return w.todos[pick(t, w.order, "todo", func(id string) string { return w.todos[id].title })]
}

func (w *world) cancel(t *rapid.T) {
	td := w.pickTodo(t)
	w.step("bob-desk cancels %s", td.title)
	err := w.sb.Cancel(context.Background(), w.worker.cred, td.id, "not wanted")
	switch {
	case td.purged:
		w.expect("cancel a purged todo", err, sb.ErrNotFound)
	case td.state != sb.TodoQueued:
		w.expect("cancel a todo that is not queued", err, sb.ErrInvalidTransition)
	default:
		w.expect("cancel", err, nil)
		w.end(td, sb.TodoCancelled)
	}
}

func (w *world) redrive(t *rapid.T) {
	td := w.pickTodo(t)
	w.step("bob-desk redrives %s", td.title)
	err := w.sb.Redrive(context.Background(), w.worker.cred, td.id)
	switch {
	case td.purged:
		w.expect("redrive a purged todo", err, sb.ErrNotFound)
	case td.state != sb.TodoDead:
		w.expect("redrive a todo that is not dead", err, sb.ErrInvalidTransition)
	default:
		w.expect("redrive", err, nil)
		td.state, td.attempts, td.available, td.ended = sb.TodoQueued, 0, w.now(), time.Time{}
	}
}

// ---- webhooks ----

func (w *world) registerHook(t *rapid.T) {
	gs := w.credentialed()
	if len(gs) == 0 {
		t.Skip("no credential")
	}
	g := pick(t, gs, "grant", func(g *grant) string { return g.holder + " " + g.id })
	w.step("%s registers a webhook", g.holder)
	h, _, err := w.sb.RegisterWebhook(context.Background(), g.cred, "https://hooks.model.test/"+g.holder)
	switch {
	case !g.live(w.now()):
		w.expect("register under a dead grant", err, sb.ErrUnauthenticated)
	case !g.has(sb.VerbWebhook):
		w.expect("register without the webhook verb", err, sb.ErrForbidden)
	case w.hooksOf(g.id) >= 4:
		w.expect("a fifth webhook", err, sb.ErrQuotaExceeded)
	default:
		w.expect("register a webhook", err, nil)
		w.hooks[h.ID] = &hook{id: h.ID, grant: g.id}
	}
}

func (w *world) hooksOf(grant string) int {
	n := 0
	for _, h := range w.hooks {
		if h.grant == grant {
			n++
		}
	}
	return n
}

// hooksDie records the deliveries the webhooks of grant id have when it
// dies: none may be added after.
func (w *world) hooksDie(id string) {
	for _, h := range w.hooks {
		if h.grant == id && h.dead == nil {
			h.dead = map[string]bool{}
			for _, d := range w.deliveries(h.id) {
				h.dead[d] = true
			}
		}
	}
}

// deliveries lists the delivery todos queued for webhook id.
func (w *world) deliveries(id string) []string {
	ds, err := w.sb.InspectTodos(context.Background(), "~system/webhooks", &sb.ListOptions{Limit: 1000})
	if err != nil {
		w.fail("list the deliveries: %v", err)
	}
	var out []string
	for _, d := range ds {
		var p struct {
			Webhook string `json:"webhook"`
		}
		if json.Unmarshal(d.Payload, &p) == nil && p.Webhook == id {
			out = append(out, d.ID)
		}
	}
	return out
}

// ---- friend views ----

func (w *world) view(t *rapid.T) {
	gs := w.credentialed()
	if len(gs) == 0 {
		t.Skip("no credential")
	}
	g := pick(t, gs, "grant", func(g *grant) string { return g.holder + " " + g.id })
	ctx := context.Background()
	if !g.live(w.now()) {
		_, err := w.sb.List(ctx, g.cred, queue, nil)
		w.expect("list under a dead grant", err, sb.ErrUnauthenticated)
		return
	}
	if g.has(sb.VerbList) {
		w.step("%s lists its todos", g.holder)
		ts, err := w.sb.List(ctx, g.cred, queue, &sb.ListOptions{Limit: 1000})
		w.expect("list", err, nil)
		var got, want []string
		for _, td := range ts {
			got = append(got, td.ID)
			w.seen(g, td)
		}
		for _, id := range w.order {
			td := w.todos[id]
			if !td.purged && (td.origin == g.id || td.claimedBy[g.id]) {
				want = append(want, id)
			}
		}
		if !slices.Equal(got, want) {
			w.fail("%s lists %v, want exactly its own %v", g.holder, got, want)
		}
	}
	if g.has(sb.VerbGet) && len(w.order) > 0 {
		td := w.todos[pick(t, w.order, "todo", func(id string) string { return w.todos[id].title })]
		w.step("%s gets %s", g.holder, td.title)
		got, err := w.sb.Get(ctx, g.cred, td.id)
		if td.purged || td.origin != g.id && !td.claimedBy[g.id] {
			w.expect("get another party's todo", err, sb.ErrNotFound)
			_, nerr := w.sb.Get(ctx, g.cred, "todo_00000000000000000000000000000000")
			if err != nil && nerr != nil && strings.ReplaceAll(err.Error(), td.id, "X") != strings.ReplaceAll(nerr.Error(), "todo_00000000000000000000000000000000", "X") {
				w.fail("a friend tells another party's todo from a missing one: %q vs %q", err, nerr)
			}
			return
		}
		w.expect("get", err, nil)
		w.seen(g, got)
	}
}

// seen checks what a friend's view of a todo shows: nothing of another
// party's.
func (w *world) seen(g *grant, td sb.Todo) {
	if td.Origin.Grant != g.id && (td.Origin.Grant != "" || td.Origin.Edge != "" || td.DedupKey != "" || td.Origin.Human != (sb.Human{})) {
		w.fail("%s sees another party's origin: %+v (dedup %q)", g.holder, td.Origin, td.DedupKey)
	}
	for _, a := range td.History {
		if a.Grant != "" && a.Grant != g.id {
			w.fail("%s sees another grant %s in a todo's history", g.holder, a.Grant)
		}
	}
}

// ---- time and housekeeping ----

func (w *world) stepClock(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{time.Second, 31 * time.Second, 6 * time.Minute, 21 * time.Minute, 41 * time.Minute, 2 * time.Hour, 7 * time.Hour}).Draw(t, "by")
	w.step("the clock moves %v", d)
	w.clock.step(d)
	for _, g := range w.grants {
		if g.state == sb.GrantActive && !g.live(w.now()) {
			w.hooksDie(g.id)
		}
	}
}

func (w *world) reap(t *rapid.T) {
	w.logTouched = true
	w.step("Reap")
	st, err := w.sb.Reap(context.Background())
	w.expect("Reap", err, nil)
	w.apply()
	w.checkLogProblem(st.LogProblem)
}

// apply brings the model to what Reap leaves: leases recovered, pending
// requests lapsed, grants past their end revoked, ended todos past
// retention purged.
func (w *world) apply() {
	for _, id := range w.order {
		w.recover(w.todos[id])
	}
	for _, e := range w.edges {
		if w.lapsed(e) {
			w.expireEdge(e)
		}
	}
	gs := make([]*grant, 0, len(w.grants))
	for _, g := range w.grants {
		gs = append(gs, g)
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].n < gs[j].n })
	for _, g := range gs {
		if g.state == sb.GrantActive && !g.live(w.now()) {
			w.revokeGrant(g)
			if e := w.edges[g.edge]; e != nil && e.state == sb.EdgeApproved {
				e.state = sb.EdgeRevoked
			}
		}
	}
	for _, id := range w.order {
		td := w.todos[id]
		if td.state.Terminal() && !td.purged && !w.now().Before(td.ended.Add(todoRetention)) {
			td.purged = true
		}
	}
}

// ---- the audit log ----

// storedCheckpoint reads the stored checkpoint (nil: none).
func (w *world) storedCheckpoint() []byte {
	var b []byte
	if err := w.st.View(context.Background(), func(tx store.Tx) error {
		v, err := tx.Get("meta", []byte("checkpoint"))
		if err == nil {
			b = bytes.Clone(v)
		}
		return nil
	}); err != nil {
		w.fail("read the stored checkpoint: %v", err)
	}
	return b
}

// signed records a checkpoint the log signed: it must extend every one
// signed before ("no checkpoint is ever signed over a history inconsistent
// with one signed, kept or seen before").
func (w *world) signed(cp sb.Checkpoint) {
	for _, old := range w.checkpoints {
		if old.Size == cp.Size && old.Root == cp.Root {
			return // signed before (a restored copy's)
		}
	}
	if w.tampered && cp.Size > 0 { // (this process's own mark binds only this process)
		w.fail("a checkpoint of %d events was signed after the store was rewritten", cp.Size)
	}
	for _, old := range w.checkpoints {
		switch {
		case old.Size == cp.Size:
			if old.Root != cp.Root {
				w.fail("two roots signed for %d events", cp.Size)
			}
		case old.Size > 0 && old.Size < cp.Size:
			p, err := w.sb.ProveConsistency(context.Background(), old.Size, cp.Size)
			if errors.Is(err, sb.ErrEventPurged) {
				continue
			}
			if err != nil {
				w.fail("prove %d → %d: %v", old.Size, cp.Size, err)
			}
			if err := sb.VerifyConsistency(old, cp, p); err != nil {
				w.fail("the checkpoint of %d events does not extend the one of %d signed before: %v", cp.Size, old.Size, err)
			}
		}
	}
	w.checkpoints = append(w.checkpoints, cp)
	w.cpEpoch = append(w.cpEpoch, w.epoch)
}

// checkLogProblem checks what Reap said of the log.
func (w *world) checkLogProblem(problem error) {
	switch {
	case w.refusing():
		if !errors.Is(problem, sb.ErrAuditBroken) {
			w.fail("Reap on a rewritten store: want ErrAuditBroken, got %v", problem)
		}
	case problem == nil:
	case w.witnessMode() == witnessRefuses && errors.Is(problem, sb.ErrWitnessRefused):
	case w.witnessMode() == witnessHangs && errors.Is(problem, sb.ErrWitness):
	default:
		w.fail("Reap on a sound log: %v", problem)
	}
	w.sawStored()
}

func (w *world) checkpoint(t *rapid.T) {
	w.logTouched = true
	w.step("Checkpoint")
	before := w.storedCheckpoint()
	cp, err := w.sb.Checkpoint(context.Background())
	switch {
	case w.refusing():
		w.expect("a checkpoint of a rewritten store", err, sb.ErrAuditBroken)
		if !bytes.Equal(before, w.storedCheckpoint()) {
			w.fail("a rewritten store got a checkpoint stored")
		}
		return
	case w.witnessMode() == witnessRefuses && err != nil:
		// (No error: nothing new to ask the witness about.)
		w.expect("a checkpoint a witness refuses", err, sb.ErrWitnessRefused)
		if !bytes.Equal(before, w.storedCheckpoint()) {
			w.fail("a checkpoint the witness refused was stored")
		}
		return
	case w.witnessMode() == witnessHangs && err != nil:
		w.expect("a checkpoint a witness hangs on", err, sb.ErrWitness)
	default:
		w.expect("checkpoint", err, nil)
	}
	w.sawStored()
	if !bytes.Equal(cp.Note, w.storedCheckpoint()) {
		w.fail("Checkpoint returned a checkpoint that is not the stored one")
	}
	w.saw(cp.Size)
}

// refusing reports whether the log's checks must refuse now: the store
// was rewritten, or restored behind what was signed — or behind what this
// process saw, while its mark has not aged out.
func (w *world) refusing() bool {
	return w.tampered || w.seenSize > 0 && !w.holds(w.seenEpoch, w.seenSize) &&
		w.now().Sub(w.seenAt) < eventRetention-min(eventRetention/10, time.Hour)
}

// epochOf is one history of the log: it branched from parent's at size at.
type epochOf struct {
	parent int
	at     uint64
}

// holds reports whether the log now still holds the first n events of
// epoch e's history: e is the current history, or one it branched from
// at or past n.
func (w *world) holds(e int, n uint64) bool {
	limit := ^uint64(0)
	for c := w.epoch; c != e; c = w.epochs[c].parent {
		if c == 0 {
			return false
		}
		limit = min(limit, w.epochs[c].at)
	}
	return n <= limit
}

// saw records that this process signed or checked the log at size n.
func (w *world) saw(n uint64) {
	if n >= w.seenSize || !w.holds(w.seenEpoch, w.seenSize) {
		w.seenSize, w.seenAt, w.seenEpoch = n, w.now(), w.epoch
	}
}

// sawStored records the stored checkpoint, if it changed: a checkpoint the
// log signed and stored.
func (w *world) sawStored() {
	b := w.storedCheckpoint()
	if b == nil || bytes.Equal(b, w.lastStored) {
		return
	}
	w.lastStored = b
	cp, err := sb.OpenCheckpoint(b, w.vkey)
	if err != nil {
		w.fail("the stored checkpoint does not open: %v", err)
	}
	w.signed(cp)
}

func (w *world) witnessMode() witnessMode {
	w.wit.mu.Lock()
	defer w.wit.mu.Unlock()
	return w.wit.mode
}

func (w *world) setWitness(t *rapid.T) {
	m := rapid.SampledFrom([]witnessMode{witnessOK, witnessOK, witnessRefuses, witnessHangs}).Draw(t, "mode")
	w.step("the witness now %s", map[witnessMode]string{witnessOK: "answers", witnessRefuses: "refuses", witnessHangs: "hangs"}[m])
	w.wit.mu.Lock()
	w.wit.mode = m
	w.wit.mu.Unlock()
}

func (w *world) checkLog(t *rapid.T) {
	w.logTouched = true
	w.step("CheckLog")
	rep, verr := w.sb.VerifyAudit(context.Background())
	err := w.sb.CheckLog(context.Background())
	if w.refusing() {
		w.expect("CheckLog of a rewritten store", err, sb.ErrAuditBroken)
		return
	}
	w.expect("CheckLog", err, nil)
	if verr == nil {
		w.saw(rep.TreeSize)
	}
}

// secondSigner is the command line on the host's store: another
// Switchboard, with the same key and the same kept checkpoint, signs.
func (w *world) secondSigner(t *rapid.T) {
	w.logTouched = true
	w.step("a second signer (the command line) checkpoints the store")
	cfg := w.cfg
	cfg.Witnesses = nil
	other, err := sb.New(w.st, &cfg)
	if err != nil {
		w.fail("a second Switchboard: %v", err)
	}
	defer other.Close()
	cp, err := other.Checkpoint(context.Background())
	if w.tampered { // another process: this one's mark of what it saw is not its

		w.expect("a second signer on a rewritten store", err, sb.ErrAuditBroken)
		return
	}
	w.expect("a second signer", err, nil)
	w.sawStored()
	_ = cp
}

// tamper rewrites the store as whoever can write its files would: an
// event the log signed is rewritten, the tree rebuilt above it, and
// retention's mark moved to the log's end with the rewritten frontier as
// the hashes kept for purged events.
func (w *world) tamper(t *rapid.T) {
	stored := w.storedCheckpoint()
	if w.tampered || stored == nil {
		t.Skip("nothing signed to rewrite")
	}
	cp, err := sb.OpenCheckpoint(stored, w.vkey)
	if err != nil {
		w.fail("the stored checkpoint does not open: %v", err)
	}
	rep, err := w.sb.VerifyAudit(context.Background())
	if err != nil || rep.First == 0 || rep.First > cp.Size {
		t.Skip("no event the stored checkpoint signed is kept")
	}
	seq := rapid.Uint64Range(rep.First, min(rep.Last, cp.Size)).Draw(t, "event")
	move := rapid.Bool().Draw(t, "move the mark")
	w.step("someone who can write the store rewrites event %d (and moves the purge mark: %v)", seq, move)
	if err := switchboardtest.RewriteAuditEvent(context.Background(), w.st, seq, func(leaf []byte) []byte {
		return bytes.Replace(leaf, []byte(`"type":"`), []byte(`"type":"x`), 1)
	}); err != nil {
		t.Skip("the event cannot be rewritten here: " + err.Error())
	}
	w.tampered, w.rewritten, w.logTouched = true, true, true
	if move {
		if err := switchboardtest.MoveAuditPurgeMark(context.Background(), w.st, rep.TreeSize, false); err != nil {
			w.t.Logf("the mark cannot be moved here: %v", err)
		}
	}
}

// ---- a backup restored ----

// Tables are every table switchboard keeps (a table missing here is left
// as it is by restore, and the model then finds the store in a state no
// history led to; TestTheModelBacksUpEveryTable holds it to the tables
// the root package names).
var Tables = []string{"blocks", "damaged_todos", "edge_events", "edge_live", "edge_pending", "edge_requester",
	"edge_target", "edges", "events", "events_pending", "grant_cred", "grant_expiry", "grant_human", "grants",
	"log_hashes", "meta", "oidc_expiry", "oidc_replay", "personas", "quota_buckets", "quota_cooldown",
	"todo_dedup", "todo_index", "todos", "webhook_grant", "webhook_queue", "webhooks"}

// Copy is a store's rows, table by table (Tables), as a backup taken at
// rest holds them.
type Copy map[string][][2][]byte

// BackUp copies every table of st in one snapshot.
func BackUp(ctx context.Context, st store.Store) (Copy, error) {
	c := Copy{}
	err := st.View(ctx, func(tx store.Tx) error {
		clear(c)
		for _, tb := range Tables {
			if err := tx.Scan(tb, nil, nil, func(k, v []byte) bool {
				c[tb] = append(c[tb], [2][]byte{bytes.Clone(k), bytes.Clone(v)})
				return true
			}); err != nil {
				return err
			}
		}
		return nil
	})
	return c, err
}

// Restore puts c back under whatever runs on st, in one transaction:
// every table emptied, then c's rows written — a database restored from a
// backup, or a failover to a standby that was behind.
func Restore(ctx context.Context, st store.Store, c Copy) error {
	return st.Update(ctx, func(tx store.Tx) error {
		for _, tb := range Tables {
			var keys [][]byte
			if err := tx.Scan(tb, nil, nil, func(k, _ []byte) bool { keys = append(keys, bytes.Clone(k)); return true }); err != nil {
				return err
			}
			for _, k := range keys {
				if err := tx.Delete(tb, k); err != nil {
					return err
				}
			}
			for _, kv := range c[tb] {
				if err := tx.Put(tb, kv[0], kv[1]); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// backup is a copy of the store and of the model at one step.
type backup struct {
	rows  Copy
	size  uint64 // the log's size then
	model world
}

// takeBackup copies the store as whoever runs it might (the files, at
// rest), and the model with it.
func (w *world) takeBackup(t *rapid.T) {
	if w.backup != nil {
		t.Skip("a backup is taken")
	}
	rep, err := w.sb.VerifyAudit(context.Background())
	if err != nil || rep.Pending > 0 {
		t.Skip("no clean copy now")
	}
	w.step("the store is backed up")
	rows, err := BackUp(context.Background(), w.st)
	if err != nil {
		w.fail("back up: %v", err)
	}
	b := &backup{rows: rows, size: rep.TreeSize}
	b.model = w.clone()
	w.backup = b
}

// restore puts the backup back under the running Switchboard (a database
// restored, a failover to a standby that was behind). The model goes back
// with it; the log's checks refuse from then on if anything was signed or
// seen past the copy — the checkpoint kept outside the store, the
// witness's, this process's mark — and not otherwise.
func (w *world) restore(t *rapid.T) {
	if w.backup == nil {
		t.Skip("no backup")
	}
	w.step("the backup of %d events is restored", w.backup.size)
	if err := Restore(context.Background(), w.st, w.backup.rows); err != nil {
		w.fail("restore: %v", err)
	}
	keep := *w
	*w = w.backup.model.clone()
	w.t, w.sb, w.st, w.clock, w.wit = keep.t, keep.sb, keep.st, keep.clock, keep.wit
	w.checkpoints, w.cpEpoch, w.seenSize, w.seenAt, w.seenEpoch = keep.checkpoints, keep.cpEpoch, keep.seenSize, keep.seenAt, keep.seenEpoch
	w.epochs = append(keep.epochs, epochOf{parent: w.epoch, at: keep.backup.size})
	w.epoch = len(w.epochs) - 1
	w.logTouched, w.steps = true, keep.steps
	w.backup, w.requests, w.seq = nil, keep.requests, keep.seq
	w.logLen, w.lastStored = 0, w.storedCheckpoint()
	// A second passes: a step done again after the restore writes other
	// events (another time in each), so the history it grows is another.
	w.clock.step(time.Second)
	// The store as the copy was (rewritten, or not), and refused for
	// good if anything signed (the kept checkpoint, the witness's) is no
	// longer held.
	w.tampered = w.rewritten
	for i, cp := range w.checkpoints {
		w.tampered = w.tampered || !w.holds(w.cpEpoch[i], cp.Size)
	}
}

// clone is a deep copy of the model's state.
func (w *world) clone() world {
	c := *w
	c.edges, c.grants, c.todos, c.dedup, c.hooks = map[string]*edge{}, map[string]*grant{}, map[string]*todo{}, map[string]string{}, map[string]*hook{}
	for k, v := range w.edges {
		e := *v
		c.edges[k] = &e
	}
	for k, v := range w.grants {
		g := *v
		c.grants[k] = &g
		if v == w.worker {
			c.worker = &g
		}
	}
	for k, v := range w.todos {
		td := *v
		td.claimedBy = maps.Clone(v.claimedBy)
		c.todos[k] = &td
	}
	maps.Copy(c.dedup, w.dedup)
	for k, v := range w.hooks {
		h := *v
		h.dead = maps.Clone(v.dead)
		c.hooks[k] = &h
	}
	c.order = slices.Clone(w.order)
	c.leases = slices.Clone(w.leases)
	c.checkpoints = slices.Clone(w.checkpoints)
	c.cpEpoch = slices.Clone(w.cpEpoch)
	c.epochs = slices.Clone(w.epochs)
	return c
}

// ---- an application's transaction ----

func (w *world) txCreate(t *rapid.T) {
	gs := w.credentialed()
	if len(gs) == 0 {
		t.Skip("no credential")
	}
	g := pick(t, gs, "grant", func(g *grant) string { return g.holder + " " + g.id })
	if !g.live(w.now()) || !g.has(sb.VerbCreateFor) {
		t.Skip("the grant cannot create")
	}
	commit := rapid.Bool().Draw(t, "commit")
	w.seq++
	title := fmt.Sprintf("t%d", w.seq)
	w.step("%s creates %s inside an application's transaction, then %s", g.holder, title, map[bool]string{true: "commits", false: "rolls back"}[commit])
	ctx, doCommit, rollback, err := w.o.Tx(context.Background())
	if err != nil {
		w.fail("begin: %v", err)
	}
	td, created, err := w.sb.CreateFor(ctx, g.cred, queue, sb.NewTodo{Kind: "job", Title: title})
	w.expect("create inside a transaction", err, nil)
	if !created {
		w.fail("create inside a transaction: not created")
	}
	if !commit {
		if err := rollback(); err != nil {
			w.fail("rollback: %v", err)
		}
		_, gerr := w.sb.InspectTodo(context.Background(), td.ID)
		w.expect("a rolled-back todo", gerr, sb.ErrNotFound)
		return
	}
	if err := doCommit(); err != nil {
		w.fail("commit: %v", err)
	}
	w.todos[td.ID] = &todo{id: td.ID, title: title, origin: g.id, state: sb.TodoQueued, available: w.now(), seq: w.seq, claimedBy: map[string]bool{}}
	w.order = append(w.order, td.ID)
}

func (w *world) txProve(t *rapid.T) {
	gs := w.credentialed()
	if len(gs) == 0 {
		t.Skip("no credential")
	}
	g := pick(t, gs, "grant", func(g *grant) string { return g.holder + " " + g.id })
	if !g.live(w.now()) {
		t.Skip("dead grant")
	}
	key, err := switchboardtest.NewProofKey("ES256")
	if err != nil {
		w.fail("proof key: %v", err)
	}
	proof := key.Proof("POST", "https://model.test/mcp", string(g.cred), w.now())
	w.step("%s's request proves its key inside an application's transaction, which rolls back", g.holder)
	ctx, _, rollback, err := w.o.Tx(context.Background())
	if err != nil {
		w.fail("begin: %v", err)
	}
	_, err = w.sb.Prove(ctx, g.cred, proof)
	w.expect("prove inside a transaction", err, nil)
	if err := rollback(); err != nil {
		w.fail("rollback: %v", err)
	}
	_, err = w.sb.Prove(context.Background(), g.cred, proof)
	w.expect("the same proof after the rollback", err, sb.ErrInvalidDPoPProof)
}

// ---- invariants ----

// invariants runs after every step: the store holds exactly what the
// model says, and every promise checked on state holds.
func (w *world) invariants(t *rapid.T) {
	ctx := context.Background()
	// "No acknowledged todo is lost or stuck": each todo is where the
	// model says, with the attempts it says, until retention purges it.
	for _, id := range w.order {
		td := w.todos[id]
		got, err := w.sb.InspectTodo(ctx, id)
		if td.purged {
			if err == nil {
				// Reap purges in batches; a todo past retention may
				// remain until the next pass — but never another state.
				if got.State != td.state {
					w.fail("%s: purged in the model, %s in the store (%s in the model)", td.title, got.State, td.state)
				}
				continue
			}
			w.expect(td.title+" purged", err, sb.ErrNotFound)
			continue
		}
		if err != nil {
			w.fail("%s is lost: %v", td.title, err)
		}
		// A lease past its end is recovered lazily: leased in the
		// store, claimable for the model.
		state := td.state
		if got.State != state {
			w.fail("%s is %s in the store, %s in the model", td.title, got.State, state)
		}
		if got.Attempts != td.attempts {
			w.fail("%s has %d attempts, want %d", td.title, got.Attempts, td.attempts)
		}
		// "a revoked or expired grant's unclaimed work is never handed
		// out": a todo leased now came through a live line, or was
		// claimed before its grant died.
	}
	// "its webhooks stop": no delivery is queued to a webhook of a dead
	// grant after it died; a live one's deliveries are one per outcome.
	for _, h := range w.hooks {
		ds := w.deliveries(h.id)
		if h.dead != nil {
			for _, d := range ds {
				if !h.dead[d] {
					w.fail("webhook %s of a dead grant got a delivery %s after the grant died", h.id, d)
				}
			}
			continue
		}
		if len(ds) != h.deliveries {
			w.fail("webhook %s has %d deliveries, want %d", h.id, len(ds), h.deliveries)
		}
	}
	// The whole log and the connections are checked every few steps
	// (VerifyAudit rebuilds the tree), and after every step that touched
	// the log's checks.
	w.steps++
	if w.steps%5 != 0 && !w.logTouched {
		return
	}
	w.logTouched = false
	// "Every change is in the audit log, and the log verifies."
	rep, err := w.sb.VerifyAudit(ctx)
	if w.rewritten {
		if err == nil {
			w.fail("VerifyAudit passes a rewritten store")
		}
	} else if err != nil {
		w.fail("VerifyAudit: %v", err)
	} else if rep.TreeSize+rep.Pending < w.logLen {
		w.fail("the log shrank from %d to %d events", w.logLen, rep.TreeSize+rep.Pending)
	} else {
		w.logLen = rep.TreeSize + rep.Pending
	}
	// Connections lists exactly the live grants.
	conns, err := w.sb.Connections(ctx, w.iss.Human("bob"))
	w.expect("Connections", err, nil)
	listed := map[string]bool{}
	for _, c := range conns {
		listed[c.Grant.ID] = true
	}
	for _, g := range w.grants {
		if g.friend && listed[g.id] != g.live(w.now()) {
			w.fail("Connections lists grant %s: %v, live: %v", g.id, listed[g.id], g.live(w.now()))
		}
	}
}
