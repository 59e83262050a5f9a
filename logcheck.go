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

// logView is what checkLog found: the stored checkpoint, and the tree
// as it is now — its size, root and frontier hashes, recomputed from the
// newest anchor's authenticated frontier and the events after it
// (auditlog.Tx.Check), so what is signed next extends everything checked.
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
// sequenced or signed) — and that nothing in the store excuses a check
// (auditlog.Tx.Check says what is checked; retention never purges past a
// checkpoint the log must still check: see purgeCap). A failure is an
// *AuditError; a failed read is returned as it is.
func (s *Switchboard) checkLog(t *txn, kept, seen *Checkpoint) (logView, error) {
	var v logView
	st, err := t.lg.State()
	if err != nil {
		return v, err
	}
	v.st = st
	var anchors []auditlog.Anchor
	b, err := t.tx.Get(tMeta, []byte(checkpointKey))
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return v, err
	default:
		cp, current, err := openCheckpointWith(b, s.logVerifiers)
		if err != nil {
			return v, checkpointErr("the stored checkpoint", st.Seq(0), err)
		}
		v.stored, v.has, v.current = cp, true, current
		anchors = append(anchors, auditlog.Anchor{Checkpoint: cp, Which: "the stored checkpoint", Did: "signed",
			Frontier: func() []byte {
				b, _ := t.tx.Get(tMeta, []byte(frontierKey))
				return b
			}})
	}
	if kept != nil {
		anchors = append(anchors, auditlog.Anchor{Checkpoint: *kept, Which: "the checkpoint kept outside the store", Did: "signed"})
	}
	if seen != nil {
		anchors = append(anchors, auditlog.Anchor{Checkpoint: *seen, Which: "this process", Did: "sequenced or signed", Seen: true})
	}
	tree, err := t.lg.Check(anchors)
	if err != nil {
		return v, err
	}
	v.size, v.root, v.frontier = tree.Size, tree.Root, tree.Frontier
	return v, nil
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
			olds, err = t.lg.WitnessSizes(s.witnesses)
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
		var cosigned []auditlog.Cosignature
		var werr error
		if outside && s.witnesses.Len() > 0 {
			logNote, err := s.logOnly(cp.Note)
			if err != nil {
				werr = err
			} else {
				cosigned, werr = s.witnesses.Ask(ctx, cp, logNote, olds, logProver{s})
			}
			if errors.Is(werr, auditlog.ErrWitnessAhead) {
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
func (s *Switchboard) storeCheckpoint(ctx context.Context, v logView, cp Checkpoint, cosigned []auditlog.Cosignature) (Checkpoint, error) {
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
			for _, line := range c.Lines {
				if !bytes.Contains(signed, line) {
					signed = append(signed, line...)
				}
			}
			if err := t.lg.RecordCosigned(c.Name, cp.Size); err != nil {
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
	olds, err := t.lg.WitnessSizes(s.witnesses)
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
