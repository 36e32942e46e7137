/* Single-producer/single-consumer ring of telemetry samples.
 *
 * The producer is whichever thread progresses the connection (the engine's
 * lock serializes them, which also orders their plain stores); the consumer is
 * the exporter thread. Head and tail are free-running 32-bit counters (they
 * wrap through 2^32 with unsigned arithmetic); the capacity is a power of two.
 *
 * Push never blocks and never makes a system call: when the ring is full the
 * sample is dropped and counted. The producer keeps a private copy of the
 * consumer's tail so that a push normally touches only its own cache line
 * plus the slot. */
#ifndef RERAIL_COMMON_TEL_RING_H
#define RERAIL_COMMON_TEL_RING_H
#include <stdatomic.h>
#include <stdint.h>

/* A sample as the consumer sees it. */
typedef struct rr_tel_sample {
  uint64_t post_ns;  /* CLOCK_MONOTONIC: the request was posted */
  uint64_t done_ns;  /* CLOCK_MONOTONIC: it completed */
  uint32_t bytes;
  uint32_t reserved;
} rr_tel_sample;

/* A sample as the ring stores it: 16 bytes, four to a cache line, so a ring
 * holds a third more requests in the same memory. The latency saturates at
 * 2^32-1 ns (4.3 s): a request that took longer reads as posted 4.3 s before
 * it completed, which no window or percentile of a working rail reaches. */
typedef struct rr_tel_slot {
  uint64_t done_ns;
  uint32_t latency_ns;
  uint32_t bytes;
} rr_tel_slot;

typedef struct rr_tel_ring {
  /* Producer's line. */
  _Alignas(64) _Atomic uint32_t head;
  uint32_t tail_cache;       /* producer's last view of tail */
  _Atomic uint64_t drops;    /* written by the producer only; read by the consumer */
  /* Consumer's line. */
  _Alignas(64) _Atomic uint32_t tail;
  uint32_t mask;             /* capacity - 1, fixed at init */
  rr_tel_slot slot[];        /* starts on its own line: sizeof is a multiple of 64 */
} rr_tel_ring;

/* Bytes to allocate for a ring of `capacity` slots (a power of two). */
static inline unsigned long rr_tel_ring_size(uint32_t capacity) {
  return sizeof(rr_tel_ring) + (unsigned long)capacity * sizeof(rr_tel_slot);
}

/* start: the initial head/tail value (tests start near 2^32 to cross the wrap). */
static inline void rr_tel_ring_init(rr_tel_ring *r, uint32_t capacity, uint32_t start) {
  atomic_init(&r->head, start);
  atomic_init(&r->tail, start);
  atomic_init(&r->drops, 0);
  r->tail_cache = start;
  r->mask = capacity - 1;
}

/* Producer. Returns 1 when stored, 0 when dropped (ring full). */
static inline int rr_tel_ring_push(rr_tel_ring *r, uint64_t post_ns, uint64_t done_ns, uint32_t bytes) {
  uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  if (h - r->tail_cache > r->mask) {
    /* Looks full: refresh the consumer's position (acquire: the slots it
     * released are free to overwrite). */
    r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
    if (h - r->tail_cache > r->mask) {
      atomic_store_explicit(&r->drops, atomic_load_explicit(&r->drops, memory_order_relaxed) + 1,
                            memory_order_relaxed);
      return 0;
    }
  }
  rr_tel_slot *s = &r->slot[h & r->mask];
  uint64_t latency = done_ns > post_ns ? done_ns - post_ns : 0;
  s->done_ns = done_ns;
  s->latency_ns = latency > UINT32_MAX ? UINT32_MAX : (uint32_t)latency;
  s->bytes = bytes;
  /* Release: the consumer that sees the new head sees the slot's contents. */
  atomic_store_explicit(&r->head, h + 1, memory_order_release);
  return 1;
}

/* Consumer: copy up to max samples out, oldest first. Returns how many. */
static inline uint32_t rr_tel_ring_pop(rr_tel_ring *r, rr_tel_sample *out, uint32_t max) {
  uint32_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
  uint32_t h = atomic_load_explicit(&r->head, memory_order_acquire);
  uint32_t n = h - t;
  if (n > max) n = max;
  for (uint32_t i = 0; i < n; i++) {
    const rr_tel_slot *s = &r->slot[(t + i) & r->mask];
    out[i] = (rr_tel_sample){.post_ns = s->done_ns - s->latency_ns, .done_ns = s->done_ns, .bytes = s->bytes};
  }
  /* Release: the producer may reuse the slots only after we copied them. */
  atomic_store_explicit(&r->tail, t + n, memory_order_release);
  return n;
}

static inline uint64_t rr_tel_ring_drops(rr_tel_ring *r) {
  return atomic_load_explicit(&r->drops, memory_order_relaxed);
}

#endif
