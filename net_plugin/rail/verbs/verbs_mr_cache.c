/* The verbs device's registration cache (rail_verbs.h): NCCL registers the
 * same buffer again and again (per communicator, per channel), and each
 * ibv_reg_mr pins pages and costs a system call, so one registration serves
 * every request for the same (base, len, kind).
 *
 * A hash table with chained buckets, doubled when it holds two entries per
 * bucket: a lookup is O(1) however many buffers a process registers (a list
 * scan was O(n) under a lock every endpoint took). Its mutex guards the
 * table alone and is never held across ibv_reg_mr or ibv_dereg_mr, which
 * can take milliseconds for a large buffer: the caller registers between a
 * miss and the insert, and the insert rechecks for a thread that registered
 * the same buffer meanwhile. */
#include "rail_verbs.h"

#include <stdlib.h>

struct verbs_mr_entry {
  verbs_mr_entry *next;
  const void *base;
  size_t len;
  uint32_t kind;
  struct ibv_mr *mr;
  uint64_t refs;
};

struct verbs_mr_cache {
  /* guards: bucket, nbuckets, count, every entry's refs; a leaf, never held across ibv_reg_mr. */
  pthread_mutex_t lock;
  verbs_mr_entry **bucket;
  size_t nbuckets; /* a power of two */
  size_t count;
};

#define INITIAL_BUCKETS 64

/* splitmix64's finalizer over the key: buffers are page aligned, so their
 * low bits say nothing. */
static size_t key_hash(const void *base, size_t len, uint32_t kind) {
  uint64_t x = (uint64_t)(uintptr_t)base ^ ((uint64_t)len * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)kind << 56);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return (size_t)x;
}

rr_status verbs_mr_cache_create(verbs_mr_cache **out) {
  verbs_mr_cache *c = calloc(1, sizeof *c);
  if (!c) return RR_ERR_NOMEM;
  c->bucket = calloc(INITIAL_BUCKETS, sizeof *c->bucket);
  if (!c->bucket) {
    free(c);
    return RR_ERR_NOMEM;
  }
  c->nbuckets = INITIAL_BUCKETS;
  pthread_mutex_init(&c->lock, NULL);
  *out = c;
  return RR_OK;
}

void verbs_mr_cache_destroy(verbs_mr_cache *c, const rr_ibv_api *api) {
  if (!c) return;
  for (size_t b = 0; b < c->nbuckets; b++)
    while (c->bucket[b]) {
      verbs_mr_entry *e = c->bucket[b];
      c->bucket[b] = e->next;
      api->dereg_mr(e->mr);
      free(e);
    }
  free(c->bucket);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

static verbs_mr_entry *find_locked(verbs_mr_cache *c, const void *base, size_t len, uint32_t kind) {
  verbs_mr_entry *e = c->bucket[key_hash(base, len, kind) & (c->nbuckets - 1)];
  while (e && !(e->base == base && e->len == len && e->kind == kind)) e = e->next;
  return e;
}

/* Twice the buckets when the table holds two entries per bucket; a failed
 * allocation keeps the table as it is (only slower). */
static void grow_locked(verbs_mr_cache *c) {
  if (c->count < 2 * c->nbuckets) return;
  size_t n = 2 * c->nbuckets;
  verbs_mr_entry **nb = calloc(n, sizeof *nb);
  if (!nb) return;
  for (size_t b = 0; b < c->nbuckets; b++)
    while (c->bucket[b]) {
      verbs_mr_entry *e = c->bucket[b];
      c->bucket[b] = e->next;
      size_t i = key_hash(e->base, e->len, e->kind) & (n - 1);
      e->next = nb[i];
      nb[i] = e;
    }
  free(c->bucket);
  c->bucket = nb;
  c->nbuckets = n;
}

verbs_mr_entry *verbs_mr_cache_get(verbs_mr_cache *c, const void *base, size_t len, uint32_t kind) {
  pthread_mutex_lock(&c->lock);
  verbs_mr_entry *e = find_locked(c, base, len, kind);
  if (e) e->refs++;
  pthread_mutex_unlock(&c->lock);
  return e;
}

verbs_mr_entry *verbs_mr_cache_put(verbs_mr_cache *c, const void *base, size_t len, uint32_t kind,
                                   struct ibv_mr *mr, int *raced) {
  *raced = 0;
  verbs_mr_entry *fresh = calloc(1, sizeof *fresh); /* allocated outside the lock */
  pthread_mutex_lock(&c->lock);
  verbs_mr_entry *e = find_locked(c, base, len, kind);
  if (e) {
    e->refs++;
    *raced = 1;
  } else if (fresh) {
    *fresh = (verbs_mr_entry){.base = base, .len = len, .kind = kind, .mr = mr, .refs = 1};
    grow_locked(c);
    size_t b = key_hash(base, len, kind) & (c->nbuckets - 1);
    fresh->next = c->bucket[b];
    c->bucket[b] = fresh;
    c->count++;
    e = fresh;
    fresh = NULL;
  }
  pthread_mutex_unlock(&c->lock);
  free(fresh); /* not needed: a racing thread's entry, or NULL */
  return e;
}

struct ibv_mr *verbs_mr_cache_release(verbs_mr_cache *c, verbs_mr_entry *e) {
  struct ibv_mr *last = NULL;
  pthread_mutex_lock(&c->lock);
  if (--e->refs == 0) {
    size_t b = key_hash(e->base, e->len, e->kind) & (c->nbuckets - 1);
    for (verbs_mr_entry **p = &c->bucket[b]; *p; p = &(*p)->next)
      if (*p == e) {
        *p = e->next;
        break;
      }
    c->count--;
    last = e->mr;
  }
  pthread_mutex_unlock(&c->lock);
  if (last) free(e);
  return last;
}

struct ibv_mr *verbs_mr_entry_mr(const verbs_mr_entry *e) { return e->mr; }

size_t verbs_mr_cache_count(verbs_mr_cache *c) {
  pthread_mutex_lock(&c->lock);
  size_t n = c->count;
  pthread_mutex_unlock(&c->lock);
  return n;
}
