/* Deterministic randomness for the simulation: xoshiro256** seeded through
 * splitmix64, so a seed number alone reproduces a run (no libc rand, no
 * state shared with anything else). */
#ifndef RERAIL_SIM_RNG_H
#define RERAIL_SIM_RNG_H
#include <stdint.h>

typedef struct sim_rng {
  uint64_t s[4];
} sim_rng;

static inline uint64_t sim_splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline void sim_rng_seed(sim_rng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = sim_splitmix64(&seed);
}

static inline uint64_t sim_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t sim_next(sim_rng *r) {
  uint64_t *s = r->s;
  uint64_t out = sim_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = sim_rotl(s[3], 45);
  return out;
}

/* Uniform in [0, n) (n > 0; the bias of a plain modulo is irrelevant here). */
static inline uint64_t sim_below(sim_rng *r, uint64_t n) { return n ? sim_next(r) % n : 0; }
/* Uniform in [lo, hi]. */
static inline uint64_t sim_range(sim_rng *r, uint64_t lo, uint64_t hi) { return lo + sim_below(r, hi - lo + 1); }
/* True with probability per_mille / 1000. */
static inline int sim_chance(sim_rng *r, unsigned per_mille) { return sim_below(r, 1000) < per_mille; }

#endif
