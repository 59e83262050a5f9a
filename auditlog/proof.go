package auditlog

import (
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// InclusionProof proves that one entry is in the log of a given size.
type InclusionProof struct {
	Index    uint64      `json:"index"`     // the entry's leaf index (in package switchboard, an event's Seq-1; see LogOffset)
	TreeSize uint64      `json:"tree_size"` // the size of the checkpoint it proves against
	Leaf     []byte      `json:"leaf"`      // the entry's leaf bytes
	Hashes   []tlog.Hash `json:"hashes"`    // the RFC 6962 audit path, as tlog.ProveRecord returns it
}

// ConsistencyProof proves that the log at NewSize extends the log at
// OldSize: every entry of the older tree is in the newer, unchanged.
type ConsistencyProof struct {
	OldSize uint64      `json:"old_size"`
	NewSize uint64      `json:"new_size"`
	Hashes  []tlog.Hash `json:"hashes"` // as tlog.ProveTree returns it
}

// CheckInclusion checks that p proves its leaf is in the log cp states.
// cp must come from Open, which checked its signature; nothing else is
// trusted. Its errors wrap ErrProof.
func CheckInclusion(cp Checkpoint, p InclusionProof) error {
	if p.TreeSize != cp.Size {
		return fmt.Errorf("%w: the proof is for a log of %d entries, the checkpoint states %d", ErrProof, p.TreeSize, cp.Size)
	}
	if p.Index >= cp.Size {
		return fmt.Errorf("%w: leaf %d is outside a log of %d entries", ErrProof, p.Index, cp.Size)
	}
	if err := tlog.CheckRecord(p.Hashes, int64(cp.Size), cp.Root, int64(p.Index), tlog.RecordHash(p.Leaf)); err != nil {
		return fmt.Errorf("%w: leaf %d: %v", ErrProof, p.Index, err)
	}
	return nil
}

// CheckConsistency checks that p proves the log newer states extends the
// log older states. Both must come from Open. Its errors wrap ErrProof.
func CheckConsistency(older, newer Checkpoint, p ConsistencyProof) error {
	if p.OldSize != older.Size || p.NewSize != newer.Size {
		return fmt.Errorf("%w: the proof is for sizes %d and %d, the checkpoints state %d and %d",
			ErrProof, p.OldSize, p.NewSize, older.Size, newer.Size)
	}
	if older.Origin != newer.Origin {
		return fmt.Errorf("%w: checkpoints of two logs (%q, %q)", ErrProof, older.Origin, newer.Origin)
	}
	if older.Size == 0 || older.Size > newer.Size {
		return fmt.Errorf("%w: sizes %d and %d", ErrProof, older.Size, newer.Size)
	}
	if err := tlog.CheckTree(p.Hashes, int64(newer.Size), newer.Root, int64(older.Size), older.Root); err != nil {
		return fmt.Errorf("%w: %v", ErrProof, err)
	}
	return nil
}

// ErrHashGone is what a tree's HashReader returns for a hash it no longer
// keeps (retention purged the entries it covered): a proof that needs it
// cannot be built.
var ErrHashGone = errors.New("tree hash pruned with purged entries")

// Extends reports whether the tree of size entries whose root is root,
// with its hashes read from r, extends cp — holds cp's entries unchanged:
// cp's root at its size, proved by a consistency proof built from r. A
// cp larger than the tree, another root at the same size, or a proof that
// needs hashes r no longer keeps (ErrHashGone) is false; any other error
// of r is returned.
func Extends(r tlog.HashReader, size uint64, root tlog.Hash, cp Checkpoint) (bool, error) {
	switch {
	case cp.Size > size:
		return false, nil
	case cp.Size == size:
		return cp.Root == root, nil
	case cp.Size == 0:
		return cp.Root == EmptyRoot, nil
	}
	proof, err := tlog.ProveTree(int64(size), int64(cp.Size), r)
	if errors.Is(err, ErrHashGone) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return tlog.CheckTree(proof, int64(size), root, int64(cp.Size), cp.Root) == nil, nil
}
