/* Life shared by the idle rails of one link (link_life.h). */
#include "link_life.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

rr_link_table rr_link_lives;

/* guards: every entry's link and count of rails, and each table's count
 * of entries held (a leaf: taken under an engine's lock, nothing taken
 * under it). The atomics of an entry are read and written by the rails
 * holding it, without it: an entry is refilled only once none does. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static int find(const rr_link_table *t, int role, int dev, const char *peer) {
  for (int i = 0; i < RR_LINK_LIFE_MAX; i++) {
    const rr_link_life *l = &t->e[i];
    if (l->rails > 0 && l->role == role && l->dev == dev && !strncmp(l->peer, peer, RR_LINK_PEER_LEN)) return i;
  }
  return -1;
}

static int find_free(const rr_link_table *t) {
  for (int i = 0; i < RR_LINK_LIFE_MAX; i++)
    if (t->e[i].rails == 0) return i;
  return -1;
}

int rr_link_life_slot(rr_link_table *t, int role, int dev, const char *peer) {
  pthread_mutex_lock(&table_lock);
  int i = find(t, role, dev, peer);
  if (i < 0 && (i = find_free(t)) >= 0) {
    rr_link_life *l = &t->e[i];
    l->role = role;
    l->dev = dev;
    snprintf(l->peer, sizeof l->peer, "%s", peer);
    /* Life an earlier link left here is not this one's. */
    atomic_store_explicit(&l->life_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&l->probe_ns, 0, memory_order_relaxed);
    t->used++;
  }
  if (i >= 0) t->e[i].rails++;
  pthread_mutex_unlock(&table_lock);
  return i;
}

void rr_link_life_release(rr_link_table *t, int slot) {
  if (slot < 0 || slot >= RR_LINK_LIFE_MAX) return;
  pthread_mutex_lock(&table_lock);
  rr_link_life *l = &t->e[slot];
  if (l->rails > 0 && --l->rails == 0) t->used--;
  pthread_mutex_unlock(&table_lock);
}

int rr_link_life_used(rr_link_table *t) {
  pthread_mutex_lock(&table_lock);
  int n = t->used;
  pthread_mutex_unlock(&table_lock);
  return n;
}

/* A slot some rail holds (its caller): -1 is none. */
static int valid(const rr_link_table *t, int slot) {
  (void)t;
  return slot >= 0 && slot < RR_LINK_LIFE_MAX;
}

void rr_link_life_saw(rr_link_table *t, int slot, uint64_t life_ns) {
  if (!valid(t, slot)) return;
  _Atomic uint64_t *v = &t->e[slot].life_ns;
  uint64_t old = atomic_load_explicit(v, memory_order_relaxed);
  while (life_ns > old && !atomic_compare_exchange_weak_explicit(v, &old, life_ns, memory_order_relaxed,
                                                                 memory_order_relaxed)) {
  }
}

uint64_t rr_link_life_get(const rr_link_table *t, int slot) {
  return valid(t, slot) ? atomic_load_explicit(&t->e[slot].life_ns, memory_order_relaxed) : 0;
}

int rr_link_life_claim_probe(rr_link_table *t, int slot, uint64_t now, uint64_t every) {
  if (!valid(t, slot)) return 1;
  _Atomic uint64_t *v = &t->e[slot].probe_ns;
  uint64_t last = atomic_load_explicit(v, memory_order_relaxed);
  /* A claim "later" than now is another clock's (a simulated world before
   * this one): not a reason to wait. */
  if (last && last <= now && now - last < every) return 0;
  return atomic_compare_exchange_strong_explicit(v, &last, now, memory_order_relaxed, memory_order_relaxed);
}

void rr_link_life_reset(rr_link_table *t) {
  pthread_mutex_lock(&table_lock);
  memset(t, 0, sizeof *t);
  pthread_mutex_unlock(&table_lock);
}
