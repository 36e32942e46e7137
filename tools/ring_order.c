/* Host order for NCCL's inter-host ring (ring_order.h). */
#include "ring_order.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing ------------------------------------------------------------------ */

__attribute__((format(printf, 5, 6))) static int fail(char *err, size_t len, const char *name,
                                                      int line, const char *fmt, ...) {
  if (err == NULL || len == 0) return -1;
  int n = snprintf(err, len, "%s:%d: ", name, line);
  if (n >= 0 && (size_t)n < len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, len - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* Next line of text into buf (comments and blanks skipped); NULL at the end. */
static const char *next_line(const char *p, char *buf, size_t len, int *line, int *too_long) {
  *too_long = 0;
  while (*p != '\0') {
    const char *nl = strchr(p, '\n');
    size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);
    (*line)++;
    const char *next = nl != NULL ? nl + 1 : p + n;
    if (n >= len) {
      *too_long = 1;
      return next;
    }
    memcpy(buf, p, n);
    buf[n] = '\0';
    char *hash = strchr(buf, '#');
    if (hash != NULL) *hash = '\0';
    char *s = buf;
    while (isspace((unsigned char)*s)) s++;
    if (*s != '\0') {
      memmove(buf, s, strlen(s) + 1);
      return next;
    }
    p = next;
  }
  return NULL;
}

static int alloc_hosts(rr_ring_hosts *h, int cap) {
  h->name = calloc((size_t)cap, sizeof(*h->name));
  h->tor = calloc((size_t)cap, sizeof(*h->tor));
  return h->name != NULL && h->tor != NULL ? 0 : -1;
}

static int find_host(const rr_ring_hosts *h, const char *name) {
  for (int i = 0; i < h->n; i++)
    if (strcmp(h->name[i], name) == 0) return i;
  return -1;
}

static int valid_name(const char *s) {
  if (*s == '\0' || strlen(s) >= RR_RING_NAME) return 0;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr("-._:[]", *s)) return 0;
  return 1;
}

int rr_ring_parse_hosts(const char *text, const char *name, rr_ring_hosts *h, char *err,
                        size_t err_len) {
  memset(h, 0, sizeof(*h));
  if (alloc_hosts(h, RR_RING_MAX_HOSTS) != 0) return fail(err, err_len, name, 0, "out of memory");
  char buf[1024];
  int line = 0, too_long;
  const char *p = text;
  while ((p = next_line(p, buf, sizeof(buf), &line, &too_long)) != NULL) {
    if (too_long) return fail(err, err_len, name, line, "line too long");
    char host[RR_RING_NAME + 1] = "", tor[RR_RING_NAME + 1] = "", extra[8] = "";
    int got = sscanf(buf, "%128s %128s %7s", host, tor, extra);
    if (got == 3) return fail(err, err_len, name, line, "expected 'host [tor]', found more words");
    if (!valid_name(host)) return fail(err, err_len, name, line, "bad host name '%s'", host);
    if (got == 2 && !valid_name(tor)) return fail(err, err_len, name, line, "bad ToR label '%s'", tor);
    if (find_host(h, host) >= 0) return fail(err, err_len, name, line, "host '%s' listed twice", host);
    if (h->n == RR_RING_MAX_HOSTS)
      return fail(err, err_len, name, line, "more than %d hosts", RR_RING_MAX_HOSTS);
    strcpy(h->name[h->n], host);
    strcpy(h->tor[h->n], got == 2 ? tor : "");
    h->n++;
  }
  if (h->n < 2) return fail(err, err_len, name, line, "fewer than 2 hosts: no ring to order");
  return 0;
}

