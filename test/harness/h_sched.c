/* The deterministic traffic schedule and the payload pattern.
 *
 * Both processes compute the same schedule from (seed, direction, connection,
 * op sequence): whether an op is a single message or a group, every message's
 * size, the size the receiver posts, the tags and the sender's isend order.
 * Every payload byte is a function of (schedule key, sequence, tag, offset),
 * so the receiver can check every byte without being told anything. */
#include "harness.h"

#include <string.h>

uint64_t h_mix64(uint64_t x) {  /* splitmix64's finaliser */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t rng_next(uint64_t *state) {
  *state += 0x9E3779B97F4A7C15ull;
  return h_mix64(*state);
}

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

void h_sched_init(h_sched *s, uint64_t seed, int dir, int conn, int group, size_t min_size,
                  size_t max_size, int duration_mode) {
  memset(s, 0, sizeof *s);
  s->key = h_mix64(seed ^ h_mix64((uint64_t)dir + 1) ^ h_mix64(((uint64_t)conn + 1) << 16));
  s->group = group < 1 ? 1 : group > H_MAX_GROUP ? H_MAX_GROUP : group;
  s->min_size = min_size;
  s->max_size = max_size;
  s->single_cap = max_size;
  s->sub_cap = s->group > 1 ? max_sz(min_size, max_size / (size_t)s->group) : 0;
  s->sub_stride = round_up(s->sub_cap + H_SLACK_MAX + H_GUARD, 64);
  size_t single_stride = round_up(s->single_cap + H_SLACK_MAX + H_GUARD, 64);
  s->slot_bytes = max_sz(single_stride, s->group > 1 ? s->sub_stride * (size_t)s->group : 0);
  s->single_slack_min = duration_mode ? 1 : 0;
  s->conn = conn;
}

/* Sizes: zero, tiny, small odd, medium and large, clamped to [min, cap]. */
static size_t pick_size(uint64_t *rng, size_t cap, size_t min) {
  uint64_t r = rng_next(rng), r2 = rng_next(rng);
  unsigned p = (unsigned)(r % 100);
  size_t v;
  if (p < 8) v = 0;
  else if (p < 16) v = 1 + r2 % 16;
  else if (p < 40) v = 17 + r2 % 4080;
  else if (p < 70) v = 4096 + r2 % (256 * 1024 - 4096);
  else v = cap > 256 * 1024 ? 256 * 1024 + r2 % (cap - 256 * 1024 + 1) : r2 % (cap + 1);
  if (v > cap) v = cap;
  if (v < min) v = min <= cap ? min : cap;
  if ((r >> 40) & 1 && v > 0 && (v | 1) <= cap) v |= 1;
  return v;
}

static size_t pick_slack(uint64_t *rng, int min_slack) {
  uint64_t r = rng_next(rng);
  size_t v;
  switch (r & 3) {
  case 0: v = 0; break;
  case 1: v = 1 + (r >> 8) % 7; break;
  case 2: v = 8 + (r >> 8) % 504; break;
  default: v = 512 + (r >> 8) % (H_SLACK_MAX - 511); break;
  }
  if (v < (size_t)min_slack) v = (size_t)min_slack;
  return v;
}

static void shuffle(uint64_t *rng, uint8_t *order, int n) {
  for (int i = 0; i < n; i++) order[i] = (uint8_t)i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rng_next(rng) % (uint64_t)(i + 1));
    uint8_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

static void group_tags(uint64_t *rng, h_op *op) {
  int base = (int)(rng_next(rng) % (1u << 20));
  int step = 1 + (int)(rng_next(rng) % 97);
  for (int i = 0; i < op->n; i++) op->m[i].tag = base + i * step;
}

void h_sched_op(const h_sched *s, uint64_t seq, h_op *op) {
  uint64_t rng = s->key ^ h_mix64(seq * 0xD1B54A32D192ED03ull + 1);
  memset(op, 0, sizeof *op);
  int G = s->group;
  int single_tag = 0x100 + s->conn;   /* like NCCL's peer rank: one tag per connection */

  if (s->nsizes > 0) { /* --sizes: the listed sizes in turn, each a single message */
    op->n = 1;
    op->m[0].size = s->sizes[seq % (uint64_t)s->nsizes];
    op->m[0].posted = op->m[0].size + pick_slack(&rng, s->single_slack_min);
    op->m[0].tag = single_tag;
    return;
  }

  /* The first ops are fixed edge cases, whatever the seed and --min-size:
   * 0: a zero-byte single; 1: a group with 0, 1, the largest and odd sizes;
   * 2: the largest single; 3: a group of zero-byte messages. */
  if (G >= 2 && (seq == 1 || seq == 3))
    op->n = seq == 1 ? G : 2;
  else if (seq >= 4 && G >= 2 && rng_next(&rng) % 100 < 55)
    op->n = (rng_next(&rng) & 1) ? G : 2 + (int)(rng_next(&rng) % (uint64_t)(G - 1));
  else
    op->n = 1;

  if (op->n == 1) {
    size_t sz;
    if (seq == 0) sz = 0;
    else if (seq == 2) sz = s->single_cap;
    else sz = pick_size(&rng, s->single_cap, s->min_size);
    op->m[0].size = sz;
    op->m[0].posted = sz + pick_slack(&rng, s->single_slack_min);
    op->m[0].tag = (rng_next(&rng) % 5 == 0) ? (int)(rng_next(&rng) % (1u << 24)) : single_tag;
    op->order[0] = 0;
    op->hint = rng_next(&rng) % 4 == 0;
    return;
  }

  group_tags(&rng, op);
  for (int i = 0; i < op->n; i++) {
    size_t sz;
    if (seq == 3) sz = 0;
    else if (seq == 1 && i == 0) sz = 0;
    else if (seq == 1 && i == 1) sz = s->sub_cap >= 1 ? 1 : 0;
    else if (seq == 1 && i == 2) sz = s->sub_cap;
    else if (seq == 1 && i == 3) sz = s->sub_cap >= 7 ? 7 : s->sub_cap;
    else sz = pick_size(&rng, s->sub_cap, s->min_size);
    op->m[i].size = sz;
    op->m[i].posted = sz + pick_slack(&rng, 0);
  }
  shuffle(&rng, op->order, op->n);
}

size_t h_sched_offset(const h_sched *s, const h_op *op, int i) {
  return op->n == 1 ? 0 : (size_t)i * s->sub_stride;
}

/* ---- payload ------------------------------------------------------------ */

uint64_t h_payload_key(const h_sched *s, uint64_t seq, int tag) {
  return h_mix64(s->key ^ h_mix64(seq * 0x9E3779B97F4A7C15ull + (uint64_t)(uint32_t)tag));
}

static inline uint64_t word_at(uint64_t key, uint64_t i) {
  uint64_t z = key + i * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  return z ^ (z >> 29);
}

void h_payload_fill(void *buf, size_t size, uint64_t key) {
  unsigned char *p = buf;
  size_t words = size / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = word_at(key, i);
    memcpy(p + i * 8, &w, 8);
  }
  if (size % 8) {
    uint64_t w = word_at(key, words);
    memcpy(p + words * 8, &w, size % 8);
  }
}

size_t h_payload_check(const void *buf, size_t size, uint64_t key, size_t *first_bad, uint8_t *exp,
                       uint8_t *got) {
  const unsigned char *p = buf;
  size_t bad = 0;
  size_t words = (size + 7) / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = word_at(key, i), have = 0;
    size_t n = (i + 1) * 8 <= size ? 8 : size - i * 8;
    memcpy(&have, p + i * 8, n);
    if (n < 8) w &= (~0ull) >> (8 * (8 - n));
    if (have == w) continue;
    for (size_t b = 0; b < n; b++) {
      uint8_t e = (uint8_t)(w >> (8 * b)), g = (uint8_t)(have >> (8 * b));
      if (e == g) continue;
      if (!bad) {
        *first_bad = i * 8 + b;
        *exp = e;
        *got = g;
      }
      bad++;
    }
  }
  return bad;
}
