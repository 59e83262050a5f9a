package bolt

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	sb "github.com/switchboardhq/switchboard"
	"github.com/switchboardhq/switchboard/switchboardtest"
)

var sbPowerCuts = flag.Int("sb-powercuts", 0, "simulated power cuts TestPowerCutSwitchboard runs (default 60, 6 with -race)")

// sbModel is what a switchboard on the store acknowledged.
type sbModel struct {
	mu        sync.Mutex
	created   map[string]string // dedup key → todo id
	completed map[string]bool   // todo ids
	edges     map[string]sb.EdgeState
}

func (m *sbModel) note(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
}

// check reopens nothing: it reads s and compares it with what was
// acknowledged, and verifies the audit log.
func (m *sbModel) check(ctx context.Context, s *sb.Switchboard, cred sb.Credential, owner sb.Human) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, id := range m.created {
		td, err := s.Get(ctx, cred, id)
		if err != nil {
			return fmt.Errorf("acknowledged todo %s (%s) lost: %w", id, key, err)
		}
		if m.completed[id] && td.State != sb.TodoDone {
			return fmt.Errorf("acknowledged completion of %s lost: %s", id, td.State)
		}
	}
	for id, want := range m.edges {
		e, err := s.Edge(ctx, owner, id)
		if err != nil {
			return fmt.Errorf("acknowledged edge %s lost: %w", id, err)
		}
		switch {
		case want == sb.EdgeRevoked && e.State != sb.EdgeRevoked:
			return fmt.Errorf("acknowledged revocation of %s lost: %s", id, e.State)
		case want == sb.EdgeApproved && (e.State != sb.EdgeApproved && e.State != sb.EdgeRevoked || e.GrantID == ""):
			return fmt.Errorf("acknowledged approval of %s lost: %s", id, e.State)
		}
	}
	if _, err := s.VerifyAudit(ctx); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return nil
}

