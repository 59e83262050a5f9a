package auditlog

import (
	"sync"
	"time"

	"golang.org/x/mod/sumdb/tlog"
)

// Mark is the largest tree one process sequenced or signed, kept in
// memory: checked before every signature like a kept checkpoint, so a
// database that comes back with less (a failover to a standby that was
// behind) is caught even when no checkpoint covered what was lost. A
// restart forgets it, and so does time (see Get). The zero Mark is empty
// and ready to use; it is safe for concurrent use.
type Mark struct {
	mu     sync.Mutex
	size   uint64
	root   tlog.Hash
	at     time.Time // when it was last renewed
	forked bool      // the log lost what was seen: the mark stays, for every signature to refuse
}

// Note raises the mark to a tree that extends it (the caller checked), or
// renews it at the same tree, at now. A smaller tree, or any tree once
// Fork was called, changes nothing.
func (m *Mark) Note(size uint64, root tlog.Hash, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.forked || size < m.size {
		return
	}
	if size > m.size || root == m.root {
		m.size, m.root, m.at = size, root, now
	}
}

// Fork keeps the mark where it is for good: the stored log no longer
// holds it, and every later check against it must refuse.
func (m *Mark) Fork() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forked = true
}

// Get returns the mark as a checkpoint without a note (Size and Root), or
// nil if there is none, or if it was not renewed for nearly retention
// (negative: never ages): its entries may since have been purged by
// retention, so it can no longer be checked — it is dropped, not refused.
// A forked mark never ages. Read it before the transaction that checks
// the log against it begins, so the commits it stands for are in that
// transaction's snapshot.
func (m *Mark) Get(now time.Time, retention time.Duration) *Checkpoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.size == 0 {
		return nil
	}
	if !m.forked && !Fresh(m.at, now, retention) {
		m.size, m.root = 0, tlog.Hash{}
		return nil
	}
	return &Checkpoint{Size: m.size, Root: m.root}
}

// Fresh reports whether what was seen at at may still be checked at now:
// its entries are younger than retention by a margin (a tenth of it, at
// most an hour, for entries sequenced a little after they committed and
// for other processes' clocks), so no retention purged past it. A negative
// retention keeps everything.
func Fresh(at, now time.Time, retention time.Duration) bool {
	if retention < 0 {
		return true
	}
	return now.Sub(at) < retention-min(retention/10, time.Hour)
}
