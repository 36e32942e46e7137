#include "bench_common.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *g_prog = "bench";

void bc_set_prog(const char *prog) {
  const char *slash = strrchr(prog, '/');
  g_prog = slash ? slash + 1 : prog;
}

void bc_die(const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "%s: ", g_prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

void bc_warn(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s: ", g_prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

int bc_parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  unsigned long long mult = 1;
  switch (toupper((unsigned char)*end)) {
  case '\0': break;
  case 'B': end++; break;
  case 'K': mult = 1ull << 10; end++; break;
  case 'M': mult = 1ull << 20; end++; break;
  case 'G': mult = 1ull << 30; end++; break;
  default: return -1;
  }
  if (mult > 1 && (*end == 'i' || *end == 'I')) end++;
  if (mult > 1 && (*end == 'b' || *end == 'B')) end++;
  if (*end != '\0') return -1;
  if (v > SIZE_MAX / mult) return -1;
  *out = (size_t)(v * mult);
  return 0;
}

int bc_parse_int(const char *s, long min, long max, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v < min || v > max) return -1;
  *out = v;
  return 0;
}

int bc_sizes_range(bc_sizes *s, size_t min, size_t max, unsigned factor) {
  s->n = 0;
  if (min == 0 || max < min || factor < 2) return -1;
  for (size_t v = min; v <= max; v *= factor) {
    if (s->n == BC_MAX_SIZES) return -1;
    s->v[s->n++] = v;
    if (v > SIZE_MAX / factor) break;
  }
  return 0;
}

int bc_sizes_list(bc_sizes *s, const char *list) {
  char buf[1024];
  s->n = 0;
  if (strlen(list) >= sizeof(buf)) return -1;
  strcpy(buf, list);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    size_t v;
    if (s->n == BC_MAX_SIZES || bc_parse_size(tok, &v) || v == 0) return -1;
    s->v[s->n++] = v;
  }
  return s->n ? 0 : -1;
}

size_t bc_sizes_max(const bc_sizes *s) {
  size_t m = 0;
  for (int i = 0; i < s->n; i++)
    if (s->v[i] > m) m = s->v[i];
  return m;
}

const char *bc_fmt_size(size_t b, char *buf, size_t len) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0)
    snprintf(buf, len, "%zu GiB", b >> 30);
  else if (b >= (1ull << 20) && b % (1ull << 20) == 0)
    snprintf(buf, len, "%zu MiB", b >> 20);
  else if (b >= (1ull << 10) && b % (1ull << 10) == 0)
    snprintf(buf, len, "%zu KiB", b >> 10);
  else
    snprintf(buf, len, "%zu B", b);
  return buf;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void bc_sort_doubles(double *v, size_t n) { qsort(v, n, sizeof(*v), cmp_double); }

double bc_percentile_sorted(const double *v, size_t n, double p) {
  /* Nearest rank: the smallest value with at least p% of samples <= it. */
  size_t rank = (size_t)((p / 100.0) * (double)n + 0.999999);
  if (rank < 1) rank = 1;
  if (rank > n) rank = n;
  return v[rank - 1];
}

static inline uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void bc_fill_pattern(void *buf, size_t len, uint64_t seed) {
  uint64_t st = seed * 0x2545f4914f6cdd1dull + 1;
  unsigned char *p = buf;
  size_t words = len / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = splitmix64(&st);
    memcpy(p + i * 8, &w, 8);
  }
  if (len % 8) {
    uint64_t w = splitmix64(&st);
    memcpy(p + words * 8, &w, len % 8);
  }
}

uint64_t bc_checksum(const void *buf, size_t len) {
  /* Fletcher-like over 64-bit words: position dependent, cheap. */
  const unsigned char *p = buf;
  uint64_t a = 0x84222325cbf29ce4ull, b = (uint64_t)len;
  size_t words = len / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w;
    memcpy(&w, p + i * 8, 8);
    a += w ^ (uint64_t)i;
    b += a;
    b = (b << 7) | (b >> 57);
  }
  for (size_t i = words * 8; i < len; i++) {
    a += p[i];
    b += a;
  }
  return a ^ (b * 0x100000001b3ull);
}

size_t bc_first_diff(const void *a, const void *b, size_t len) {
  const unsigned char *x = a, *y = b;
  for (size_t i = 0; i < len; i++)
    if (x[i] != y[i]) return i;
  return len;
}

void bc_stamp(void *msg, size_t len, uint64_t seq) {
  unsigned char *p = msg;
  if (len >= 8) memcpy(p, &seq, 8);
  else memcpy(p, &seq, len);
  if (len >= 16) memcpy(p + len - 8, &seq, 8);
}

int bc_stamp_ok(const void *msg, size_t len, uint64_t seq) {
  const unsigned char *p = msg;
  if (len < 8) return memcmp(p, &seq, len) == 0;
  if (memcmp(p, &seq, 8)) return 0;
  if (len >= 16 && memcmp(p + len - 8, &seq, 8)) return 0;
  return 1;
}

void *bc_alloc(size_t len) {
  void *p = NULL;
  if (len == 0) len = 1;
  if (posix_memalign(&p, 4096, len)) return NULL;
  memset(p, 0, len);
  return p;
}

void bc_free(void *p) { free(p); }
