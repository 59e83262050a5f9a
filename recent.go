package switchboard

import (
	"sync"
	"time"
)

// recentMax bounds the events a recentLog holds.
const recentMax = 4096

// recentLog holds the events this process's sequencer added to the log
// last, once their pass committed, so that a subscription in the same
// process reads them from memory instead of the store: a round trip less
// between a commit and its delivery. It holds a contiguous run of the log,
// exactly as committed (the Events the pass wrote as leaves).
//
// A subscription that reads up to the run's end then waits for the next
// wake, so that end must be the log's end: it is while this process holds
// the sequencer's lease (no other process sequences meanwhile, and its own
// passes add here before they wake anyone). So the run is served only until
// soleUntil, well inside the lease the last pass wrote; after that, and
// after a pass that failed (its commit may have run), subscriptions read
// the store.
type recentLog struct {
	mu        sync.Mutex
	evs       []Event // contiguous: evs[i].Seq == evs[0].Seq+i
	soleUntil time.Time
}

// add records evs, just committed as the log's next events by a pass whose
// lease makes this process the log's only sequencer until soleUntil. A run
// that does not continue what is held replaces it.
func (r *recentLog) add(evs []Event, soleUntil time.Time) {
	if len(evs) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.evs); n == 0 || r.evs[n-1].Seq+1 != evs[0].Seq {
		r.evs = r.evs[:0]
	}
	if len(r.evs)+len(evs) > recentMax {
		// Keep the newest half, in a fresh array (subscribers copy out
		// under the lock, so the old one is nobody's).
		keep := max(0, min(len(r.evs), recentMax/2-len(evs)))
		r.evs = append(make([]Event, 0, recentMax), r.evs[len(r.evs)-keep:]...)
	}
	r.evs = append(r.evs, evs...)
	r.soleUntil = soleUntil
}

// reset forgets what is held: the log's end is no longer known here.
func (r *recentLog) reset() {
	r.mu.Lock()
	r.evs = r.evs[:0]
	r.mu.Unlock()
}

// after returns up to limit of the held events with Seq greater than seq
// — none if seq is the run's last — if the run holds seq or the one right
// after it and, at now, its end is still known to be the log's end; ok
// false means read the store instead.
func (r *recentLog) after(seq uint64, limit int, now time.Time) (evs []Event, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.evs) == 0 || !now.Before(r.soleUntil) || seq+1 < r.evs[0].Seq || seq > r.evs[len(r.evs)-1].Seq {
		return nil, false
	}
	i := int(seq + 1 - r.evs[0].Seq)
	j := min(len(r.evs), i+limit)
	return append([]Event(nil), r.evs[i:j]...), true
}