// TestPowerCutSwitchboard drives a Switchboard on the store — creates,
// claims, completions, failures, friend requests, approvals, revocations —
// with a tiny log (checkpoints and segment rotations every few commits)
// and cuts the power at random points, chained, as TestPowerCut does; after
// every cut the store must open with every acknowledged call in it and an
// audit log that verifies.
func TestPowerCutSwitchboard(t *testing.T) {
	ctx := context.Background()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	dir := t.TempDir()
	p := &powerCut{t: t, dir: dir, path: filepath.Join(dir, "sb.db"), rng: rand.New(rand.NewPCG(seed, 2))}
	is, err := switchboardtest.NewIssuer("powercut")
	if err != nil {
		t.Fatal(err)
	}
	defer is.Close()
	off := sb.Quotas{LiveEdgesPerRequester: -1, RequesterBurst: -1, TargetBurst: -1, PendingPerTarget: -1, Cooldown: -1}
	cfg := &sb.Config{Issuers: []sb.Issuer{is.Config()}, Quotas: off}
	owner := is.Human("owner")

	// The first life: a desk and its owner's own credential for it.
	s0, fs0, _, err := p.openImage(crashImage{}, &Options{fileNoSync: true}, 0, keepSynced)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := sb.New(s0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Publish(ctx, sb.Persona{ID: "desk", Owner: owner, Card: sb.PersonaCard(sb.CardFields{Name: "Desk", Description: "d", Version: "1", URL: "https://x.example/agents/desk"}), Discoverable: true}); err != nil {
		t.Fatal(err)
	}
	all := []sb.Verb{sb.VerbCreateFor, sb.VerbList, sb.VerbGet, sb.VerbClaim, sb.VerbComplete, sb.VerbFail}
	_, cred, err := sw.Vend(ctx, owner, sb.VendRequest{Agent: "desk", Scope: sb.Scope{{Queue: "inbox", Verbs: all}}})
	if err != nil {
		t.Fatal(err)
	}
	var bb []byte
	snapshotAtCrash(t, s0, fs0, &bb)
	fs0.Crash()
	_ = sw.Close()
	_ = s0.Close()
	img := crashImage{bbolt: bb, log: fs0.image(p.rng, keepSynced)}

	m := &sbModel{created: map[string]string{}, completed: map[string]bool{}, edges: map[string]sb.EdgeState{}}
	cuts, recoveries := 0, 0
	for want := cutsOr(*sbPowerCuts, 60); cuts < want; {
		k := keep(p.rng.IntN(4))
		opts := &Options{fileNoSync: true, CheckpointBytes: 4 << 10, LogSegmentSize: 16 << 10, CommitEachUpdate: p.rng.IntN(3) == 0}
		crashAt := 1 + p.rng.IntN(300)
		if p.rng.IntN(8) == 0 {
			crashAt = 1 + p.rng.IntN(6)
		}
		st, fs, during, err := p.openImage(img, opts, crashAt, k)
		if err != nil {
			t.Fatalf("cut %d: open after a power cut (%s): %v; image%s", cuts, k, err, describe(img.log))
		}
		cuts++
		if during != nil {
			recoveries++
			img = *during
			continue
		}
		var bb []byte
		snapshotAtCrash(t, st, fs, &bb)
		sw, err := sb.New(st, cfg)
		if err != nil {
			if fs.Crashed() { // New writes too (its layout record)
				_ = st.Close()
				img = crashImage{bbolt: bb, log: fs.image(p.rng, k)}
				continue
			}
			t.Fatalf("cut %d: New: %v", cuts, err)
		}
		if err := m.check(ctx, sw, cred, owner); err != nil {
			t.Fatalf("cut %d (image: %s%s): %v", cuts, k, describe(img.log), err)
		}
		var wg sync.WaitGroup
		for w := range 4 {
			rng := rand.New(rand.NewPCG(seed, uint64(cuts*8+w)))
			wg.Go(func() {
				for n := 0; !fs.Crashed(); n++ {
					if w == 0 {
						m.friend(ctx, sw, is, owner, fmt.Sprintf("r%d-%d", cuts, n), n%2 == 0)
						continue
					}
					key := fmt.Sprintf("k%d", rng.IntN(3000))
					if td, _, err := sw.CreateFor(ctx, cred, "inbox", sb.NewTodo{Kind: "k", DedupKey: key}); err == nil {
						m.note(func() { m.created[key] = td.ID })
					}
					got, l, err := sw.Claim(ctx, cred, "inbox", nil)
					if err != nil {
						continue
					}
					if rng.IntN(4) == 0 {
						_ = sw.Fail(ctx, cred, l, "flaky")
					} else if sw.Complete(ctx, cred, l, []byte(`{"ok":true}`)) == nil {
						m.note(func() { m.completed[got.ID] = true })
					}
				}
			})
		}
		wg.Wait()
		_ = sw.Close()
		_ = st.Close()
		img = crashImage{bbolt: bb, log: fs.image(p.rng, k)}
	}
	st, _, _, err := p.openImage(img, &Options{fileNoSync: true}, 0, keepAll)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sw, err = sb.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	if err := m.check(ctx, sw, cred, owner); err != nil {
		t.Fatal(err)
	}
	if len(m.created) == 0 || len(m.edges) == 0 {
		t.Fatalf("%d todos and %d edges acknowledged: the test tested nothing", len(m.created), len(m.edges))
	}
	t.Logf("%d power cuts (%d during recovery); acknowledged: %d todos, %d completions, %d edges", cuts, recoveries, len(m.created), len(m.completed), len(m.edges))
}

// friend sends a friend request from a new persona to the desk, approves
// it, and revokes the grant if revoke, noting what was acknowledged.
func (m *sbModel) friend(ctx context.Context, s *sb.Switchboard, is *switchboardtest.Issuer, owner sb.Human, sub string, revoke bool) {
	if _, err := s.Publish(ctx, sb.Persona{ID: sub, Owner: is.Human(sub), Card: sb.PersonaCard(sb.CardFields{Name: "R", Description: "r", Version: "1", URL: "https://r.example/" + sub})}); err != nil {
		return
	}
	_, pickup := sb.NewPickup()
	req := sb.FriendRequest{From: sub, To: "desk", Scope: sb.Scope{{Queue: "inbox", Verbs: []sb.Verb{sb.VerbCreateFor}}}, Why: "power cut", Pickup: pickup}
	req.IDToken = is.RequestToken(sub, req, time.Now())
	e, _, err := s.Request(ctx, req)
	if err != nil {
		return
	}
	m.note(func() {
		if m.edges[e.ID] == "" {
			m.edges[e.ID] = sb.EdgePending
		}
	})
	g, err := s.Approve(ctx, owner, e.ID, nil)
	if err != nil {
		return
	}
	m.note(func() {
		if m.edges[e.ID] != sb.EdgeRevoked {
			m.edges[e.ID] = sb.EdgeApproved
		}
	})
	if revoke && s.Revoke(ctx, owner, g.ID) == nil {
		m.note(func() { m.edges[e.ID] = sb.EdgeRevoked })
	}
}
