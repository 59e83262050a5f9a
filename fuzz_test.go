package switchboard_test

// Fuzz targets for every outside input the root package reads: ID tokens,
// scopes, todo input and credentials. Each asserts properties — what is
// accepted is exactly what was checked, nothing refused is written, nothing
// panics — not only the absence of crashes. CI runs each briefly; crashers
// stay under testdata/fuzz as regression inputs.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/sumdb/tlog"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// newEvents reports whether anything was written since *seq, moving *seq on.
func newEvents(t testing.TB, h *harness, seq *uint64) bool {
	t.Helper()
	evs, err := h.sb.Events(ctx, *seq, 1000)
	require.NoError(t, err)
	if len(evs) == 0 {
		return false
	}
	*seq = evs[len(evs)-1].Seq
	return true
}

// FuzzIDToken: the only spelling of a token that verifies is the one the
// issuer signed, and what it proves is what that token says.
func FuzzIDToken(f *testing.F) {
	h := newHarness(f, memory.New())
	const nonce = "fuzz-login-nonce"
	tok := h.iss.Token(switchboardtest.Login{Subject: "alice", Name: "Alice", Email: "alice@example.com", Nonce: nonce, At: h.clock.Now()})
	want, err := h.sb.VerifyHuman(ctx, tok, nonce)
	require.NoError(f, err)
	f.Add(tok)
	for _, v := range respellings(tok) {
		f.Add(v)
	}
	f.Add("")
	f.Add("a.b.c")
	sig := tok[strings.LastIndexByte(tok, '.')+1:]
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := h.sb.VerifyHuman(ctx, raw, nonce)
		if err != nil {
			if !errors.Is(err, sb.ErrProvenance) && !errors.Is(err, sb.ErrInvalidArgument) {
				t.Fatalf("unexpected error class: %v", err)
			}
			if strings.Contains(err.Error(), sig) {
				t.Fatalf("the error echoes the token's signature: %v", err)
			}
			return
		}
		if raw != tok {
			t.Fatalf("a spelling other than the signed one verified:\n%q\n%q", raw, tok)
		}
		if p.TokenHash != want.TokenHash || p.Human() != want.Human() || p.Name != want.Name {
			t.Fatalf("the token proved something else: %+v vs %+v", p, want)
		}
	})
}

// FuzzScope: Normalize is idempotent and allows exactly what its input
// allows; Intersect allows only what both sides allow; a vended grant holds
// exactly the normalized scope it was given, or nothing is written.
func FuzzScope(f *testing.F) {
	h := newHarness(f, memory.New())
	f.Add([]byte(`[{"queue":"inbox","verbs":["create_for","list"]}]`), []byte(`[{"queue":"inbox","verbs":["list"]}]`))
	f.Add([]byte(`[{"queue":"a","verbs":["get"]},{"queue":"a","verbs":["claim","get"]}]`), []byte(`null`))
	f.Add([]byte(`[{"queue":"INBOX","verbs":["List"]},{"queue":"inbox","verbs":[]}]`), []byte(`[{"queue":"approvals","verbs":["get"]}]`))
	verbs := append(sb.GrantableVerbs(), sb.VerbCancel, sb.VerbRedrive, "bogus")
	var seq uint64
	newEvents(f, h, &seq) // what setup wrote
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var s, o sb.Scope
		if json.Unmarshal(a, &s) != nil || json.Unmarshal(b, &o) != nil {
			return
		}
		n := normalizeTwice(t, s)
		queues := map[string]bool{}
		for _, sc := range []sb.Scope{s, o} {
			for _, e := range sc {
				queues[e.Queue] = true
			}
		}
		in := sb.Intersect(s, o)
		for q := range queues {
			for _, v := range verbs {
				if s.Allows(q, v) != n.Allows(q, v) {
					t.Fatalf("Normalize changed whether %s may %s", q, v)
				}
				if in.Allows(q, v) && !(s.Allows(q, v) && o.Allows(q, v)) {
					t.Fatalf("Intersect allows %s on %s beyond its inputs", v, q)
				}
				if !in.Allows(q, v) && s.Allows(q, v) && o.Allows(q, v) {
					t.Fatalf("Intersect lost %s on %s", v, q)
				}
			}
		}
		g, cred, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: s})
		if err != nil {
			if !errors.Is(err, sb.ErrInvalidArgument) && !errors.Is(err, sb.ErrQuotaExceeded) {
				t.Fatalf("unexpected error class: %v", err)
			}
			if newEvents(t, h, &seq) {
				t.Fatal("a refused vend wrote events")
			}
			return
		}
		newEvents(t, h, &seq)
		if !sb.Equal(g.Scope, n) {
			t.Fatalf("vended %v, asked for %v", g.Scope, n)
		}
		if err := h.sb.Revoke(ctx, h.bob, g.ID); err != nil {
			t.Fatal(err)
		}
		newEvents(t, h, &seq)
		if _, err := h.sb.Authenticate(ctx, cred); !errors.Is(err, sb.ErrUnauthenticated) {
			t.Fatalf("a revoked credential authenticated: %v", err)
		}
	})
}

