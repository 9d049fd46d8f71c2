package task

import "fmt"

// RWMutex is a reader/writer lock between tasks, built on the runtime's
// Mutex and Cond as Queue is: many tasks may hold it for reading at once,
// or one task for writing. It stands in for sync.RWMutex, whose blocked
// Lock or RLock never gives a simulated task's baton back.
//
// Like sync.RWMutex it prefers writers: once a Lock waits, a new RLock
// waits too, until that writer has had the lock, so a steady stream of
// readers cannot starve a writer. When a writer unlocks, the readers that
// waited during its turn get the lock before the next writer does, so
// writers cannot starve readers either.
//
// Writer preference has the cost sync.RWMutex's has: a task must not take
// RLock again while it holds it for reading. If a writer's Lock comes in
// between, the second RLock waits for the writer and the writer for the
// first RLock's RUnlock, and neither comes; the simulator reports such a
// run as a *sim.DeadlockError naming both waits.
//
// Its scheduling points are name+".lock" (every operation, taking the
// RWMutex's own monitor), name+".wlock" (Lock waiting for the readers or
// the writer inside to leave) and name+".rlock" (RLock waiting for a
// writer, inside or waiting, to be done).
//
// The lock belongs to no task: one task may unlock what another locked,
// as with sync.RWMutex.
type RWMutex struct {
	mu         Mutex
	writerDone Cond // a waiting Lock's turn may have come
	readerTurn Cond // the readers waiting in RLock are let in
	name       string
	wlockPoint string
	rlockPoint string

	writing        bool   // a writer holds the lock
	readers        int    // tasks holding the lock for reading
	writersWaiting int    // Lock calls waiting; new readers wait behind them
	readersWaiting int    // RLock calls waiting
	turn           uint64 // counts the writers' Unlocks that let waiting readers in
}

// NewRWMutex returns an unlocked RWMutex.
func NewRWMutex(rt Runtime, name string) *RWMutex {
	mu := rt.NewMutex(name)
	return &RWMutex{
		mu: mu, writerDone: rt.NewCond(mu), readerTurn: rt.NewCond(mu), name: name,
		wlockPoint: name + ".wlock", rlockPoint: name + ".rlock",
	}
}

// Lock locks rw for writing, waiting at name+".wlock" while a writer or
// any reader holds it. A waiting Lock keeps new readers out.
func (rw *RWMutex) Lock() {
	made(rw.mu, "RWMutex").Lock()
	rw.writersWaiting++
	for rw.writing || rw.readers > 0 {
		rw.writerDone.Wait(rw.wlockPoint)
	}
	rw.writersWaiting--
	rw.writing = true
	rw.mu.Unlock()
}

// TryLock locks rw for writing without waiting; it reports false when a
// writer or any reader holds it.
func (rw *RWMutex) TryLock() bool {
	made(rw.mu, "RWMutex").Lock()
	ok := !rw.writing && rw.readers == 0
	if ok {
		rw.writing = true
	}
	rw.mu.Unlock()
	return ok
}

// Unlock unlocks rw for writing. The readers that waited meanwhile get the
// lock first; with none, a waiting writer does. It panics when rw is not
// locked for writing.
func (rw *RWMutex) Unlock() {
	made(rw.mu, "RWMutex").Lock()
	if !rw.writing {
		rw.mu.Unlock()
		panic(fmt.Sprintf("task: Unlock of RWMutex %q, which is not locked for writing", rw.name))
	}
	rw.writing = false
	switch {
	case rw.readersWaiting > 0:
		// Let every waiting reader in now, counted as holding it, so that
		// a writer waiting behind them cannot take the lock back first.
		rw.readers += rw.readersWaiting
		rw.readersWaiting = 0
		rw.turn++
		rw.readerTurn.Broadcast()
	case rw.writersWaiting > 0:
		rw.writerDone.Signal()
	}
	rw.mu.Unlock()
}

// RLock locks rw for reading, waiting at name+".rlock" while a writer holds
// it or waits for it.
func (rw *RWMutex) RLock() {
	made(rw.mu, "RWMutex").Lock()
	if !rw.writing && rw.writersWaiting == 0 {
		rw.readers++
		rw.mu.Unlock()
		return
	}
	rw.readersWaiting++
	for turn := rw.turn; rw.turn == turn; {
		rw.readerTurn.Wait(rw.rlockPoint)
	}
	// The writer's Unlock that changed turn counted this reader in.
	rw.mu.Unlock()
}

// TryRLock locks rw for reading without waiting; it reports false when a
// writer holds it or waits for it.
func (rw *RWMutex) TryRLock() bool {
	made(rw.mu, "RWMutex").Lock()
	ok := !rw.writing && rw.writersWaiting == 0
	if ok {
		rw.readers++
	}
	rw.mu.Unlock()
	return ok
}

// RUnlock undoes one RLock. The last reader out lets a waiting writer in.
// It panics when rw is not locked for reading.
func (rw *RWMutex) RUnlock() {
	made(rw.mu, "RWMutex").Lock()
	if rw.readers == 0 {
		rw.mu.Unlock()
		panic(fmt.Sprintf("task: RUnlock of RWMutex %q without an RLock: it is not locked for reading", rw.name))
	}
	rw.readers--
	if rw.readers == 0 && rw.writersWaiting > 0 {
		rw.writerDone.Signal()
	}
	rw.mu.Unlock()
}
