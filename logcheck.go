// The checks before every signature of the audit log — the stored tree
// against every checkpoint the log knows of (signed and stored, kept
// outside the store, seen by this process) — and Checkpoint and CheckLog,
// which run them.

package switchboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/switchboardhq/switchboard/auditlog"
	"github.com/switchboardhq/switchboard/store"
)

// logAnchor is a checkpoint the stored log must still hold, with the
// words that name it in an AuditError.
type logAnchor struct {
	cp    Checkpoint
	which string // "the stored checkpoint"
	did   string // "signed"
}

// logView is what checkLog found: the stored checkpoint, and with full
// checks the tree as it is now — its size, root and frontier hashes,
// recomputed from the newest anchor's authenticated frontier and the
// events after it, so what is signed next extends everything checked.
type logView struct {
	st       *auditlog.State
	stored   Checkpoint // the stored checkpoint, if has
	has      bool
	current  bool // stored is signed with the current key
	size     uint64
	root     tlog.Hash
	frontier []tlog.Hash // the tree's frontier hashes at size, largest subtree first
}

// fresh reports whether the stored checkpoint already states the tree
// with the current key: nothing new to sign.
func (v *logView) fresh() bool {
	return v.has && v.current && v.stored.Size == v.size && v.stored.Root == v.root
}

