/* Process-wide registration table of the TCP rail. rkey = slot index in the
 * low 20 bits and a 12-bit generation above it, so a stale key from a
 * deregistered buffer does not resolve to whatever reuses the slot. */
#include "rail_tcp.h"
#include "rr_log.h"

#include <pthread.h>
#include <stdlib.h>

#define MR_INDEX_BITS 20
#define MR_INDEX_MASK ((1u << MR_INDEX_BITS) - 1)

typedef struct tcp_mr {
  rr_rail_mr base;   /* first: rr_rail_mr* and tcp_mr* are interchangeable */
  uint32_t index;
} tcp_mr;

typedef struct mr_slot {
  tcp_mr *mr;          /* NULL when free */
  uint32_t generation;
} mr_slot;

static pthread_mutex_t mr_lock = PTHREAD_MUTEX_INITIALIZER;
static mr_slot *slots;
static uint32_t nslots, cap;

rr_status rr_tcp_reg_mr(void *base, size_t len, rr_rail_mr **out) {
  tcp_mr *mr = calloc(1, sizeof *mr);
  if (!mr) return RR_ERR_NOMEM;
  pthread_mutex_lock(&mr_lock);
  uint32_t idx = 0;
  while (idx < nslots && slots[idx].mr) idx++;
  if (idx == nslots) {
    if (nslots == cap) {
      uint32_t ncap = cap ? cap * 2 : 256;
      mr_slot *n = ncap <= MR_INDEX_MASK + 1 ? realloc(slots, ncap * sizeof *n) : NULL;
      if (!n) {
        pthread_mutex_unlock(&mr_lock);
        free(mr);
        RR_WARN("TCP rail: registration table full (%u entries)", cap);
        return RR_ERR_NOMEM;
      }
      slots = n, cap = ncap;
    }
    slots[nslots++] = (mr_slot){NULL, 0};
  }
  slots[idx].generation = (slots[idx].generation + 1) & 0xfff;
  slots[idx].mr = mr;
  mr->index = idx;
  mr->base.base = base;
  mr->base.len = len;
  mr->base.lkey = mr->base.rkey = idx | (slots[idx].generation << MR_INDEX_BITS);
  pthread_mutex_unlock(&mr_lock);
  *out = &mr->base;
  return RR_OK;
}

void rr_tcp_dereg_mr(rr_rail_mr *rail_mr) {
  if (!rail_mr) return;
  tcp_mr *mr = (tcp_mr *)rail_mr;
  pthread_mutex_lock(&mr_lock);
  if (mr->index < nslots && slots[mr->index].mr == mr) slots[mr->index].mr = NULL;
  pthread_mutex_unlock(&mr_lock);
  free(mr);
}

void *rr_tcp_mr_resolve(uint32_t rkey, uint64_t addr, uint64_t len) {
  void *p = NULL;
  uint32_t idx = rkey & MR_INDEX_MASK;
  pthread_mutex_lock(&mr_lock);
  if (idx < nslots && slots[idx].mr && slots[idx].mr->base.rkey == rkey) {
    const rr_rail_mr *m = &slots[idx].mr->base;
    uint64_t lo = (uint64_t)(uintptr_t)m->base;
    if (addr >= lo && len <= m->len && addr - lo <= m->len - len) p = (void *)(uintptr_t)addr;
  }
  pthread_mutex_unlock(&mr_lock);
  return p;
}

/* NCCL dlclose()s the plugin after its last communicator: give the table back. */
__attribute__((destructor)) static void tcp_mr_unload(void) {
  pthread_mutex_lock(&mr_lock);
  free(slots);
  slots = NULL;
  nslots = cap = 0;
  pthread_mutex_unlock(&mr_lock);
}