int rr_ring_parse_matrix(const char *text, const char *name, rr_ring_hosts *h, char *err,
                         size_t err_len) {
  memset(h, 0, sizeof(*h));
  char *buf = malloc(65536);
  if (buf == NULL || alloc_hosts(h, RR_RING_MAX_HOSTS) != 0) {
    free(buf);
    return fail(err, err_len, name, 0, "out of memory");
  }
  int line = 0, too_long, rc = 0, row = 0;
  const char *p = next_line(text, buf, 65536, &line, &too_long);
  if (p == NULL) {
    rc = fail(err, err_len, name, line, "empty: expected a line of host names");
    goto out;
  }
  if (too_long) {
    rc = fail(err, err_len, name, line, "line too long");
    goto out;
  }
  for (char *tok = strtok(buf, " \t\r,"); tok != NULL; tok = strtok(NULL, " \t\r,")) {
    if (!valid_name(tok)) {
      rc = fail(err, err_len, name, line, "bad host name '%s'", tok);
      goto out;
    }
    if (find_host(h, tok) >= 0) {
      rc = fail(err, err_len, name, line, "host '%s' listed twice", tok);
      goto out;
    }
    if (h->n == RR_RING_MAX_HOSTS) {
      rc = fail(err, err_len, name, line, "more than %d hosts", RR_RING_MAX_HOSTS);
      goto out;
    }
    strcpy(h->name[h->n++], tok);
  }
  if (h->n < 2) {
    rc = fail(err, err_len, name, line, "fewer than 2 hosts: no ring to order");
    goto out;
  }
  h->bw = calloc((size_t)h->n * (size_t)h->n, sizeof(double));
  if (h->bw == NULL) {
    rc = fail(err, err_len, name, line, "out of memory");
    goto out;
  }
  while ((p = next_line(p, buf, 65536, &line, &too_long)) != NULL) {
    if (too_long) {
      rc = fail(err, err_len, name, line, "line too long");
      goto out;
    }
    if (row == h->n) {
      rc = fail(err, err_len, name, line, "more than %d rows", h->n);
      goto out;
    }
    int col = 0;
    for (char *tok = strtok(buf, " \t\r,"); tok != NULL; tok = strtok(NULL, " \t\r,"), col++) {
      char *end;
      errno = 0;
      double v = strtod(tok, &end);
      if (*end != '\0' || errno != 0 || !isfinite(v) || v < 0.0) {
        rc = fail(err, err_len, name, line, "row %d column %d: '%s' is not a bandwidth >= 0",
                  row + 1, col + 1, tok);
        goto out;
      }
      if (col >= h->n) {
        rc = fail(err, err_len, name, line, "row %d has more than %d values", row + 1, h->n);
        goto out;
      }
      h->bw[(size_t)row * h->n + col] = col == row ? 0.0 : v;
    }
    if (col != h->n) {
      rc = fail(err, err_len, name, line, "row %d has %d values, expected %d", row + 1, col, h->n);
      goto out;
    }
    row++;
  }
  if (row != h->n) rc = fail(err, err_len, name, line, "%d rows, expected %d", row, h->n);
out:
  free(buf);
  return rc;
}

void rr_ring_hosts_free(rr_ring_hosts *h) {
  free(h->name);
  free(h->tor);
  free(h->bw);
  memset(h, 0, sizeof(*h));
}

/* ---- ToR grouping ------------------------------------------------------------- */

void rr_ring_order_tor(const rr_ring_hosts *h, int *order) {
  int k = 0;
  char *placed = calloc((size_t)h->n, 1);
  if (placed == NULL) {
    for (int i = 0; i < h->n; i++) order[i] = i;
    return;
  }
  for (int i = 0; i < h->n; i++) {
    if (placed[i]) continue;
    for (int j = i; j < h->n; j++)
      if (!placed[j] && strcmp(h->tor[j], h->tor[i]) == 0) {
        order[k++] = j;
        placed[j] = 1;
      }
  }
  free(placed);
}

/* ---- bandwidth order ---------------------------------------------------------- */

static double bw(const rr_ring_hosts *h, int i, int j) { return h->bw[(size_t)i * h->n + j]; }

double rr_ring_bottleneck(const rr_ring_hosts *h, const int *order) {
  double m = INFINITY;
  for (int i = 0; i < h->n; i++) {
    double b = bw(h, order[i], order[(i + 1) % h->n]);
    if (b < m) m = b;
  }
  return m;
}