// checkLog checks that the store still holds every history signed so far
// that this Switchboard knows of — the stored checkpoint, kept (the one
// Config.Checkpoints keeps) and seen (the largest tree this process
// sequenced or signed) — and that nothing in the store excuses a check:
//
//   - none of them is larger than the log (it was cut short), nor older
//     than what retention purged (retention never purges past a
//     checkpoint the log must still check: see purgeCap);
//   - the stored tree hashes at the newest signed one's size fold into its
//     root (its frontier, so authenticated), and every other one of size
//     up to it is proved a prefix of it by a consistency proof read from
//     the store (sound whatever the store holds: both roots are signed or
//     remembered);
//   - every event after the newest signed one hashes to its stored leaf,
//     every stored tree hash over them is what the events give, the tree
//     recomputed from that authenticated frontier and those events has
//     seen's root at seen's size, and its root now is what Checkpoint
//     signs — an extension of every checkpoint checked.
//
// A failure is an *AuditError; a failed read is returned as it is.
func (s *Switchboard) checkLog(t *txn, kept, seen *Checkpoint) (logView, error) {
	var v logView
	st, err := t.lg.State()
	if err != nil {
		return v, err
	}
	v.st = st
	seqOf := func(n uint64) uint64 { return st.Offset + n + 1 }
	if st.Purged > st.Size {
		return v, &AuditError{Seq: seqOf(st.Size), Reason: fmt.Sprintf("the log's state says %d events were purged of %d", st.Purged, st.Size)}
	}
	var signed []logAnchor
	b, err := t.tx.Get(tMeta, []byte(checkpointKey))
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return v, err
	default:
		cp, current, err := openCheckpointWith(b, s.logVerifiers)
		if err != nil {
			return v, checkpointErr("the stored checkpoint", seqOf(0), err)
		}
		v.stored, v.has, v.current = cp, true, current
		signed = append(signed, logAnchor{cp, "the stored checkpoint", "signed"})
	}
	if kept != nil {
		signed = append(signed, logAnchor{*kept, "the checkpoint kept outside the store", "signed"})
	}
	all := signed
	if seen != nil {
		all = append(all[:len(all):len(all)], logAnchor{*seen, "this process", "sequenced or signed"})
	}
	for _, a := range all {
		if a.cp.Size > st.Size {
			return v, &AuditError{Seq: seqOf(st.Size), Reason: fmt.Sprintf("the log holds %d events, fewer than the %d %s %s: it was cut short (a database restored from a backup, or failed over to a standby that was behind, lost acknowledged writes: see docs/scaling.md, \"When the primary fails\")", st.Size, a.cp.Size, a.which, a.did)}
		}
		if a.cp.Size < st.Purged {
			return v, &AuditError{Seq: seqOf(a.cp.Size), Reason: fmt.Sprintf("the log's state says its first %d events were purged, past the %d events %s %s, which then can no longer be checked: retention never purges past a checkpoint the log must check, so the state was rewritten (or %s is older than everything retention kept)", st.Purged, a.cp.Size, a.which, a.did, a.which)}
		}
	}

	// The newest signed checkpoint: the tree hashes at its size,
	// authenticated by its root, are what the rest is checked against and
	// built on.
	var base *logAnchor
	for i := range signed {
		if base == nil || signed[i].cp.Size > base.cp.Size {
			base = &signed[i]
		}
	}
	fr := newFrontier()
	from := st.Purged
	if base != nil {
		hs, err := s.anchorFrontier(t, st, *base, base == &signed[0] && v.has)
		if err != nil {
			return v, err
		}
		for _, a := range all {
			if a.cp.Size <= base.cp.Size {
				if err := prefixOf(t, st, a, *base); err != nil {
					return v, err
				}
			}
		}
		from = base.cp.Size
		for i, x := range auditlog.FrontierIndexes(from) {
			fr.hashes[x] = hs[i]
		}
	} else if st.Purged > 0 {
		// Nothing was ever signed: the tree starts from the hashes
		// retention kept, which nothing can check (seen, if any, is
		// checked on the way).
		idx := auditlog.FrontierIndexes(st.Purged)
		hs, err := t.lg.ReadHashes(idx)
		if err != nil {
			return v, &AuditError{Seq: seqOf(st.Purged), Reason: fmt.Sprintf("the tree hashes kept for the %d purged events are unreadable: %v", st.Purged, err)}
		}
		for i, x := range idx {
			fr.hashes[x] = hs[i]
		}
	}
	// seen, if past what was signed, is checked where the events reach it.
	var ahead *logAnchor
	if seen != nil && seen.Size > from {
		ahead = &all[len(all)-1]
	} else if seen != nil && base == nil {
		if err := prefixOfEvents(st, all[len(all)-1], fr, from); err != nil {
			return v, err
		}
	}

	// The events after the newest signed checkpoint, rehashed: the tree now.
	next := from
	var bad error
	err = t.tx.Scan(tEvents, be64b(seqOf(from)), be64b(seqOf(st.Size)), func(k, val []byte) bool {
		seq := keySeq(k)
		if seq != seqOf(next) {
			bad = &AuditError{Seq: seqOf(next), Reason: fmt.Sprintf("event %d, after the last checkpoint, is missing", seqOf(next))}
			return false
		}
		leaf, stored, err := auditlog.SplitEntry(next, val)
		if err == nil && tlog.RecordHash(leaf) != tlog.Hash(stored[:tlog.HashSize]) {
			err = errors.New("it does not hash to its stored leaf")
		}
		if err != nil {
			bad = &AuditError{Seq: seq, Reason: fmt.Sprintf("event %d, after the last signed checkpoint: %v", seq, err)}
			return false
		}
		hashes, err := tlog.StoredHashes(int64(next), leaf, fr)
		if err != nil {
			bad = &AuditError{Seq: seq, Reason: fmt.Sprintf("the tree cannot be rebuilt at event %d: %v", seq, err)}
			return false
		}
		first := tlog.StoredHashIndex(0, int64(next))
		for j, h := range hashes {
			if !bytes.Equal(stored[j*tlog.HashSize:(j+1)*tlog.HashSize], h[:]) {
				start := next + 1 - 1<<j
				bad = &AuditError{Seq: seqOf(start), Reason: fmt.Sprintf("the tree hash over events %d to %d, after the last checkpoint, differs from the events: the log was rewritten", seqOf(start), seq)}
				return false
			}
			fr.hashes[first+int64(j)] = h
		}
		fr.forget()
		next++
		if ahead != nil && next == ahead.cp.Size {
			if bad = prefixOfEvents(st, *ahead, fr, next); bad != nil {
				return false
			}
		}
		return true
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return v, err
	}
	if next != st.Size {
		return v, &AuditError{Seq: seqOf(next), Reason: fmt.Sprintf("event %d, after the last checkpoint, is missing", seqOf(next))}
	}
	v.size, v.root = st.Size, auditlog.EmptyRoot
	if st.Size > 0 {
		if v.frontier = fr.frontier(st.Size); v.frontier == nil {
			return v, &AuditError{Seq: seqOf(st.Size - 1), Reason: fmt.Sprintf("the tree of %d events cannot be rebuilt", st.Size)}
		}
		v.root = auditlog.FoldFrontier(v.frontier)
	}
	return v, nil
}

