/* Life shared by the idle rails of one link (link_life.h). */
#include "link_life.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

rr_link_table rr_link_lives;

/* guards: additions to any rr_link_table (a leaf: taken under an engine's
 * lock, nothing taken under it). Readers of filled entries need none: an
 * entry is filled before n is raised past it (release), and never changes
 * but for its atomics. */
static pthread_mutex_t add_lock = PTHREAD_MUTEX_INITIALIZER;

static int find(const rr_link_table *t, int n, int role, int dev, const char *peer) {
  for (int i = 0; i < n; i++) {
    const rr_link_life *l = &t->e[i];
    if (l->role == role && l->dev == dev && !strncmp(l->peer, peer, RR_LINK_PEER_LEN)) return i;
  }
  return -1;
}

int rr_link_life_slot(rr_link_table *t, int role, int dev, const char *peer) {
  int n = atomic_load_explicit(&t->n, memory_order_acquire);
  int i = find(t, n, role, dev, peer);
  if (i >= 0) return i;
  pthread_mutex_lock(&add_lock);
  n = atomic_load_explicit(&t->n, memory_order_relaxed);
  i = find(t, n, role, dev, peer);
  if (i < 0 && n < RR_LINK_LIFE_MAX) {
    rr_link_life *l = &t->e[n];
    l->role = role;
    l->dev = dev;
    snprintf(l->peer, sizeof l->peer, "%s", peer);
    atomic_store_explicit(&l->life_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&l->probe_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&t->n, n + 1, memory_order_release);
    i = n;
  }
  pthread_mutex_unlock(&add_lock);
  return i;
}

static int valid(const rr_link_table *t, int slot) {
  return slot >= 0 && slot < atomic_load_explicit(&t->n, memory_order_acquire);
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
  pthread_mutex_lock(&add_lock);
  atomic_store_explicit(&t->n, 0, memory_order_release);
  memset(t->e, 0, sizeof t->e);
  pthread_mutex_unlock(&add_lock);
}