// normalizeTwice normalizes s and checks that normalizing again changes nothing.
func normalizeTwice(t *testing.T, s sb.Scope) sb.Scope {
	t.Helper()
	n := sb.Normalize(s)
	a, _ := json.Marshal(n)
	b, _ := json.Marshal(sb.Normalize(n))
	if !bytes.Equal(a, b) {
		t.Fatalf("Normalize is not idempotent: %s then %s", a, b)
	}
	return n
}

// FuzzNewTodo: CreateFor either refuses the input with ErrInvalidArgument
// and writes nothing, or stores exactly the input; a dedup key makes a
// second create return the first todo.
func FuzzNewTodo(f *testing.F) {
	h := newHarness(f, memory.New())
	_, cred, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbCreateFor, sb.VerbGet)})
	require.NoError(f, err)
	f.Add("invoice.review", "Review invoice 118", []byte(`{"n":118}`), 0, "inv-118", int64(0), 0)
	f.Add("k", "two\nlines", []byte{0xff}, 2_000_000, "", int64(1)<<62, -1)
	f.Add("", "\u202etitle", []byte(nil), -5, "key\x00", int64(10413792000), 101)
	f.Add("k", "t", []byte("p"), 1, "d", int64(7258118400), 3) // 2200-01-01: just past the range
	var seq uint64
	newEvents(f, h, &seq) // what setup wrote
	f.Fuzz(func(t *testing.T, kind, title string, payload []byte, prio int, dedup string, notBefore int64, attempts int) {
		n := sb.NewTodo{Kind: kind, Title: title, Payload: payload, Priority: prio, DedupKey: dedup, MaxAttempts: attempts}
		if notBefore != 0 {
			n.NotBefore = time.Unix(notBefore, 0)
		}
		td, created, err := h.sb.CreateFor(ctx, cred, "inbox", n)
		if err != nil {
			if !errors.Is(err, sb.ErrInvalidArgument) {
				t.Fatalf("unexpected error class: %v", err)
			}
			if newEvents(t, h, &seq) {
				t.Fatal("a refused create wrote events")
			}
			return
		}
		newEvents(t, h, &seq)
		got, err := h.sb.Get(ctx, cred, td.ID)
		require.NoError(t, err)
		if created {
			assert.Equal(t, td, got, "Get returns exactly what CreateFor stored")
			assert.Equal(t, kind, got.Kind)
			assert.Equal(t, title, got.Title)
			assert.True(t, bytes.Equal(payload, got.Payload), "payload")
			assert.Equal(t, prio, got.Priority)
			if !n.NotBefore.IsZero() && got.AvailableAt.Before(n.NotBefore.Truncate(time.Second)) {
				t.Fatalf("available at %v, before NotBefore %v", got.AvailableAt, n.NotBefore)
			}
		}
		if dedup != "" {
			again, created2, err := h.sb.CreateFor(ctx, cred, "inbox", n)
			require.NoError(t, err)
			newEvents(t, h, &seq)
			if created2 || again.ID != td.ID {
				t.Fatalf("dedup key %q made a second todo", dedup)
			}
		}
	})
}

