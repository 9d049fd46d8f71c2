// Package clock is the only source of time for code that must also run under
// the simulator.
//
// Engine code never calls time.Now, time.Sleep, time.After or time.AfterFunc:
// it reads the time from a Clock and schedules callbacks through it, so the same
// code runs on the wall clock in production and on a virtual clock in
// simulation.
//
// The caller's duties:
//
//  1. Take a Clock (usually a task.Runtime, which embeds one) as a dependency;
//     never reach for package time's global clock.
//  2. Keep deadlines as time.Time values in fields and compare them with Now,
//     rather than holding timer objects where a deadline will do.
//  3. Treat an AfterFunc callback as running on a task of its own: it may take
//     locks, but it must not assume it runs on the caller's task.
//
// Usage:
//
//	c := clock.Real()
//	start := c.Now()
//	t := c.AfterFunc(50*time.Millisecond, func() { fmt.Println("late") })
//	defer t.Stop()
//	elapsed := c.Now().Sub(start)
package clock
