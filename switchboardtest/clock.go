package switchboardtest

import (
	"sync"
	"time"
)

// StepClock is a switchboard.Clock: the system clock moved forward by
// Step, for a test that must see a lease, a grant or a rate limit's window
// pass without waiting for it. After waits in real time. The zero value
// is ready to use (the system clock, not yet moved): pass a *StepClock as
// Config.Clock and keep it to Step. It is safe for concurrent use.
type StepClock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now is the system time plus every Step so far.
func (c *StepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// After is time.After: steps do not fire timers.
func (c *StepClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Step moves the clock forward by d.
func (c *StepClock) Step(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}
