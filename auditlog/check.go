// The check before every signature: the stored tree against every
// checkpoint the log knows of (signed and stored, kept outside the store,
// seen by this process), rebuilt from the entries after the newest one.

package auditlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// ErrAuditBroken is wrapped by every *AuditError: the stored log is not
// what its checkpoints, its own hashes or its witnesses say it was.
var ErrAuditBroken = errors.New("audit log broken")

// AuditError is damage a check of the log found.
type AuditError struct {
	// Seq is the first event position the damage concerns: the event that
	// was changed, is missing or is out of place, or the first of the
	// events a changed tree hash covers; 0 when no position applies.
	Seq    uint64
	Reason string // what does not hold
	// Err is the refusal the damage was learned from, when it was not
	// found in the store itself: ErrWitnessRefused for a witness that
	// refused a checkpoint. Nil otherwise.
	Err error
}

func (e *AuditError) Error() string {
	if errors.Is(e.Err, ErrUnknownKey) {
		// Not damage the log's own bytes show: the key is the question.
		return "audit log: " + e.Reason
	}
	if e.Seq == 0 {
		return fmt.Sprintf("%v: %s", ErrAuditBroken, e.Reason)
	}
	return fmt.Sprintf("%v at event %d: %s", ErrAuditBroken, e.Seq, e.Reason)
}

// Unwrap returns ErrAuditBroken, and Err if set.
func (e *AuditError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrAuditBroken, e.Err}
	}
	return []error{ErrAuditBroken}
}

// Rebuild serves tlog the hashes of a tree being rebuilt leaf by leaf
// from its entries (tlog.StoredHashes over it): it holds only the
// subtrees the next leaves still need, and records which hashes tlog
// asked for, so Forget drops them.
type Rebuild struct {
	hashes map[int64]tlog.Hash
	read   []int64
}

// NewRebuild returns an empty Rebuild: seeded with Set, from the hashes
// of a checked tree's frontier, it rebuilds the tree after it.
func NewRebuild() *Rebuild { return &Rebuild{hashes: map[int64]tlog.Hash{}} }

// Set records stored hash x.
func (r *Rebuild) Set(x int64, h tlog.Hash) { r.hashes[x] = h }

// ReadHashes returns the hashes asked for, each of which must be known.
func (r *Rebuild) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		h, ok := r.hashes[x]
		if !ok {
			return nil, fmt.Errorf("tree hash %d is not known", x)
		}
		out[i] = h
		r.read = append(r.read, x)
	}
	return out, nil
}

// Frontier returns the hashes of the perfect subtrees covering the first
// n leaves, largest first, without marking them read; nil if one is not
// known.
func (r *Rebuild) Frontier(n uint64) []tlog.Hash {
	idx := FrontierIndexes(n)
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		h, ok := r.hashes[x]
		if !ok {
			return nil
		}
		out[i] = h
	}
	return out
}

// Forget drops the hashes read for the last leaf: each subtree's hash is
// read once, when the subtree beside it completes their parent.
func (r *Rebuild) Forget() {
	for _, x := range r.read {
		delete(r.hashes, x)
	}
	r.read = r.read[:0]
}

// Anchor is a checkpoint the stored log must still hold (Tx.Check), with
// the words that name it in an AuditError: "the stored checkpoint",
// "signed".
type Anchor struct {
	Checkpoint Checkpoint
	Which, Did string
	// Seen marks a tree only remembered (by this process: Mark), not
	// signed: it is checked, never built on.
	Seen bool
	// Frontier, if set, reads the frontier hashes stored with the
	// checkpoint, largest subtree first (authentic if they fold into its
	// signed root): they name the first subtree whose entries changed.
	Frontier func() []byte
}

// Tree is a stored tree as Check rebuilt it: its size, root, and frontier
// hashes (largest subtree first).
type Tree struct {
	Size     uint64
	Root     tlog.Hash
	Frontier []tlog.Hash
}

