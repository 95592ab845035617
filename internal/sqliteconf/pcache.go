package sqliteconf

// SQLite's page cache (pcache1) forgets, at every commit, the pages past
// the database's end: it remembers the highest page number it ever held
// (iMaxKey) and, when that is past the end, walks the cache's whole hash
// table. B-tree balancing (balance_nonroot) swaps two new pages' numbers
// through a temporary number, the page just past SQLite's lock byte
// (1,048,577 with 1 KiB pages), so after any split that reorders pages the
// commit that follows walked every page of the writer's cache. perf on
// `harvest bench dispatch` put 15% of the writer's SQLite time in that walk
// (pcache1TruncateUnsafe): ~0.4 ms per such commit with 8,000 cached pages,
// growing with the cache.
//
// The shim below wraps the default page cache and remembers, per cache,
// which page numbers it can hold: the highest created, and the few that
// pages were renumbered to and not renumbered away from since. A truncate
// that cannot drop anything is skipped; any other is passed on whole, so
// a rollback that shrinks the database still drops its pages.

/*
#include <stdlib.h>

int sqlite3_config(int, ...);

typedef struct sqlite3_pcache sqlite3_pcache;
typedef struct sqlite3_pcache_page { void *pBuf; void *pExtra; } sqlite3_pcache_page;
typedef struct sqlite3_pcache_methods2 {
	int iVersion;
	void *pArg;
	int (*xInit)(void*);
	void (*xShutdown)(void*);
	sqlite3_pcache *(*xCreate)(int szPage, int szExtra, int bPurgeable);
	void (*xCachesize)(sqlite3_pcache*, int nCachesize);
	int (*xPagecount)(sqlite3_pcache*);
	sqlite3_pcache_page *(*xFetch)(sqlite3_pcache*, unsigned key, int createFlag);
	void (*xUnpin)(sqlite3_pcache*, sqlite3_pcache_page*, int discard);
	void (*xRekey)(sqlite3_pcache*, sqlite3_pcache_page*, unsigned oldKey, unsigned newKey);
	void (*xTruncate)(sqlite3_pcache*, unsigned iLimit);
	void (*xDestroy)(sqlite3_pcache*);
	void (*xShrink)(sqlite3_pcache*);
} sqlite3_pcache_methods2;

static sqlite3_pcache_methods2 inner, wrapped;

enum { nMoved = 4 };

// A cache holds no page numbered above hi, but those in moved. seen is
// what pcache1 would keep as iMaxKey without the shim: the highest number
// a page had since the last truncate (to count the walks avoided).
typedef struct shim {
	sqlite3_pcache *p;
	unsigned hi, seen;
	unsigned moved[nMoved];
	int n;
} shim;

static long long truncPassed, truncAvoided;

static sqlite3_pcache *shimCreate(int szPage, int szExtra, int bPurgeable) {
	shim *s = calloc(1, sizeof *s);
	if (!s) return 0;
	s->p = inner.xCreate(szPage, szExtra, bPurgeable);
	if (!s->p) { free(s); return 0; }
	return (sqlite3_pcache *)s;
}
static void shimCachesize(sqlite3_pcache *p, int n) { inner.xCachesize(((shim *)p)->p, n); }
static int shimPagecount(sqlite3_pcache *p) { return inner.xPagecount(((shim *)p)->p); }
static sqlite3_pcache_page *shimFetch(sqlite3_pcache *p, unsigned key, int create) {
	shim *s = (shim *)p;
	sqlite3_pcache_page *pg = inner.xFetch(s->p, key, create);
	if (pg && create && key > s->hi) s->hi = key; // conservative: a page found, not created, is already counted
	if (pg && create && key > s->seen) s->seen = key;
	return pg;
}
static void shimUnpin(sqlite3_pcache *p, sqlite3_pcache_page *pg, int discard) { inner.xUnpin(((shim *)p)->p, pg, discard); }
static void shimRekey(sqlite3_pcache *p, sqlite3_pcache_page *pg, unsigned oldKey, unsigned newKey) {
	shim *s = (shim *)p;
	inner.xRekey(s->p, pg, oldKey, newKey);
	if (newKey > s->seen) s->seen = newKey;
	for (int i = 0; i < s->n; i++) {
		if (s->moved[i] == oldKey) { s->moved[i] = s->moved[--s->n]; break; }
	}
	if (newKey <= s->hi) return;
	if (s->n == nMoved) { // full: fold them into hi
		for (int i = 0; i < s->n; i++) if (s->moved[i] > s->hi) s->hi = s->moved[i];
		s->n = 0;
		if (newKey > s->hi) s->hi = newKey;
		return;
	}
	s->moved[s->n++] = newKey;
}
static void shimTruncate(sqlite3_pcache *p, unsigned limit) {
	shim *s = (shim *)p;
	int need = limit == 0 || s->hi >= limit;
	for (int i = 0; !need && i < s->n; i++) need = s->moved[i] >= limit;
	if (!need) {
		if (limit <= s->seen) { // pcache1 would have walked its hash table
			__atomic_fetch_add(&truncAvoided, 1, __ATOMIC_RELAXED);
			s->seen = limit - 1;
		}
		return;
	}
	__atomic_fetch_add(&truncPassed, 1, __ATOMIC_RELAXED);
	inner.xTruncate(s->p, limit);
	if (limit == 0) { s->hi = s->seen = 0; s->n = 0; return; }
	if (s->seen >= limit) s->seen = limit - 1;
	if (s->hi >= limit) s->hi = limit - 1;
	for (int i = 0; i < s->n;) {
		if (s->moved[i] >= limit) s->moved[i] = s->moved[--s->n]; else i++;
	}
}
static void shimDestroy(sqlite3_pcache *p) {
	shim *s = (shim *)p;
	inner.xDestroy(s->p);
	free(s);
}
static void shimShrink(sqlite3_pcache *p) { inner.xShrink(((shim *)p)->p); }

// 19: SQLITE_CONFIG_GETPCACHE2, 18: SQLITE_CONFIG_PCACHE2.
static int installPCache(void) {
	int rc = sqlite3_config(19, &inner);
	if (rc) return rc;
	wrapped = inner;
	wrapped.xCreate = shimCreate;
	wrapped.xCachesize = shimCachesize;
	wrapped.xPagecount = shimPagecount;
	wrapped.xFetch = shimFetch;
	wrapped.xUnpin = shimUnpin;
	wrapped.xRekey = shimRekey;
	wrapped.xTruncate = shimTruncate;
	wrapped.xDestroy = shimDestroy;
	wrapped.xShrink = shimShrink;
	return sqlite3_config(18, &wrapped);
}

// A cache of the wrapped kind for the tests, driven page by page.
int sqlite3_initialize(void);
static sqlite3_pcache *testCache(void) {
	if (sqlite3_initialize()) return 0;
	sqlite3_pcache *p = wrapped.xCreate(1024, 8, 1);
	if (p) wrapped.xCachesize(p, 10000);
	return p;
}
static int testFetch(sqlite3_pcache *p, unsigned key, int create) {
	sqlite3_pcache_page *pg = wrapped.xFetch(p, key, create ? 2 : 0);
	if (!pg) return 0;
	wrapped.xUnpin(p, pg, 0);
	return 1;
}
static int testRekey(sqlite3_pcache *p, unsigned from, unsigned to) {
	sqlite3_pcache_page *pg = wrapped.xFetch(p, from, 0);
	if (!pg) return 0;
	wrapped.xRekey(p, pg, from, to);
	wrapped.xUnpin(p, pg, 0);
	return 1;
}
static void testTruncate(sqlite3_pcache *p, unsigned limit) { wrapped.xTruncate(p, limit); }
static int testPages(sqlite3_pcache *p) { return wrapped.xPagecount(p); }
static void testDestroy(sqlite3_pcache *p) { wrapped.xDestroy(p); }

static void truncates(long long *passed, long long *avoided) {
	*passed = __atomic_load_n(&truncPassed, __ATOMIC_RELAXED);
	*avoided = __atomic_load_n(&truncAvoided, __ATOMIC_RELAXED);
}
*/
import "C"

