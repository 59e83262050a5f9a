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
