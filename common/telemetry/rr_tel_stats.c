#include "rr_tel_stats.h"

#include <stdlib.h>
#include <string.h>

/* ---- window */

rr_status rr_tel_window_init(rr_tel_window *win, uint32_t w) {
  memset(win, 0, sizeof *win);
  if (w == 0) w = 1;
  win->e = calloc(w, sizeof *win->e);
  if (!win->e) return RR_ERR_NOMEM;
  win->w = w;
  return RR_OK;
}

void rr_tel_window_fini(rr_tel_window *win) {
  free(win->e);
  win->e = NULL;
}

double rr_tel_window_add(rr_tel_window *win, uint64_t post_ns, uint64_t done_ns, uint32_t bytes) {
  uint64_t start = post_ns > win->prev_done ? post_ns : win->prev_done;
  /* A completion older than one already seen (another connection's ring was
   * drained late) adds its bytes but no busy time: that time is covered. */
  uint64_t busy = done_ns > start ? done_ns - start : 0;
  if (done_ns > win->prev_done) win->prev_done = done_ns;
  struct rr_tel_win_entry *e = &win->e[win->pos];
  if (win->n == win->w) {
    win->sum_bytes -= e->bytes;
    win->sum_busy -= e->busy;
  } else {
    win->n++;
  }
  e->bytes = bytes;
  e->busy = busy;
  win->sum_bytes += bytes;
  win->sum_busy += busy;
  win->pos = (win->pos + 1) % win->w;
  if (win->sum_busy == 0) return 0;
  return (double)win->sum_bytes * 1e9 / (double)win->sum_busy;
}

/* ---- reservoir */

rr_status rr_tel_res_init(rr_tel_reservoir *r, uint32_t cap, uint64_t seed) {
  memset(r, 0, sizeof *r);
  if (cap == 0) cap = 1;
  r->v = malloc((size_t)cap * sizeof *r->v);
  if (!r->v) return RR_ERR_NOMEM;
  r->cap = cap;
  r->rng = seed ? seed : 0x9e3779b97f4a7c15ull;
  return RR_OK;
}

void rr_tel_res_fini(rr_tel_reservoir *r) {
  free(r->v);
  r->v = NULL;
}

static uint64_t xorshift64(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

void rr_tel_res_add(rr_tel_reservoir *r, uint64_t x) {
  r->seen++;
  if (r->n < r->cap) {
    r->v[r->n++] = x;
    return;
  }
  /* Keep the new value with probability cap/seen, in place of a random one. */
  uint64_t j = xorshift64(&r->rng) % r->seen;
  if (j < r->cap) r->v[j] = x;
}

void rr_tel_res_reset(rr_tel_reservoir *r) {
  r->n = 0;
  r->seen = 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

uint64_t rr_tel_quantile_sorted(const uint64_t *sorted, uint32_t n, double q) {
  if (n == 0) return 0;
  /* rank = ceil(q * n), computed without libm. */
  double x = q * (double)n;
  if (x <= 1) return sorted[0];
  if (x >= n) return sorted[n - 1];
  uint32_t rank = (uint32_t)x;
  if ((double)rank < x) rank++;
  return sorted[rank - 1];
}

rr_status rr_tel_res_quantiles(rr_tel_reservoir *r, const double *q, int nq, uint64_t *out) {
  if (r->n == 0) return RR_AGAIN;
  qsort(r->v, r->n, sizeof *r->v, cmp_u64);
  for (int i = 0; i < nq; i++) out[i] = rr_tel_quantile_sorted(r->v, r->n, q[i]);
  return RR_OK;
}

/* ---- drop detector */

rr_status rr_tel_drop_init(rr_tel_drop_detector *d, uint32_t w) {
  memset(d, 0, sizeof *d);
  d->w = w ? w : 1;
  d->armed = 1;
  return RR_OK;
}

void rr_tel_drop_fini(rr_tel_drop_detector *d) { (void)d; }

/* Median of the pool without its newest entry (it overlaps the current window). */
static double pool_reference(const rr_tel_drop_detector *d) {
  double v[RR_TEL_DROP_POOL];
  uint32_t n = 0;
  uint32_t newest = (d->pool_pos + RR_TEL_DROP_POOL - 1) % RR_TEL_DROP_POOL;
  for (uint32_t i = 0; i < d->pool_n; i++) {
    uint32_t k = (d->pool_pos + RR_TEL_DROP_POOL - d->pool_n + i) % RR_TEL_DROP_POOL;
    if (k == newest) continue;
    double x = d->pool[k];
    uint32_t j = n++;
    while (j > 0 && v[j - 1] > x) v[j] = v[j - 1], j--;
    v[j] = x;
  }
  if (n < RR_TEL_DROP_POOL / 2) return 0;
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int rr_tel_drop_step(rr_tel_drop_detector *d, double thr, double fraction, double *avg_out) {
  int fired = 0;
  double limit = fraction * d->ref;
  if (fraction > 0 && d->ref > 0 && d->armed && thr < limit) {
    if (++d->below >= 2 * d->w) {
      d->armed = 0;
      d->below = 0;
      fired = 1;
      if (avg_out) *avg_out = d->ref;
    }
  } else {
    d->below = 0;
    if (!d->armed && thr >= limit) d->armed = 1;
  }
  /* Every W requests a disjoint window joins the pool, unless a drop is
   * being confirmed: the reference is what came before it. */
  if (++d->count >= d->w) {
    d->count = 0;
    if (!d->below) {
      d->pool[d->pool_pos] = thr;
      d->pool_pos = (d->pool_pos + 1) % RR_TEL_DROP_POOL;
      if (d->pool_n < RR_TEL_DROP_POOL) d->pool_n++;
      d->ref = pool_reference(d);
    }
  }
  return fired;
}