// Truncates counts the page caches' truncates since the process started:
// those passed on to SQLite's cache, and the walks avoided (truncates
// skipped, with nothing to drop, that SQLite's cache would have run
// through its hash table).
func Truncates() (passed, avoided int64) {
	var p, a C.longlong
	C.truncates(&p, &a)
	return int64(p), int64(a)
}

func installPCache() C.int { return C.installPCache() }

// testCache is a page cache of the wrapped kind, for the tests.
type testCache struct{ p *C.sqlite3_pcache }

func newTestCache() *testCache {
	p := C.testCache()
	if p == nil {
		return nil
	}
	return &testCache{p}
}

// fetch reports whether the cache holds page key (with create: it does
// after the call).
func (c *testCache) fetch(key uint32, create bool) bool {
	cr := C.int(0)
	if create {
		cr = 1
	}
	return C.testFetch(c.p, C.uint(key), cr) != 0
}

func (c *testCache) rekey(from, to uint32) bool {
	return C.testRekey(c.p, C.uint(from), C.uint(to)) != 0
}
func (c *testCache) truncate(limit uint32) { C.testTruncate(c.p, C.uint(limit)) }
func (c *testCache) pages() int            { return int(C.testPages(c.p)) }
func (c *testCache) destroy()              { C.testDestroy(c.p) }
