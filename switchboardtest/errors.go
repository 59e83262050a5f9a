// Every error switchboard names, produced through its API, for tests of
// how a surface (a host's JSON, a command line) shows them.

package switchboardtest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/agentcard"
	"github.com/switchboardhq/switchboard/store"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/witness"
)

// ErrorCase is one error switchboard names, as a real call returned it.
type ErrorCase struct {
	Name string // the sentinel's or type's name: "ErrNotFound", "*RetryError"
	// Is reports whether Err is the case's error (errors.Is or errors.As).
	Is  func(error) bool
	Err error // what the call returned
}

func is(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }

// ErrorCases makes every exported sentinel error and error type of package
// switchboard happen through a real call — an unknown todo, a revoked
// credential, a rewritten audit log, a closed Switchboard, a flood of
// requests — and returns them, for a host to check that its surface shows
// each the one way (switchboard's messages carry "switchboard: " once, then
// the verb). Errors of package witness are its own (see its tests).
func ErrorCases(t testing.TB) []ErrorCase {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("switchboardtest: error cases: %v", err)
		}
	}
	clk := &StepClock{}
	skey, vkey, err := switchboard.NewLogKey("errors.example/log")
	must(err)
	k := NewKit(t, &switchboard.Config{Clock: clk, LogKey: skey, EventRetention: time.Hour, TodoRetention: -1,
		Quotas: switchboard.Quotas{RequesterBurst: 2, RequesterRefill: time.Hour, LiveEdgesPerRequester: 3, Cooldown: -1}})
	sb := k.SB
	var out []ErrorCase
	add := func(name string, match func(error) bool, err error) {
		t.Helper()
		if err == nil || !match(err) {
			t.Fatalf("switchboardtest: error cases: %s: the call returned %v", name, err)
		}
		out = append(out, ErrorCase{Name: name, Is: match, Err: err})
	}
	inbox := func(verbs ...switchboard.Verb) switchboard.Scope {
		return switchboard.Scope{{Queue: "inbox", Verbs: verbs}}
	}
	k.Publish("alice", "alice-bot")
	k.Publish("bob", "bob-desk")
	k.Publish("carol", "carol-bot")
	_, friend := k.Friend("alice-bot", "bob-desk", inbox(switchboard.VerbCreateFor))
	worker := k.Worker("bob-desk", "inbox")

	_, err = sb.Get(ctx, worker, "todo_nope")
	add("ErrNotFound", is(switchboard.ErrNotFound), err)
	_, _, err = sb.CreateFor(ctx, switchboard.Credential("sbg_bogus"), "inbox", switchboard.NewTodo{Kind: "k"})
	add("ErrUnauthenticated", is(switchboard.ErrUnauthenticated), err)
	_, _, err = sb.Claim(ctx, friend, "inbox", nil)
	add("ErrForbidden", is(switchboard.ErrForbidden), err)
	_, _, err = sb.Claim(ctx, worker, "inbox", nil)
	add("ErrQueueEmpty", is(switchboard.ErrQueueEmpty), err)
	var kinds switchboard.Kinds
	_, err = kinds.Handler()(ctx, switchboard.Todo{ID: "todo_of_no_kind", Kind: "nope"})
	add("ErrUnknownKind", is(switchboard.ErrUnknownKind), err)
	_, _, err = sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{})
	add("ErrInvalidArgument", is(switchboard.ErrInvalidArgument), err)
	td, _, err := sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "k"})
	must(err)
	_, l, err := sb.Claim(ctx, worker, "inbox", nil)
	must(err)
	add("ErrInvalidTransition", is(switchboard.ErrInvalidTransition), sb.Cancel(ctx, worker, td.ID, "no"))
	add("ErrLeaseLost", is(switchboard.ErrLeaseLost), sb.Complete(ctx, worker, switchboard.Lease{TodoID: l.TodoID, Token: "lease_guess"}, nil))
	// A bit flipped in the stored todo (the kit's store is new: layout 8,
	// checksummed records).
	damaged, _, err := sb.CreateFor(ctx, friend, "inbox", switchboard.NewTodo{Kind: "k"})
	must(err)
	must(k.Store.Update(ctx, func(tx store.Tx) error {
		v, err := tx.Get("todos", []byte(damaged.ID))
		if err != nil {
			return err
		}
		v = bytes.Clone(v)
		v[len(v)-1] ^= 1
		return tx.Put("todos", []byte(damaged.ID), v)
	}))
	_, err = sb.Get(ctx, worker, damaged.ID)
	add("ErrDamaged", is(switchboard.ErrDamaged), err)
	_, err = sb.Publish(ctx, switchboard.Persona{ID: "bob-desk", Owner: k.Human("carol"), Card: switchboard.PersonaCard(switchboard.CardFields{Name: "x", Description: "y", Version: "1", URL: "https://x.example/"})})
	add("ErrConflict", is(switchboard.ErrConflict), err)

	e, _ := k.Request("carol-bot", "bob-desk", inbox(switchboard.VerbCreateFor), "hello")
	_, err = sb.Approve(ctx, k.Human("bob"), e.ID, inbox(switchboard.VerbCreateFor, switchboard.VerbClaim))
	add("ErrScopeExceedsRequest", is(switchboard.ErrScopeExceedsRequest), err)
	_, pickup := switchboard.NewPickup()
	_, _, err = sb.Request(ctx, switchboard.FriendRequest{From: "carol-bot", To: "alice-bot", Why: "w", Pickup: pickup, Scope: inbox(switchboard.VerbCreateFor), IDToken: "not.a.token"})
	add("ErrProvenance", is(switchboard.ErrProvenance), err)

	// Carol's requester bucket (burst 2) is spent by two requests; the
	// third is rate limited. Her live edges (3) then run out.
	k.Publish("carol", "carol-2")
	k.Publish("dave", "dave-desk")
	k.Publish("erin", "erin-desk")
	k.Request("carol-bot", "dave-desk", inbox(switchboard.VerbCreateFor), "hi")
	var r switchboard.FriendRequest
	_, pickup = switchboard.NewPickup()
	r = switchboard.FriendRequest{From: "carol-bot", To: "erin-desk", Why: "hi", Pickup: pickup, Scope: inbox(switchboard.VerbCreateFor)}
	r.IDToken = k.Issuer.RequestToken("carol", r, clk.Now())
	_, _, err = sb.Request(ctx, r)
	add("ErrRateLimited", is(switchboard.ErrRateLimited), err)
	add("*RetryError", func(err error) bool { var re *switchboard.RetryError; return errors.As(err, &re) }, err)
	clk.Step(3 * time.Hour) // the bucket refills
	for _, to := range []string{"erin-desk", "alice-bot"} {
		_, pickup = switchboard.NewPickup()
		r = switchboard.FriendRequest{From: "carol-2", To: to, Why: "hi", Pickup: pickup, Scope: inbox(switchboard.VerbCreateFor)}
		r.IDToken = k.Issuer.RequestToken("carol", r, clk.Now())
		_, _, err = sb.Request(ctx, r)
	}
	add("ErrQuotaExceeded", is(switchboard.ErrQuotaExceeded), err)

	_, err = switchboard.OpenCheckpoint([]byte("x\n1\nAAAA\n\n— x AAAA\n"), vkey)
	add("ErrProof", is(switchboard.ErrProof), err)
	bare := NewKit(t, nil)
	_, err = bare.SB.Checkpoint(ctx)
	add("ErrNoLogKey", is(switchboard.ErrNoLogKey), err)
	_, _, err = bare.SB.RegisterWebhook(ctx, friend, "https://hooks.example/x")
	add("ErrNoWebhooks", is(switchboard.ErrNoWebhooks), err)
	_, err = switchboard.VerifyWebhook("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", http.Header{"Webhook-Id": {"m"}, "Webhook-Timestamp": {"1"}, "Webhook-Signature": {"v1,AAAA"}}, nil, time.Unix(1, 0), 0)
	add("ErrWebhookSignature", is(switchboard.ErrWebhookSignature), err)

	// Audit events past retention are purged; a proof of one, and a
	// subscription from before them, cannot be had.
	_, err = sb.Checkpoint(ctx)
	must(err)
	clk.Step(2 * time.Hour)
	_, err = sb.Reap(ctx)
	must(err)
	_, err = sb.ProveEvent(ctx, 1, 0)
	add("ErrEventPurged", is(switchboard.ErrEventPurged), err)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sub := sb.Subscribe(sctx, 1, nil) // event 2 on is purged too
	for range sub.C {
	}
	add("ErrFellBehind", is(switchboard.ErrFellBehind), sub.Err())

	// DPoP: a bound credential without a proof, with a bad proof, and
	// without the nonce a host requires.
	key, err := NewProofKey("ES256")
	must(err)
	dk := NewKit(t, &switchboard.Config{DPoP: &switchboard.DPoPConfig{RequireNonce: true}})
	dk.Publish("alice", "alice-bot")
	dk.Publish("bob", "bob-desk")
	_, bound := dk.BoundFriend("alice-bot", "bob-desk", inbox(switchboard.VerbCreateFor), key)
	_, err = dk.SB.Authenticate(ctx, bound)
	add("ErrDPoPRequired", is(switchboard.ErrDPoPRequired), err)
	_, err = dk.SB.Prove(ctx, bound, switchboard.Proof{JWT: "x.y.z", Method: "POST", URL: "https://host.example/mcp"})
	add("ErrInvalidDPoPProof", is(switchboard.ErrInvalidDPoPProof), err)
	_, err = dk.SB.Prove(ctx, bound, key.Proof("POST", "https://host.example/mcp", string(bound), time.Now()))
	add("ErrUseDPoPNonce", is(switchboard.ErrUseDPoPNonce), err)

	// A card whose signature the directory requires is missing.
	cardSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := switchboard.PersonaCard(switchboard.CardFields{Name: "Unsigned", Description: "no signature", Version: "1.0", URL: "http://" + r.Host + "/"})
		w.Header().Set("Content-Type", "application/json")
		b, _ := c.MarshalJSON()
		_, _ = w.Write(b)
	}))
	t.Cleanup(cardSrv.Close)
	signer, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	trusted := &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: signer.Public(), KeyID: "trusted", Algorithm: "ES256"}}}
	rd, err := switchboard.NewRemoteDirectory(switchboard.RemoteOptions{Origins: []string{cardSrv.URL},
		Trust: agentcard.Trust{Policy: agentcard.SignaturesRequired, Keys: trusted}})
	must(err)
	_, err = rd.Lookup(ctx, cardSrv.URL)
	add("ErrCardSignature", is(switchboard.ErrCardSignature), err)

	// The audit log rewritten under a signed checkpoint.
	ak := NewKit(t, &switchboard.Config{LogKey: skey})
	ak.Publish("alice", "alice-bot")
	ak.Publish("bob", "bob-desk")
	_, err = ak.SB.Checkpoint(ctx)
	must(err)
	must(RewriteAuditEvent(ctx, ak.Store, 1, func(leaf []byte) []byte { return append(leaf[:len(leaf)-1], ' ', '}') }))
	_, err = ak.SB.Checkpoint(ctx)
	add("ErrAuditBroken", is(switchboard.ErrAuditBroken), err)
	add("*AuditError", func(err error) bool { var ae *switchboard.AuditError; return errors.As(err, &ae) }, err)

	// A second run that made a new log key instead of keeping its own.
	lk := NewKit(t, &switchboard.Config{LogKey: skey})
	_, err = lk.SB.Checkpoint(ctx)
	must(err)
	otherKey, _, err := switchboard.NewLogKey("errors.example/log")
	must(err)
	must(lk.SB.Close())
	second, err := switchboard.New(lk.Store, &switchboard.Config{LogKey: otherKey})
	must(err)
	_, err = second.Checkpoint(ctx)
	add("ErrUnknownLogKey", is(switchboard.ErrUnknownLogKey), err)
	must(second.Close())

	// A store laid out by a newer version, and a closed Switchboard.
	newer := memory.New()
	must(newer.Update(ctx, func(tx store.Tx) error {
		return tx.Put("meta", []byte("schema"), binary.BigEndian.AppendUint64(nil, 1<<20))
	}))
	_, err = switchboard.New(newer, nil)
	add("ErrNewerSchema", is(switchboard.ErrNewerSchema), err)
	must(bare.SB.Close())
	must(bare.Store.Close())
	_, err = bare.SB.Get(ctx, friend, "todo_x")
	add("ErrClosed", is(switchboard.ErrClosed), err)

	// A commit whose answer never came: the store commits, then reports
	// the outcome unknown, as a database connection lost during COMMIT
	// does (store/postgres's tests make that happen on a real server).
	lost := &lostAnswers{Store: memory.New()}
	lsb, err := switchboard.New(lost, &switchboard.Config{Issuers: []switchboard.Issuer{k.Issuer.Config()}})
	must(err)
	lost.on.Store(true)
	_, err = lsb.Publish(ctx, switchboard.Persona{ID: "lost-bot", Owner: k.Human("alice"),
		Card: switchboard.PersonaCard(switchboard.CardFields{Name: "lost-bot", Description: "a persona", Version: "1.0.0", URL: "https://switchboardtest.invalid/agents/lost-bot"})})
	add("ErrCommitUnknown", is(switchboard.ErrCommitUnknown), err)
	must(lsb.Close())
	must(lost.Close())

	// Witnesses: one that cannot be reached, one that sees a fork, one
	// told the wrong size.
	priv, wkey, err := witness.NewKey("errors.example/witness")
	must(err)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	wk := NewKit(t, &switchboard.Config{LogKey: skey, Witnesses: []switchboard.WitnessConfig{{Witness: &witness.Client{URL: gone.URL}, Key: wkey}}})
	wk.Publish("alice", "alice-bot")
	_, err = wk.SB.Checkpoint(ctx)
	add("ErrWitness", is(switchboard.ErrWitness), err)
	w, err := witness.NewServer(witness.Config{Name: "errors.example/witness", Key: priv, Store: memory.New(), Logs: []witness.Log{{Origin: "errors.example/log", Keys: []string{vkey}}}})
	must(err)
	cp, err := wk.SB.Checkpoint(ctx) // signed, the witness unreachable: the log's note
	if !errors.Is(err, switchboard.ErrWitness) {
		must(err)
	}
	_, err = w.AddCheckpoint(ctx, 0, nil, cp.Note)
	must(err)
	_, err = w.AddCheckpoint(ctx, 0, nil, cp.Note)
	add("*WitnessConflict", func(err error) bool { var wc *switchboard.WitnessConflict; return errors.As(err, &wc) }, err)
	wk.Publish("alice", "alice-2")
	fork, err := wk.SB.Checkpoint(ctx)
	if !errors.Is(err, switchboard.ErrWitness) {
		must(err)
	}
	_, err = w.AddCheckpoint(ctx, cp.Size, nil, fork.Note) // no proof: it does not extend what was cosigned
	add("ErrWitnessRefused", is(switchboard.ErrWitnessRefused), err)
	_, err = w.AddCheckpoint(ctx, 0, nil, []byte(strings.Replace(string(cp.Note), "errors.example/log", "errors.example/other", 1)))
	add("ErrWitnessForbidden", is(switchboard.ErrWitnessForbidden), err)
	return out
}

// lostAnswers is a store whose Updates, once on, commit and then report
// their outcome unknown: the answer to a COMMIT that was lost.
type lostAnswers struct {
	store.Store
	on atomic.Bool
}

func (l *lostAnswers) Update(ctx context.Context, fn func(store.Tx) error) error {
	err := l.Store.Update(ctx, fn)
	if err == nil && l.on.Load() {
		return fmt.Errorf("lost: update: %w", store.ErrCommitUnknown)
	}
	return err
}