// FuzzCredential: no string but an issued, live credential authenticates,
// and refusals never echo what was presented.
func FuzzCredential(f *testing.F) {
	h := newHarness(f, memory.New())
	g, cred, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbList)})
	require.NoError(f, err)
	f.Add(string(cred))
	f.Add(" " + string(cred))
	f.Add(strings.ToUpper(string(cred)))
	f.Add(string(cred) + "=")
	f.Add(string(cred)[:len(cred)-1])
	f.Add("sbg_" + strings.Repeat("A", 43))
	f.Fuzz(func(t *testing.T, c string) {
		got, err := h.sb.Authenticate(ctx, sb.Credential(c))
		if err == nil {
			if c != string(cred) || got.ID != g.ID {
				t.Fatalf("%q authenticated as %s", c, got.ID)
			}
			return
		}
		if !errors.Is(err, sb.ErrUnauthenticated) {
			t.Fatalf("unexpected error class: %v", err)
		}
		if len(c) > 8 && strings.Contains(err.Error(), c) {
			t.Fatalf("the error echoes the credential: %v", err)
		}
		if _, err := h.sb.List(ctx, sb.Credential(c), "inbox", nil); !errors.Is(err, sb.ErrUnauthenticated) {
			t.Fatalf("List with a refused credential: %v", err)
		}
	})
}

// FuzzDecodeJSON: a document DecodeJSON accepts reads the same to an
// exact-match reader (each field's value is what a case-sensitive map of
// the document holds under its exact name), is valid JSON, and re-encodes to
// a document that decodes to the same value.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"from":"a","to":"b","why":"w","pickup":"p","id_token":"t","scope":[{"queue":"q","verbs":["list"]}]}`,
		`{"from":"a","FROM":"b"}`, `{"From":"a"}`, `{"from":"a","from":"b"}`, `{"from":"\ud800"}`,
		`{"from":"a","extra":0}`, `{"from":"a","extra":1}`, `{"scope":[{"Queue":"q"}]}`, `{} []`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fr sb.FriendRequest
		if err := sb.DecodeJSON(data, &fr); err != nil {
			require.ErrorIs(t, err, sb.ErrInvalidArgument)
			return
		}
		require.True(t, json.Valid(data))
		var m map[string]any
		if json.Unmarshal(data, &m) != nil {
			return // a JSON null decodes to the zero request
		}
		for name, got := range map[string]string{"from": fr.From, "to": fr.To, "why": fr.Why, "pickup": fr.Pickup, "id_token": fr.IDToken} {
			if v, ok := m[name].(string); ok {
				assert.Equal(t, v, got, name)
			} else {
				assert.Empty(t, got, "%s: set without its exact key", name)
			}
		}
		if raw, ok := m["scope"].([]any); ok {
			require.Len(t, fr.Scope, len(raw))
			for i, e := range raw {
				em, _ := e.(map[string]any)
				q, _ := em["queue"].(string)
				assert.Equal(t, q, fr.Scope[i].Queue)
			}
		} else {
			assert.Empty(t, fr.Scope)
		}
		again, err := json.Marshal(fr)
		require.NoError(t, err)
		var fr2 sb.FriendRequest
		require.NoError(t, sb.DecodeJSON(again, &fr2))
		assert.Equal(t, fr, fr2)
	})
}

