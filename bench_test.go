package switchboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/store/bolt"
	"github.com/switchboardhq/switchboard/store/memory"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

// BenchmarkCreateFor measures one CreateFor (one transaction, one fsync on
// bolt) per op.
func BenchmarkCreateFor(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			st := be.open(b)
			defer st.Close()
			h := newHarness(b, st)
			_, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k", Payload: make([]byte, 256)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClaimComplete measures a Claim plus a Complete per op, over a
// queue of pre-created todos.
func BenchmarkClaimComplete(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			st := be.open(b)
			defer st.Close()
			h := newHarness(b, st)
			friend, w, _ := queueSetup(b, h)
			for i := 0; i < b.N; i++ {
				if _, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "k", DedupKey: fmt.Sprint(i)}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, l, err := h.sb.Claim(ctx, w, "inbox", nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := h.sb.Complete(ctx, w, l, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRequest measures one friend request per op — token verification
// (RS256), directory resolution, the anti-spam checks and the transaction
// that stores the edge and the approval — with the default quotas and each
// request from a new human, so no limit refuses. Token minting is excluded.
func BenchmarkRequest(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			st := be.open(b)
			defer st.Close()
			h := newHarness(b, st)
			reqs := make([]sb.FriendRequest, b.N)
			for i := range reqs {
				hu := h.iss.Human(fmt.Sprintf("u%d", i))
				id := fmt.Sprintf("u%d-bot", i)
				h.publish(hu, id, true)
				// One target human per request: no rate limit or pending cap
				// is reached, however large b.N is.
				to := fmt.Sprintf("t%d", i)
				h.publish(h.iss.Human(fmt.Sprintf("owner%d", i)), to, true)
				reqs[i] = sb.FriendRequest{Pickup: testPickup, From: id, To: to, Scope: inboxCreate, Why: "hi", IDToken: h.token(hu, id, to, inboxCreate, "hi")}
			}
			b.ResetTimer()
			for i := range reqs {
				if _, _, err := h.sb.Request(ctx, reqs[i]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCreateForParallel measures CreateFor from 16 concurrent callers:
// bbolt's group commit against one commit per Update, in one run, and the
// group commit without fsync (its CPU cost alone).
func BenchmarkCreateForParallel(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts *bolt.Options
	}{
		{"bolt-group-commit", nil},
		{"bolt-commit-each", &bolt.Options{CommitEachUpdate: true}},
		{"bolt-group-commit-nosync", &bolt.Options{NoSync: true}}, // the CPU cost alone
	} {
		b.Run(mode.name, func(b *testing.B) {
			st, err := bolt.Open(filepath.Join(b.TempDir(), "sb.db"), mode.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			h := newHarness(b, st)
			_, cred := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
			b.SetParallelism(8) // 8 × GOMAXPROCS(2) = 16 callers
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, _, err := h.sb.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k", Payload: make([]byte, 256)}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkListFriend measures one List through a friend grant that
// created 20 todos, in a queue where other grants created 0 or 10,000
// more: the cost should not follow the others' work.
func BenchmarkListFriend(b *testing.B) {
	for _, others := range []int{0, 10_000} {
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			st, err := bolt.Open(filepath.Join(b.TempDir(), "sb.db"), &bolt.Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			h := newHarness(b, st)
			_, alice := h.friend(h.alice, h.bob, "alice-bot", "bob-desk", scope("inbox", sb.VerbCreateFor, sb.VerbList))
			_, carol := h.friend(h.carol, h.bob, "carol-bot", "bob-desk", inboxCreate)
			for i := range others {
				if _, _, err := h.sb.CreateFor(ctx, carol, "inbox", sb.NewTodo{Kind: "k", Title: fmt.Sprint(i)}); err != nil {
					b.Fatal(err)
				}
				if i%(others/20) == 0 {
					if _, _, err := h.sb.CreateFor(ctx, alice, "inbox", sb.NewTodo{Kind: "k"}); err != nil {
						b.Fatal(err)
					}
				}
			}
			for range 20 - min(others, 20) {
				if _, _, err := h.sb.CreateFor(ctx, alice, "inbox", sb.NewTodo{Kind: "k"}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				got, err := h.sb.List(ctx, alice, "inbox", nil)
				if err != nil || len(got) != 20 {
					b.Fatal(len(got), err)
				}
			}
		})
	}
}

// BenchmarkDPoP measures a CreateFor on the memory store with a bearer
// credential beside the same call on a grant bound to a key: Prove (the
// proof's signature checked, its jti spent in its own transaction) and
// then CreateFor. Proofs are signed before the timer starts: signing is
// the agent's cost, not the host's.
func BenchmarkDPoP(b *testing.B) {
	for _, alg := range []string{"bearer", "ES256", "EdDSA"} {
		b.Run(alg, func(b *testing.B) {
			st := memory.New()
			defer st.Close()
			h := newHarness(b, st)
			var cred sb.Credential
			var key *switchboardtest.ProofKey
			if alg == "bearer" {
				_, cred = h.friend(h.alice, h.bob, "alice-bot", "bob-desk", inboxCreate)
			} else {
				var err error
				if key, err = switchboardtest.NewProofKey(alg); err != nil {
					b.Fatal(err)
				}
				r := sb.FriendRequest{From: "alice-bot", To: "bob-desk", Scope: inboxCreate, Why: "bench", Pickup: testPickup, Key: key.JWK()}
				r.IDToken = h.iss.RequestToken("alice", r, h.clock.Now())
				e, _, err := h.sb.Request(ctx, r)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := h.sb.Approve(ctx, h.bob, e.ID, nil); err != nil {
					b.Fatal(err)
				}
				if _, cred, err = h.sb.CollectWithProof(ctx, e.ID, testSecret, key.Proof("POST", collectURL, testSecret, h.clock.Now())); err != nil {
					b.Fatal(err)
				}
			}
			proofs := make([]sb.Proof, b.N)
			if key != nil {
				for i := range proofs {
					proofs[i] = key.Proof("POST", apiURL, string(cred), h.clock.Now())
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var a sb.Auth = cred
				if key != nil {
					p, err := h.sb.Prove(ctx, cred, proofs[i])
					if err != nil {
						b.Fatal(err)
					}
					a = p
				}
				if _, _, err := h.sb.CreateFor(ctx, a, "inbox", sb.NewTodo{Kind: "k", Payload: make([]byte, 256)}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWork measures Work per todo over a queue of pre-created todos
// (memory store, one handler at a time), with a Handler that decodes the
// payload and encodes the result itself ("handler") and with the same work
// registered by kind ("kinds"): the difference is what dispatch by kind
// costs.
func BenchmarkWork(b *testing.B) {
	payload := []byte(`{"invoice":"INV-1","amount":12}`)
	run := func(b *testing.B, hd sb.Handler) {
		st := memory.New()
		defer st.Close()
		h := newHarness(b, st)
		friend, w, _ := queueSetup(b, h)
		for i := 0; i < b.N; i++ {
			if _, _, err := h.sb.CreateFor(ctx, friend, "inbox", sb.NewTodo{Kind: "invoice.review", Payload: payload}); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		if err := h.sb.Work(ctx, w, "inbox", hd, &sb.WorkOptions{UntilEmpty: true}); err != nil {
			b.Fatal(err)
		}
	}
	review := func(in reviewIn) reviewOut { return reviewOut{Approved: in.Amount < 1000, Note: in.Invoice} }
	b.Run("handler", func(b *testing.B) {
		run(b, func(_ context.Context, t sb.Todo) ([]byte, error) {
			in, err := sb.PayloadOf[reviewIn](t)
			if err != nil {
				return nil, err
			}
			return json.Marshal(review(in))
		})
	})
	b.Run("kinds", func(b *testing.B) {
		var kinds sb.Kinds
		sb.HandleKind(&kinds, "invoice.review", func(_ context.Context, _ sb.Todo, in reviewIn) (reviewOut, error) {
			return review(in), nil
		})
		run(b, kinds.Handler())
	})
}
