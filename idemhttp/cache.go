package idemhttp

import (
	"container/list"
	"crypto/sha256"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem"
)

// entry is a completed outcome as stored: immutable from its commit until
// it expires (a key is claimed again only once its record expired), which
// is what makes serving it from memory as correct as reading the database.
type entry struct {
	key     idem.Key
	fp      []byte
	raw     [sha256.Size]byte // jsonfp.Sum of the method, path and body of a request known to have fingerprint fp
	status  int
	header  http.Header // already filtered to the replay allow-list
	body    []byte
	expires time.Time
	size    int64
}

// entryOverhead approximates the bytes an entry costs beside its strings
// and slices (list element, map slot, struct).
const entryOverhead = 256

func (e *entry) computeSize() {
	n := int64(entryOverhead + len(e.key.Scope) + len(e.key.Operation) + len(e.key.Key) + len(e.fp) + len(e.body))
	for k, vs := range e.header {
		n += int64(len(k))
		for _, v := range vs {
			n += int64(len(v))
		}
	}
	e.size = n
}

// replayCache is a least-recently-used map of completed outcomes, bounded by
// entries and by bytes. A nil *replayCache is a disabled cache.
type replayCache struct {
	maxEntries int
	maxBytes   int64

	mu    sync.Mutex
	ll    *list.List // of *entry, most recently used first
	items map[idem.Key]*list.Element
	bytes int64

	hits, misses atomic.Uint64
}

func newReplayCache(maxEntries int, maxBytes int64) *replayCache {
	return &replayCache{maxEntries: maxEntries, maxBytes: maxBytes, ll: list.New(), items: make(map[idem.Key]*list.Element)}
}

// get returns the live entry of k, or nil. An expired entry is dropped: the
// key behaves as new in the database too.
func (c *replayCache) get(k idem.Key, now time.Time) *entry {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	el, ok := c.items[k]
	if !ok {
		c.mu.Unlock()
		c.misses.Add(1)
		return nil
	}
	e := el.Value.(*entry)
	if !e.expires.After(now) {
		c.remove(el)
		c.mu.Unlock()
		c.misses.Add(1)
		return nil
	}
	c.ll.MoveToFront(el)
	c.mu.Unlock()
	c.hits.Add(1)
	return e
}

// put adds e, evicting the least recently used entries past the bounds. An
// entry larger than the whole byte budget is not kept.
func (c *replayCache) put(e *entry) {
	if c == nil {
		return
	}
	e.computeSize()
	if e.size > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[e.key]; ok {
		c.remove(el)
	}
	c.items[e.key] = c.ll.PushFront(e)
	c.bytes += e.size
	for c.ll.Len() > c.maxEntries || c.bytes > c.maxBytes {
		c.remove(c.ll.Back())
	}
}

func (c *replayCache) remove(el *list.Element) {
	e := c.ll.Remove(el).(*entry)
	delete(c.items, e.key)
	c.bytes -= e.size
}

// CacheStats describes the replay cache.
type CacheStats struct {
	Hits    uint64 // replays and reuses answered from memory
	Misses  uint64 // lookups that went on to the database
	Entries int
	Bytes   int64 // approximate
}

func (c *replayCache) stats() CacheStats {
	if c == nil {
		return CacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Entries: c.ll.Len(), Bytes: c.bytes}
}