// FuzzStoredTodo: a todo record damaged in the store (a bad disk, another
// program writing the file) never panics a read or a claim: a record that
// does not decode is an error for Get and for a claim that reaches it, the
// claim writes nothing, and the other todos are unaffected.
func FuzzStoredTodo(f *testing.F) {
	// The seeds: real records, in other stores: one new (records V3), one
	// at layout 7 (records V1 and V2, as the release before writes them).
	for _, layout := range []uint64{0, 7} {
		st := memory.New()
		if layout != 0 {
			require.NoError(f, st.Update(ctx, func(tx store.Tx) error {
				return tx.Put("meta", []byte("schema"), binary.BigEndian.AppendUint64(nil, layout))
			}))
		}
		h := newHarness(f, st)
		_, cred, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbCreateFor)})
		require.NoError(f, err)
		for _, n := range []sb.NewTodo{
			{Kind: "k"},
			{Kind: "invoice.review", Title: "Review", Payload: []byte(`{"n":1}`), Priority: -3, DedupKey: "d", MaxAttempts: 2},
			{Kind: "traced", Trace: sb.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "k=v"}}, // V2 at layout 7
		} {
			td, _, err := h.sb.CreateFor(ctx, cred, "inbox", n)
			require.NoError(f, err)
			f.Add(storedTodo(f, st, td.ID))
		}
	}
	f.Add([]byte{0x01})
	f.Add([]byte(`{"id":"x"}`))
	st := memory.New()
	h := newHarness(f, st)
	_, cred, err := h.sb.Vend(ctx, h.bob, sb.VendRequest{Agent: "bob-desk", Scope: scope("inbox", sb.VerbCreateFor, sb.VerbGet, sb.VerbClaim, sb.VerbList, sb.VerbRelease)})
	require.NoError(f, err)
	victim, _, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "victim"})
	require.NoError(f, err)
	good, _, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "good", Priority: -1})
	require.NoError(f, err)
	var seq uint64
	newEvents(f, h, &seq)
	f.Fuzz(func(t *testing.T, data []byte) {
		require.NoError(t, st.Update(ctx, func(tx store.Tx) error { return tx.Put("todos", []byte(victim.ID), data) }))
		_, _ = h.sb.List(ctx, cred, "inbox", nil)
		if _, err := h.sb.Get(ctx, cred, victim.ID); err != nil && !errors.Is(err, sb.ErrNotFound) {
			// It does not decode, or not to a todo it could be: the
			// record is damaged, and the claim that reaches it (first in
			// line, by priority) sets it aside and hands out the next.
			require.ErrorIs(t, err, sb.ErrDamaged)
			got, l, err := h.sb.Claim(ctx, cred, "inbox", nil)
			require.NoError(t, err)
			require.Equal(t, good.ID, got.ID, "only the undamaged todo is handed out")
			require.NoError(t, h.sb.Release(ctx, cred, l))
			newEvents(t, h, &seq)
		}
		got, err := h.sb.Get(ctx, cred, good.ID)
		require.NoError(t, err, "an undamaged todo still reads")
		require.Equal(t, good.ID, got.ID)
		require.Equal(t, good.Kind, got.Kind)
		require.Equal(t, sb.TodoQueued, got.State)
	})
}

// storedTodo is a todo's record as the store holds it.
func storedTodo(t testing.TB, st store.Store, id string) []byte {
	t.Helper()
	var b []byte
	require.NoError(t, st.View(ctx, func(tx store.Tx) error {
		var err error
		b, err = tx.Get("todos", []byte(id))
		return err
	}))
	return b
}

