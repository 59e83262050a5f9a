package bolt

import "time"

// SetSnapshotBudget sets how long Snapshot keeps trying, for tests; it
// returns the previous budget.
func SetSnapshotBudget(d time.Duration) time.Duration {
	old := snapshotBudget
	snapshotBudget = d
	return old
}

// MetaSpan is metaSpan, for tests.
var MetaSpan = metaSpan

// HoldCheckpoints makes the checkpoints started from now on wait until
// release is called; the writes meanwhile read through the running
// checkpoint's tree.
func HoldCheckpoints() (release func()) {
	ch := make(chan struct{})
	checkpointHold = ch
	return func() { checkpointHold = nil; close(ch) }
}