// prefixOfEvents checks that the tree rebuilt from the events (fr, at size
// n) has the root a states.
func prefixOfEvents(st *auditlog.State, a logAnchor, fr *frontier, n uint64) error {
	root := auditlog.EmptyRoot
	if n > 0 {
		hs := fr.frontier(n)
		if hs == nil {
			return &AuditError{Seq: st.Offset + n, Reason: fmt.Sprintf("the tree of %d events cannot be rebuilt to check %s", n, a.which)}
		}
		root = auditlog.FoldFrontier(hs)
	}
	if root != a.cp.Root {
		return &AuditError{Seq: st.Offset + 1, Reason: fmt.Sprintf("the first %d events no longer hash to the root %s %s: the log was rewritten", n, a.which, a.did)}
	}
	return nil
}

// anchorFrontier reads the stored tree hashes at a's size — the perfect
// subtrees covering its events — and checks that they fold into its root.
// For the stored checkpoint (stored), the frontier hashes stored with it
// (authentic if they fold into its signed root) name the first subtree
// whose events changed.
func (s *Switchboard) anchorFrontier(t *txn, st *auditlog.State, a logAnchor, stored bool) ([]tlog.Hash, error) {
	seqOf := func(n uint64) uint64 { return st.Offset + n + 1 }
	if a.cp.Size == 0 {
		if a.cp.Root != auditlog.EmptyRoot {
			return nil, &AuditError{Seq: seqOf(0), Reason: fmt.Sprintf("the empty log %s %s has a root that is not the empty tree's", a.which, a.did)}
		}
		return nil, nil
	}
	idx := auditlog.FrontierIndexes(a.cp.Size)
	hs, err := t.lg.ReadHashes(idx)
	if err != nil {
		return nil, &AuditError{Seq: seqOf(0), Reason: fmt.Sprintf("the tree hashes of the %d events %s %s are unreadable: %v", a.cp.Size, a.which, a.did, err)}
	}
	if auditlog.FoldFrontier(hs) == a.cp.Root {
		return hs, nil
	}
	if stored {
		if b, err := t.tx.Get(tMeta, []byte(frontierKey)); err == nil && len(b) == len(hs)*tlog.HashSize {
			signed := make([]tlog.Hash, len(hs))
			for i := range signed {
				copy(signed[i][:], b[i*tlog.HashSize:])
			}
			if auditlog.FoldFrontier(signed) == a.cp.Root {
				var start uint64
				for i, x := range idx {
					level, _ := tlog.SplitStoredHashIndex(x)
					end := start + 1<<level
					if hs[i] != signed[i] {
						return nil, &AuditError{Seq: seqOf(start), Reason: fmt.Sprintf("events %d to %d no longer hash to what %s (%d events) %s: the log was rewritten", seqOf(start), seqOf(end-1), a.which, a.cp.Size, a.did)}
					}
					start = end
				}
			}
		}
	}
	return nil, &AuditError{Seq: seqOf(0), Reason: fmt.Sprintf("the first %d events no longer hash to the root %s %s: the log was rewritten", a.cp.Size, a.which, a.did)}
}

// prefixOf checks that the tree a states is a prefix of the one base
// states, by a consistency proof read from the store: sound whatever the
// store holds, both roots being signed or remembered.
func prefixOf(t *txn, st *auditlog.State, a, base logAnchor) error {
	seqOf := func(n uint64) uint64 { return st.Offset + n + 1 }
	if a.cp.Size == base.cp.Size {
		if a.cp.Root != base.cp.Root {
			return &AuditError{Seq: seqOf(0), Reason: fmt.Sprintf("%s and %s state two roots for the same %d events: a fork", a.which, base.which, a.cp.Size)}
		}
		return nil
	}
	if a.cp.Size == 0 {
		if a.cp.Root != auditlog.EmptyRoot {
			return &AuditError{Seq: seqOf(0), Reason: fmt.Sprintf("the empty log %s %s has a root that is not the empty tree's", a.which, a.did)}
		}
		return nil
	}
	proof, err := tlog.ProveTree(int64(base.cp.Size), int64(a.cp.Size), &t.lg)
	if err != nil {
		return &AuditError{Seq: seqOf(a.cp.Size), Reason: fmt.Sprintf("the tree hashes proving that the %d events %s %s are a prefix of the %d %s %s are unreadable: %v", a.cp.Size, a.which, a.did, base.cp.Size, base.which, base.did, err)}
	}
	if err := tlog.CheckTree(proof, int64(base.cp.Size), base.cp.Root, int64(a.cp.Size), a.cp.Root); err != nil {
		return &AuditError{Seq: seqOf(0), Reason: fmt.Sprintf("the %d events %s %s are not a prefix of the %d %s %s: the log was rewritten or forked", a.cp.Size, a.which, a.did, base.cp.Size, base.which, base.did)}
	}
	return nil
}