// Check checks that the store still holds every tree the anchors state,
// and that nothing in the store excuses a check:
//
//   - none of them is larger than the log (it was cut short), nor older
//     than what retention purged (retention must never purge past a
//     checkpoint the log must still check);
//   - the stored tree hashes at the newest signed one's size fold into its
//     root (its frontier, so authenticated), and every other one of size
//     up to it is proved a prefix of it by a consistency proof read from
//     the store (sound whatever the store holds: both roots are signed or
//     remembered);
//   - every entry after the newest signed one hashes to its stored leaf,
//     every stored tree hash over them is what the entries give, the tree
//     recomputed from that authenticated frontier and those entries has
//     each later anchor's root at its size, and its root now is the one
//     returned — an extension of every anchor checked, for the next
//     signature.
//
// A failure is an *AuditError; a failed read is returned as it is.
func (x *Tx) Check(anchors []Anchor) (Tree, error) {
	var tree Tree
	st, err := x.State()
	if err != nil {
		return tree, err
	}
	seqOf := st.Seq
	if st.Purged > st.Size {
		return tree, &AuditError{Seq: seqOf(st.Size), Reason: fmt.Sprintf("the log's state says %d events were purged of %d", st.Purged, st.Size)}
	}
	for _, a := range anchors {
		if a.Checkpoint.Size > st.Size {
			return tree, &AuditError{Seq: seqOf(st.Size), Reason: fmt.Sprintf("the log holds %d events, fewer than the %d %s %s: it was cut short (a database restored from a backup, or failed over to a standby that was behind, lost acknowledged writes: see docs/scaling.md, \"When the primary fails\")", st.Size, a.Checkpoint.Size, a.Which, a.Did)}
		}
		if a.Checkpoint.Size < st.Purged {
			return tree, &AuditError{Seq: seqOf(a.Checkpoint.Size), Reason: fmt.Sprintf("the log's state says its first %d events were purged, past the %d events %s %s, which then can no longer be checked: retention never purges past a checkpoint the log must check, so the state was rewritten (or %s is older than everything retention kept)", st.Purged, a.Checkpoint.Size, a.Which, a.Did, a.Which)}
		}
	}

	// The newest signed checkpoint: the tree hashes at its size,
	// authenticated by its root, are what the rest is checked against and
	// built on.
	var base *Anchor
	for i := range anchors {
		if !anchors[i].Seen && (base == nil || anchors[i].Checkpoint.Size > base.Checkpoint.Size) {
			base = &anchors[i]
		}
	}
	fr := NewRebuild()
	from := st.Purged
	if base != nil {
		hs, err := x.anchorFrontier(*base)
		if err != nil {
			return tree, err
		}
		for _, a := range anchors {
			if a.Checkpoint.Size <= base.Checkpoint.Size {
				if err := x.prefixOf(a, *base); err != nil {
					return tree, err
				}
			}
		}
		from = base.Checkpoint.Size
		for i, ix := range FrontierIndexes(from) {
			fr.Set(ix, hs[i])
		}
	} else if st.Purged > 0 {
		// Nothing was ever signed: the tree starts from the hashes
		// retention kept, which nothing can check (a tree seen, if any,
		// is checked on the way).
		idx := FrontierIndexes(st.Purged)
		hs, err := x.ReadHashes(idx)
		if err != nil {
			return tree, &AuditError{Seq: seqOf(st.Purged), Reason: fmt.Sprintf("the tree hashes kept for the %d purged events are unreadable: %v", st.Purged, err)}
		}
		for i, ix := range idx {
			fr.Set(ix, hs[i])
		}
	}
	// Trees seen past what was signed are checked where the entries
	// reach them; with nothing signed, one at the start is checked now.
	var ahead []Anchor
	for _, a := range anchors {
		switch {
		case !a.Seen:
		case a.Checkpoint.Size > from:
			ahead = append(ahead, a)
		case base == nil:
			if err := prefixOfEntries(st, a, fr, from); err != nil {
				return tree, err
			}
		}
	}

	// The entries after the newest signed checkpoint, rehashed: the tree
	// now.
	next := from
	var bad error
	err = x.scan(st, seqOf(from), be64(seqOf(st.Size)), func(seq uint64, leaf, stored []byte) bool {
		if seq != seqOf(next) {
			bad = &AuditError{Seq: seqOf(next), Reason: fmt.Sprintf("event %d, after the last checkpoint, is missing", seqOf(next))}
			return false
		}
		if tlog.RecordHash(leaf) != tlog.Hash(stored[:tlog.HashSize]) {
			bad = &AuditError{Seq: seq, Reason: fmt.Sprintf("event %d, after the last signed checkpoint: it does not hash to its stored leaf", seq)}
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
			fr.Set(first+int64(j), h)
		}
		fr.Forget()
		next++
		for _, a := range ahead {
			if next == a.Checkpoint.Size {
				if bad = prefixOfEntries(st, a, fr, next); bad != nil {
					return false
				}
			}
		}
		return true
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return tree, err
	}
	if next != st.Size {
		return tree, &AuditError{Seq: seqOf(next), Reason: fmt.Sprintf("event %d, after the last checkpoint, is missing", seqOf(next))}
	}
	tree.Size, tree.Root = st.Size, EmptyRoot
	if st.Size > 0 {
		if tree.Frontier = fr.Frontier(st.Size); tree.Frontier == nil {
			return tree, &AuditError{Seq: seqOf(st.Size - 1), Reason: fmt.Sprintf("the tree of %d events cannot be rebuilt", st.Size)}
		}
		tree.Root = FoldFrontier(tree.Frontier)
	}
	return tree, nil
}

// keySeq reads an 8-byte big-endian key (0 for any other length).
func keySeq(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}

// prefixOfEntries checks that the tree rebuilt from the entries (fr, at
// size n) has the root a states.
func prefixOfEntries(st *State, a Anchor, fr *Rebuild, n uint64) error {
	root := EmptyRoot
	if n > 0 {
		hs := fr.Frontier(n)
		if hs == nil {
			return &AuditError{Seq: st.Offset + n, Reason: fmt.Sprintf("the tree of %d events cannot be rebuilt to check %s", n, a.Which)}
		}
		root = FoldFrontier(hs)
	}
	if root != a.Checkpoint.Root {
		return &AuditError{Seq: st.Offset + 1, Reason: fmt.Sprintf("the first %d events no longer hash to the root %s %s: the log was rewritten", n, a.Which, a.Did)}
	}
	return nil
}

// anchorFrontier reads the stored tree hashes at a's size — the perfect
// subtrees covering its entries — and checks that they fold into its
// root. The frontier hashes stored with a checkpoint (Anchor.Frontier:
// authentic if they fold into its signed root) name the first subtree
// whose entries changed.
func (x *Tx) anchorFrontier(a Anchor) ([]tlog.Hash, error) {
	seqOf := x.state.Seq
	cp := a.Checkpoint
	if cp.Size == 0 {
		if cp.Root != EmptyRoot {
			return nil, &AuditError{Seq: seqOf(0), Reason: fmt.Sprintf("the empty log %s %s has a root that is not the empty tree's", a.Which, a.Did)}
		}
		return nil, nil
	}
	idx := FrontierIndexes(cp.Size)
	hs, err := x.ReadHashes(idx)
	if err != nil {
		return nil, &AuditError{Seq: seqOf(0), Reason: fmt.Sprintf("the tree hashes of the %d events %s %s are unreadable: %v", cp.Size, a.Which, a.Did, err)}
	}
	if FoldFrontier(hs) == cp.Root {
		return hs, nil
	}
	if a.Frontier != nil {
		if b := a.Frontier(); len(b) == len(hs)*tlog.HashSize {
			signed := make([]tlog.Hash, len(hs))
			for i := range signed {
				copy(signed[i][:], b[i*tlog.HashSize:])
			}
			if FoldFrontier(signed) == cp.Root {
				var start uint64
				for i, ix := range idx {
					level, _ := tlog.SplitStoredHashIndex(ix)
					end := start + 1<<level
					if hs[i] != signed[i] {
						return nil, &AuditError{Seq: seqOf(start), Reason: fmt.Sprintf("events %d to %d no longer hash to what %s (%d events) %s: the log was rewritten", seqOf(start), seqOf(end-1), a.Which, cp.Size, a.Did)}
					}
					start = end
				}
			}
		}
	}
	return nil, &AuditError{Seq: seqOf(0), Reason: fmt.Sprintf("the first %d events no longer hash to the root %s %s: the log was rewritten", cp.Size, a.Which, a.Did)}
}

// prefixOf checks that the tree a states is a prefix of the one base
// states, by a consistency proof read from the store: sound whatever the
// store holds, both roots being signed or remembered.
func (x *Tx) prefixOf(a, base Anchor) error {
	seqOf := x.state.Seq
	if a.Checkpoint.Size == base.Checkpoint.Size {
		if a.Checkpoint.Root != base.Checkpoint.Root {
			return &AuditError{Seq: seqOf(0), Reason: fmt.Sprintf("%s and %s state two roots for the same %d events: a fork", a.Which, base.Which, a.Checkpoint.Size)}
		}
		return nil
	}
	if a.Checkpoint.Size == 0 {
		if a.Checkpoint.Root != EmptyRoot {
			return &AuditError{Seq: seqOf(0), Reason: fmt.Sprintf("the empty log %s %s has a root that is not the empty tree's", a.Which, a.Did)}
		}
		return nil
	}
	proof, err := tlog.ProveTree(int64(base.Checkpoint.Size), int64(a.Checkpoint.Size), x)
	if err != nil {
		return &AuditError{Seq: seqOf(a.Checkpoint.Size), Reason: fmt.Sprintf("the tree hashes proving that the %d events %s %s are a prefix of the %d %s %s are unreadable: %v", a.Checkpoint.Size, a.Which, a.Did, base.Checkpoint.Size, base.Which, base.Did, err)}
	}
	if err := tlog.CheckTree(proof, int64(base.Checkpoint.Size), base.Checkpoint.Root, int64(a.Checkpoint.Size), a.Checkpoint.Root); err != nil {
		return &AuditError{Seq: seqOf(0), Reason: fmt.Sprintf("the %d events %s %s are not a prefix of the %d %s %s: the log was rewritten or forked", a.Checkpoint.Size, a.Which, a.Did, base.Checkpoint.Size, base.Which, base.Did)}
	}
	return nil
}
