package switchboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The events a sequencer just added are served to subscriptions in its
// process only from the one right after the cursor, only while the log's
// end is known to be the run's end, and never past recentMax held.
func TestRecentLog(t *testing.T) {
	var r recentLog
	now := time.Unix(1000, 0)
	run := func(from, to uint64) []Event {
		var evs []Event
		for s := from; s <= to; s++ {
			evs = append(evs, Event{Seq: s, Type: EventTodoCreated})
		}
		return evs
	}
	seqs := func(evs []Event) (out []uint64) {
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return out
	}

	_, ok := r.after(0, 10, now)
	require.False(t, ok, "empty")

	r.add(run(5, 9), now.Add(time.Second))
	evs, ok := r.after(4, 10, now)
	require.True(t, ok)
	require.Equal(t, []uint64{5, 6, 7, 8, 9}, seqs(evs))
	evs, ok = r.after(6, 2, now)
	require.True(t, ok)
	require.Equal(t, []uint64{7, 8}, seqs(evs), "limit")
	_, ok = r.after(3, 10, now)
	require.False(t, ok, "event 4 is not held: read the store")
	evs, ok = r.after(9, 10, now)
	require.True(t, ok, "at the run's end, which is the log's")
	require.Empty(t, evs)
	_, ok = r.after(10, 10, now)
	require.False(t, ok, "past the run's end: read the store")
	_, ok = r.after(4, 10, now.Add(time.Second))
	require.False(t, ok, "the lease may have passed to another process")

	// A run that continues the held one extends it; one that does not
	// replaces it.
	r.add(run(10, 12), now.Add(time.Second))
	evs, _ = r.after(8, 10, now)
	require.Equal(t, []uint64{9, 10, 11, 12}, seqs(evs))
	r.add(run(20, 21), now.Add(time.Second))
	_, ok = r.after(12, 10, now)
	require.False(t, ok, "13 to 19 were sequenced elsewhere")
	evs, _ = r.after(19, 10, now)
	require.Equal(t, []uint64{20, 21}, seqs(evs))

	// Copies: what a subscriber got does not change when the run is
	// replaced in place.
	got, _ := r.after(19, 1, now)
	r.add(run(100, 101), now.Add(time.Second))
	require.Equal(t, uint64(20), got[0].Seq)
	evs, _ = r.after(99, 10, now)
	require.Equal(t, []uint64{100, 101}, seqs(evs))
	var end uint64
	for i := uint64(102); i < 102+2*recentMax; i += 100 {
		end = i + 99
		r.add(run(i, end), now.Add(time.Second))
	}
	require.Equal(t, uint64(20), got[0].Seq)
	require.LessOrEqual(t, len(r.evs), recentMax)
	last := r.evs[len(r.evs)-1].Seq
	require.Equal(t, end, last)
	for i, e := range r.evs {
		require.Equal(t, r.evs[0].Seq+uint64(i), e.Seq, "contiguous")
	}

	r.reset()
	_, ok = r.after(last-1, 10, now)
	require.False(t, ok, "reset")
}