// VerbCheckpoint names Checkpoint in an Operation: an Observer counts its
// outcomes, so a log that cannot be signed shows in the host's metrics.
const VerbCheckpoint Verb = "checkpoint"

// Checkpoint returns a signed checkpoint of the audit log as it is now:
// the latest stored one if the log has not grown since, else a new one,
// signed with Config.LogKey and stored (VerifyAudit checks the log against
// it). It needs Config.LogKey (ErrNoLogKey). Reap signs one whenever the
// log grew, so the stored one is never older than a reap interval.
// Events still waiting for the sequencer (see Subscribe) are not in it yet.
//
// Before any signature it checks that the store still holds every history
// signed so far that it knows of: the stored checkpoint, the one
// Config.Checkpoints keeps and the largest tree this process sequenced,
// signed or checked (a mark it has not renewed for nearly EventRetention
// is dropped: another process's retention may have purged past it). None
// may be larger than the log or older than what retention purged
// (retention never purges past them, so a purge mark past one is a
// rewrite); the stored tree hashes at the newest one's size must fold into
// its root and every other one must be proved a prefix of it; every event
// since must hash to its stored leaf and every tree hash over them be what
// the events give. The root signed is recomputed from that checked
// frontier and those events, so it extends every checkpoint checked.
// Otherwise it returns an *AuditError (ErrAuditBroken) naming the first
// position it can, and signs nothing: a store rewritten by whoever can
// write it is never signed with the real key. A kept checkpoint newer than
// the stored one (another signer's: the command line on a snapshot of a
// live store) is knowledge, checked like the rest, not a replacement.
//
// With Config.Witnesses, the new checkpoint is signed first (a witness
// cosigns only what the log signed) and then sent to every witness at
// once, each call bounded by its WitnessConfig.Timeout; it is stored, with
// the cosignatures that came back, only after they answered. A witness
// that finds it inconsistent with what it cosigned before (C2SP
// tlog-witness's 422, or 409 for another root at the same size) makes the
// error an *AuditError wrapping ErrWitnessRefused, and nothing is stored
// or kept: later checks never compare against a checkpoint a witness
// refused. A witness that does not know the log or its key (403, 404)
// makes the error wrap ErrWitnessForbidden, one that cannot be reached or
// answers nonsense (a timeout, 5xx, 400) makes it wrap ErrWitness; in both
// cases the checkpoint returned is signed and stored all the same.
//
// Once stored — after the store committed — the checkpoint goes to
// Config.Checkpoints. Under an application's transaction (store/postgres's
// WithTx) nothing outside the store is written or asked: no witness, no
// kept checkpoint; the next Checkpoint outside one does both.
func (s *Switchboard) Checkpoint(ctx context.Context) (cp Checkpoint, err error) {
	ctx, ob := s.observe(ctx, Operation{Verb: VerbCheckpoint})
	defer func() { ob.End(Result{Err: err}) }()
	cp, err = s.checkpoint(ctx)
	return cp, wrapErr("checkpoint", err)
}

// errCheckpointMoved is storeCheckpoint's when the stored checkpoint is no
// longer the one the checks began from: another signer stored one since.
var errCheckpointMoved = errors.New("the stored checkpoint changed while this one was signed")