// FuzzDPoPProof: a proof Prove accepts is a compact JWS signed by the key
// the grant is bound to, and is good once (the same proof again is
// refused as replayed); anything refused is ErrUnauthenticated, never
// echoes the credential and records nothing.
func FuzzDPoPProof(f *testing.F) {
	h := newHarness(f, memory.New())
	key, err := switchboardtest.NewProofKey("ES256")
	require.NoError(f, err)
	r := sb.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: scope("inbox", sb.VerbCreateFor), Why: "fuzz", Pickup: testPickup, Key: key.JWK()}
	r.IDToken = h.iss.RequestToken("alice", r, h.clock.Now())
	e, _, err := h.sb.Request(ctx, r)
	require.NoError(f, err)
	_, err = h.sb.Approve(ctx, h.bob, e.ID, nil)
	require.NoError(f, err)
	now := h.clock.Now()
	_, cred, err := h.sb.CollectWithProof(ctx, e.ID, testSecret, key.Proof("POST", "urn:collect", testSecret, now))
	require.NoError(f, err)
	good := key.Sign(switchboardtest.ProofClaims{JTI: "seed", Method: "POST", URL: "https://h.example/mcp", IssuedAt: now, Token: string(cred)})
	f.Add(good)
	f.Add(good + ".")
	f.Add(strings.Replace(good, ".", "..", 1))
	f.Add(strings.ToUpper(good))
	f.Add(good[:len(good)/2])
	f.Add(`{"protected":"e30","payload":"e30","signature":""}`)
	seq := lastSeq(f, h)
	f.Fuzz(func(t *testing.T, jwt string) {
		p := sb.Proof{JWT: jwt, Method: "POST", URL: "https://h.example/mcp"}
		proven, err := h.sb.Prove(ctx, cred, p)
		if err == nil {
			if strings.Count(jwt, ".") != 2 || proven.KeyThumbprint() != key.Thumbprint() {
				t.Fatalf("accepted %q", jwt)
			}
			if _, err := h.sb.Prove(ctx, cred, p); err == nil || !strings.Contains(err.Error(), "replayed") {
				t.Fatalf("accepted twice: %v", err)
			}
			return
		}
		if !errors.Is(err, sb.ErrUnauthenticated) {
			t.Fatalf("unexpected error class: %v", err)
		}
		if strings.Contains(err.Error(), string(cred)) {
			t.Fatalf("the error echoes the credential: %v", err)
		}
		if newEvents(t, h, &seq) {
			t.Fatalf("a refused proof wrote events")
		}
	})
}

// FuzzEventLeaf: the leaf decoder reads exactly the canonical leaves —
// what encoding/json decodes to an event whose EventLeaf is those very
// bytes — and decodes each to that event (the decoder has a fast path for
// the canonical shape; this holds it to encoding/json's reading).
func FuzzEventLeaf(f *testing.F) {
	at := time.Date(2026, 12, 5, 21, 0, 0, 123456789, time.UTC)
	for _, e := range []sb.Event{
		{Seq: 1, At: at, Type: sb.EventTodoCreated, Actor: "agent:alice-bot", Persona: "bob-desk", Grant: "g1", Todo: "t1", Queue: "bob-desk/inbox"},
		{Seq: 18446744073709551615, At: at.Add(-time.Hour), Type: "x", Actor: "human:https://issuer#sub", Detail: "quote \" slash \\ tab \t nl \n ctl \x01 \x1f del \x7f"},
		{At: time.Unix(0, 0).UTC(), Type: "é—😀", Actor: "\u2028", Edge: "e/<&>", Detail: "\ufffd"},
	} {
		f.Add(sb.EventLeaf(e))
	}
	f.Add([]byte(`{"actor":"a","at":"2026-12-05T21:00:00Z","seq":1,"type":"\u00e9"}`))
	f.Add([]byte(`{"actor":"a","at":"2026-12-05T21:00:00Z","seq":01,"type":"t"}`))
	f.Add([]byte(`{"actor":"\ud83d\ude00","at":"2026-12-05T21:00:00Z","seq":1,"type":"t"}`))
	f.Add([]byte("{\"actor\":\"\xff\",\"at\":\"2026-12-05T21:00:00Z\",\"seq\":1,\"type\":\"t\"}"))
	f.Fuzz(func(t *testing.T, leaf []byte) {
		var want sb.Event
		canonical := json.Unmarshal(leaf, &want) == nil && bytes.Equal(sb.EventLeaf(want), leaf)
		got, err := sb.VerifyInclusion(sb.Checkpoint{Size: 1, Root: tlog.RecordHash(leaf)}, sb.InclusionProof{TreeSize: 1, Leaf: leaf})
		if !canonical {
			require.ErrorIs(t, err, sb.ErrProof, "a leaf not in canonical form was read")
			return
		}
		require.NoError(t, err)
		require.Equal(t, want, got)
	})
}
