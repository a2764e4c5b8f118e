package idem

// SetJoinedHook makes k call f each time a copy joins an in-process twin's
// flight, just before it waits: a test learns that a copy is waiting
// without sleeping. Call it before k is used.
func SetJoinedHook(k *Keeper, f func(Key)) { k.testHooks.joined = f }