double rr_ring_inv_sum(const rr_ring_hosts *h, const int *order) {
  double s = 0.0;
  for (int i = 0; i < h->n; i++) {
    double b = bw(h, order[i], order[(i + 1) % h->n]);
    s += b > 0.0 ? 1.0 / b : INFINITY;
  }
  return s;
}

/* Lexicographic: larger bottleneck first, then smaller sum of 1/bw. */
static int better(double bn_a, double sum_a, double bn_b, double sum_b) {
  if (bn_a > bn_b * (1.0 + 1e-12)) return 1;
  if (bn_b > bn_a * (1.0 + 1e-12)) return 0;
  return sum_a < sum_b * (1.0 - 1e-12);
}

/* Min sum of 1/bw over Hamiltonian cycles from host 0 using only hops with
 * bw >= t; fills order when found. Returns the sum or INFINITY. */
static double exact_min_sum(const rr_ring_hosts *h, double t, int *order) {
  const int n = h->n;
  const size_t full = (size_t)1 << n;
  double *dp = malloc(full * (size_t)n * sizeof(double));
  signed char *prev = malloc(full * (size_t)n);
  if (dp == NULL || prev == NULL) {
    free(dp);
    free(prev);
    return INFINITY;
  }
  for (size_t i = 0; i < full * (size_t)n; i++) dp[i] = INFINITY;
  dp[1 * (size_t)n + 0] = 0.0;
  for (size_t mask = 1; mask < full; mask += 2) /* host 0 always in */
    for (int v = 0; v < n; v++) {
      double cur = dp[mask * n + v];
      if (!isfinite(cur)) continue;
      for (int w = 1; w < n; w++) {
        if (mask & ((size_t)1 << w)) continue;
        double b = bw(h, v, w);
        if (b < t || b <= 0.0) continue;
        size_t m2 = mask | ((size_t)1 << w);
        if (cur + 1.0 / b < dp[m2 * n + w]) {
          dp[m2 * n + w] = cur + 1.0 / b;
          prev[m2 * n + w] = (signed char)v;
        }
      }
    }
  double best = INFINITY;
  int last = -1;
  for (int v = 1; v < n; v++) {
    double b = bw(h, v, 0);
    if (b < t || b <= 0.0) continue;
    double s = dp[(full - 1) * n + v] + 1.0 / b;
    if (s < best) {
      best = s;
      last = v;
    }
  }
  if (last >= 0) {
    size_t mask = full - 1;
    int v = last;
    for (int pos = n - 1; pos >= 1; pos--) {
      order[pos] = v;
      int p = prev[mask * n + v];
      mask &= ~((size_t)1 << v);
      v = p;
    }
    order[0] = 0;
  }
  free(dp);
  free(prev);
  return best;
}

static int cmp_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

static int exact_order(const rr_ring_hosts *h, int *order) {
  const int n = h->n;
  double *cand = malloc((size_t)n * n * sizeof(double));
  int *tmp = malloc((size_t)n * sizeof(int));
  if (cand == NULL || tmp == NULL) {
    free(cand);
    free(tmp);
    return -1;
  }
  int k = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j && bw(h, i, j) > 0.0) cand[k++] = bw(h, i, j);
  qsort(cand, (size_t)k, sizeof(double), cmp_desc);
  /* The largest threshold that still admits a ring: binary search over the
   * candidate values (feasibility only grows as the threshold falls). */
  int lo = 0, hi = k - 1, found = -1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (isfinite(exact_min_sum(h, cand[mid], tmp))) {
      found = mid;
      hi = mid - 1;
    } else {
      lo = mid + 1;
    }
  }
  int rc = -1;
  if (found >= 0 && isfinite(exact_min_sum(h, cand[found], order))) rc = 1;
  free(cand);
  free(tmp);
  return rc;
}

static void eval(const rr_ring_hosts *h, const int *o, double *bn, double *sum) {
  *bn = rr_ring_bottleneck(h, o);
  *sum = rr_ring_inv_sum(h, o);
}