func (s *Switchboard) checkpoint(ctx context.Context) (Checkpoint, error) {
	if s.logSigner == nil {
		return Checkpoint{}, ErrNoLogKey
	}
	outside := !store.IsInCallersTx(ctx)
	for attempt := 0; ; attempt++ {
		// What this process saw, read before the transaction below
		// begins: every commit it stands for is then in its snapshot.
		seen := s.seen.Get(s.now(), s.cfg.EventRetention)
		kept, err := s.keptCheckpoint(ctx)
		if err != nil {
			return Checkpoint{}, err
		}
		var v logView
		var olds []uint64
		err = s.view(ctx, func(t *txn) error {
			var err error
			if v, err = s.checkLog(t, kept, seen); err != nil {
				return err
			}
			olds, err = s.witnessSizes(t)
			return err
		})
		if err != nil {
			return Checkpoint{}, err
		}
		cp := v.stored
		if !v.fresh() {
			cp = Checkpoint{Origin: s.logSigner.Name(), Size: v.size, Root: v.root}
			if cp.Note, err = note.Sign(&note.Note{Text: checkpointText(cp)}, s.logSigner); err != nil {
				return Checkpoint{}, fmt.Errorf("sign checkpoint: %w", err)
			}
		}
		var cosigned []cosignature
		var werr error
		if outside && len(s.witnesses) > 0 {
			cosigned, werr = s.askWitnesses(ctx, cp, olds)
			if errors.Is(werr, errWitnessAhead) {
				if attempt < 3 {
					continue // another signer's newer checkpoint: check and sign again
				}
				werr = fmt.Errorf("%w: %w", ErrWitness, werr)
			}
			if errors.Is(werr, ErrAuditBroken) {
				return Checkpoint{}, werr // refused: nothing stored, nothing kept
			}
		}
		cp, err = s.storeCheckpoint(ctx, v, cp, cosigned)
		if errors.Is(err, errCheckpointMoved) && attempt < 3 {
			continue
		}
		if err != nil {
			return Checkpoint{}, errors.Join(err, werr)
		}
		if !outside {
			return cp, nil
		}
		s.seen.Note(cp.Size, cp.Root, s.now())
		if s.cfg.Checkpoints != nil && (kept == nil || !bytes.Equal(kept.Note, cp.Note)) {
			if serr := s.cfg.Checkpoints.Save(ctx, cp.Note); serr != nil {
				return cp, errors.Join(werr, fmt.Errorf("keep the checkpoint outside the store: %w", serr))
			}
		}
		return cp, werr
	}
}

// storeCheckpoint stores cp (signed over the tree v found, or v's stored
// checkpoint itself) with the cosignatures witnesses returned, if the
// stored checkpoint is still the one v checked — or already states cp's
// tree (another signer's, or this one): then the cosignatures join it. It
// returns what is stored.
func (s *Switchboard) storeCheckpoint(ctx context.Context, v logView, cp Checkpoint, cosigned []cosignature) (Checkpoint, error) {
	out := cp
	err := s.update(ctx, func(t *txn) error {
		out = cp
		b, err := t.tx.Get(tMeta, []byte(checkpointKey))
		var cur Checkpoint
		has, current := false, false
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return err
		default:
			if cur, current, err = openCheckpointWith(b, s.logVerifiers); err != nil {
				return checkpointErr("the stored checkpoint", 0, err)
			}
			has = true
		}
		signed := cp.Note
		switch {
		case has && current && cur.Size == cp.Size && cur.Root == cp.Root:
			signed = b // the same tree, stored already: the cosignatures join it
		case has != v.has || has && (cur.Size != v.stored.Size || cur.Root != v.stored.Root):
			return errCheckpointMoved
		default:
			var frontier []byte
			for _, h := range v.frontier {
				frontier = append(frontier, h[:]...)
			}
			if err := t.tx.Put(tMeta, []byte(frontierKey), frontier); err != nil {
				return err
			}
		}
		signed = bytes.Clone(signed)
		for _, c := range cosigned {
			for _, line := range c.lines {
				if !bytes.Contains(signed, line) {
					signed = append(signed, line...)
				}
			}
			if err := t.tx.Put(tMeta, []byte(witnessKey(c.name)), be64b(cp.Size)); err != nil {
				return err
			}
		}
		if !bytes.Equal(signed, b) {
			if err := t.tx.Put(tMeta, []byte(checkpointKey), signed); err != nil {
				return err
			}
		}
		out.Note = signed
		return nil
	})
	return out, err
}