static int heuristic_order(const rr_ring_hosts *h, int *order) {
  const int n = h->n;
  int *cur = malloc((size_t)n * sizeof(int)), *trial = malloc((size_t)n * sizeof(int));
  char *used = malloc((size_t)n);
  if (cur == NULL || trial == NULL || used == NULL) {
    free(cur);
    free(trial);
    free(used);
    return -1;
  }
  double best_bn = -1.0, best_sum = INFINITY;
  int starts = n <= 256 ? n : 16;
  for (int s = 0; s < starts; s++) {
    /* nearest neighbour: the fastest hop out of the current host */
    memset(used, 0, (size_t)n);
    cur[0] = s;
    used[s] = 1;
    for (int pos = 1; pos < n; pos++) {
      int from = cur[pos - 1], pick = -1;
      for (int w = 0; w < n; w++)
        if (!used[w] && (pick < 0 || bw(h, from, w) > bw(h, from, pick))) pick = w;
      cur[pos] = pick;
      used[pick] = 1;
    }
    /* improve: move one host to another place while it helps */
    double bn, sum;
    eval(h, cur, &bn, &sum);
    int improved = n <= 512;
    for (int pass = 0; improved && pass < 50; pass++) {
      improved = 0;
      for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
          if (i == j) continue;
          /* trial = cur with the host at i moved to position j */
          int v = cur[i], k = 0;
          for (int x = 0; x < n; x++) {
            if (x == i) continue;
            if (k == j) trial[k++] = v;
            trial[k++] = cur[x];
          }
          if (k == j) trial[k++] = v;
          double tb, ts;
          eval(h, trial, &tb, &ts);
          if (better(tb, ts, bn, sum)) {
            memcpy(cur, trial, (size_t)n * sizeof(int));
            bn = tb;
            sum = ts;
            improved = 1;
          }
        }
    }
    if (better(bn, sum, best_bn, best_sum)) {
      best_bn = bn;
      best_sum = sum;
      memcpy(order, cur, (size_t)n * sizeof(int));
    }
  }
  free(cur);
  free(trial);
  free(used);
  return best_bn > 0.0 ? 0 : -1;
}

int rr_ring_order_bw(const rr_ring_hosts *h, int *order) {
  if (h->bw == NULL || h->n < 2) return -1;
  if (h->n <= RR_RING_EXACT_MAX) return exact_order(h, order);
  return heuristic_order(h, order);
}

double rr_ring_tor_bottleneck(const rr_ring_hosts *h, const int *order, double nic_gbs,
                              double uplink_gbs) {
  const int n = h->n;
  int *leaving = calloc((size_t)n, sizeof(int)); /* per host index of its rack's first host */
  int *rack = malloc((size_t)n * sizeof(int));
  if (leaving == NULL || rack == NULL) {
    free(leaving);
    free(rack);
    return 0.0;
  }
  for (int i = 0; i < n; i++) {
    rack[i] = i;
    for (int j = 0; j < i; j++)
      if (strcmp(h->tor[j], h->tor[i]) == 0) {
        rack[i] = rack[j];
        break;
      }
  }
  /* Hops leaving each rack (uplinks are full duplex: leaving and entering
   * traffic do not share). */
  for (int i = 0; i < n; i++) {
    int a = order[i], b = order[(i + 1) % n];
    if (rack[a] != rack[b]) leaving[rack[a]]++;
  }
  double worst = nic_gbs;
  for (int i = 0; i < n; i++) {
    int a = order[i], b = order[(i + 1) % n];
    if (rack[a] == rack[b]) continue;
    /* leaving a's rack and entering b's: a ring enters each rack as often
     * as it leaves it, so b's uplink carries leaving[rack[b]] such hops. */
    int busiest = leaving[rack[a]] > leaving[rack[b]] ? leaving[rack[a]] : leaving[rack[b]];
    double share = uplink_gbs / (double)busiest;
    if (share < worst) worst = share;
  }
  free(leaving);
  free(rack);
  return worst;
}