// CheckLog checks, without signing anything, what Checkpoint checks
// before it signs: that the store still holds every history signed so far
// that this Switchboard knows of (see Checkpoint). A host calls it at
// start — after a restart, a restore or a failover — to learn at once, not
// at the next checkpoint, that the stored checkpoint was rolled back or
// the log rewritten or cut short. It needs Config.LogKey (ErrNoLogKey).
func (s *Switchboard) CheckLog(ctx context.Context) error {
	if s.logSigner == nil {
		return fmt.Errorf("switchboard: check log: %w", ErrNoLogKey)
	}
	seen := s.seen.Get(s.now(), s.cfg.EventRetention) // before the view's snapshot (see checkpoint)
	kept, err := s.keptCheckpoint(ctx)
	var v logView
	if err == nil {
		err = s.view(ctx, func(t *txn) error {
			var err error
			v, err = s.checkLog(t, kept, seen)
			return err
		})
	}
	if err == nil && v.size > 0 {
		s.seen.Note(v.size, v.root, s.now()) // checked: this process has seen it
	}
	return wrapErr("check log", err)
}

// keptCheckpoint reads and opens the checkpoint Config.Checkpoints keeps
// (nil: none configured or none kept yet).
func (s *Switchboard) keptCheckpoint(ctx context.Context) (*Checkpoint, error) {
	if s.cfg.Checkpoints == nil {
		return nil, nil
	}
	b, err := s.cfg.Checkpoints.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the checkpoint kept outside the store: %w", err)
	}
	if len(b) == 0 {
		return nil, nil
	}
	cp, _, err := openCheckpointWith(b, s.logVerifiers)
	if err != nil {
		return nil, checkpointErr("the checkpoint kept outside the store", 0, err)
	}
	return &cp, nil
}

// purgeCap is how far retention may purge the log: never past a
// checkpoint later checks need — the stored one, the one kept outside the
// store, the last one each configured witness cosigned — so each can
// always be proved a prefix of the log (see checkLog); a configured
// witness this store records nothing of holds all of it back. A witness
// out of the configuration holds nothing back: put back after retention
// purged past what it cosigned, it is refused (see askWitness). kept is
// the kept checkpoint's size, if any.
func (s *Switchboard) purgeCap(t *txn, st *auditlog.State, kept *uint64) (uint64, error) {
	limit := st.Size
	b, err := t.tx.Get(tMeta, []byte(checkpointKey))
	switch {
	case errors.Is(err, store.ErrNotFound):
		if s.logSigner != nil {
			return 0, nil // a log that is signed is purged only behind a checkpoint
		}
	case err != nil:
		return 0, err
	default:
		cp, _, err := openCheckpointWith(b, nil)
		if err != nil {
			return 0, nil // unreadable: checkLog says why; nothing is purged
		}
		limit = min(limit, cp.Size)
	}
	if kept != nil {
		limit = min(limit, *kept)
	}
	olds, err := s.witnessSizes(t)
	if err != nil {
		return 0, err
	}
	for _, o := range olds {
		// A configured witness the store holds no record of (0) holds
		// everything back until it cosigns: it may be new, or the store
		// may have forgotten what it cosigned (a restored backup), and
		// the proof from what it holds must stay possible.
		limit = min(limit, o)
	}
	return limit, nil
}

// checkpointErr is the one way a checkpoint that does not open (see
// openCheckpointWith) is reported, by every check of the log: which names
// it. A checkpoint no configured key signed is ErrUnknownLogKey — most
// often a program that made a new Config.LogKey instead of keeping its
// own, and said so — and anything else damage at seq (0: no position).
func checkpointErr(which string, seq uint64, err error) *AuditError {
	var unknown *note.UnverifiedNoteError
	if errors.As(err, &unknown) {
		return &AuditError{Reason: which + " is signed by a key this Switchboard does not know: was Config.LogKey changed? Keep the log key as long as the store (after a rotation, list the old key in Config.PreviousLogKeys; docs/audit-log.md); if it was not changed, someone else signed it", Err: ErrUnknownLogKey}
	}
	return &AuditError{Seq: seq, Reason: fmt.Sprintf("%s: %v", which, err)}
}
