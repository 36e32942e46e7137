/* The rules file: parsing with line-numbered messages, and matching
 * (format and semantics in tuner_rules.h). */
#include "tuner_rules.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tuner_ids.h"

#define RULES_MAX_FILE (1u << 20)
#define RULES_MAX_LINE 1024
#define RULES_MAX_FIELDS 16

static const char *const coll_names[RR_NUM_COLLS] = {"broadcast", "reduce", "allgather",
                                                     "reducescatter", "allreduce"};
static const char *const algo_names[RR_NUM_ALGOS] = {
    "tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"};
static const char *const proto_names[RR_NUM_PROTOS] = {"ll", "ll128", "simple"};

const char *rr_rules_coll_name(int c) { return c >= 0 && c < RR_NUM_COLLS ? coll_names[c] : NULL; }
const char *rr_rules_algo_name(int a) { return a >= 0 && a < RR_NUM_ALGOS ? algo_names[a] : NULL; }
const char *rr_rules_proto_name(int p) {
  return p >= 0 && p < RR_NUM_PROTOS ? proto_names[p] : NULL;
}

/* ---- one line's error ------------------------------------------------------ */

typedef struct parse_ctx {
  const char *name;
  int line;
  char *err;
  size_t err_len;
} parse_ctx;

__attribute__((format(printf, 2, 3))) static rr_status fail(parse_ctx *pc, const char *fmt, ...) {
  if (pc->err != NULL && pc->err_len > 0) {
    int n = snprintf(pc->err, pc->err_len, "%s:%d: ", pc->name, pc->line);
    if (n >= 0 && (size_t)n < pc->err_len) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(pc->err + n, pc->err_len - (size_t)n, fmt, ap);
      va_end(ap);
    }
  }
  return RR_ERR_INVALID;
}

/* ---- field parsers ------------------------------------------------------------ */

static int lookup(const char *s, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (strcasecmp(s, names[i]) == 0) return i;
  return -1;
}

/* A signed decimal integer filling the whole field. */
static int parse_int(const char *s, int64_t *out) {
  if (*s == '\0') return -1;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') return -1;
  *out = v;
  return 0;
}

/* Bytes: a decimal count with an optional binary suffix (K, M, G, T, with
 * or without a trailing B or iB). -1 is returned as -1. */
static int parse_bytes(const char *s, int64_t *out) {
  if (strcmp(s, "-1") == 0) {
    *out = -1;
    return 0;
  }
  if (!isdigit((unsigned char)s[0])) return -1;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0) return -1;
  int shift = 0;
  switch (toupper((unsigned char)*end)) {
  case 'K': shift = 10; end++; break;
  case 'M': shift = 20; end++; break;
  case 'G': shift = 30; end++; break;
  case 'T': shift = 40; end++; break;
  default: break;
  }
  if (shift != 0 && (strcasecmp(end, "iB") == 0 || strcasecmp(end, "B") == 0)) end += strlen(end);
  if (*end != '\0') return -1;
  if (v > ((unsigned long long)INT64_MAX >> shift)) return -1;
  *out = (int64_t)(v << shift);
  return 0;
}

/* -1 (anything), N, or A-B with 0 <= A <= B. */
static int parse_range(const char *s, rr_rule_range *r) {
  int64_t v;
  if (parse_int(s, &v) == 0) {
    if (v == -1) {
      r->lo = INT64_MIN;
      r->hi = INT64_MAX;
      return 0;
    }
    if (v < 0) return -1;
    r->lo = r->hi = v;
    return 0;
  }
  const char *dash = strchr(s, '-');
  if (dash == NULL || dash == s) return -1;
  char lo[32];
  size_t n = (size_t)(dash - s);
  if (n >= sizeof(lo)) return -1;
  memcpy(lo, s, n);
  lo[n] = '\0';
  int64_t a, b;
  if (parse_int(lo, &a) != 0 || parse_int(dash + 1, &b) != 0 || a < 0 || b < a) return -1;
  r->lo = a;
  r->hi = b;
  return 0;
}

static int parse_double(const char *s, double *out) {
  if (*s == '\0') return -1;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || *end != '\0' || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

/* ---- lines -------------------------------------------------------------------- */

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
  return s;
}

/* Split on commas in place; returns the field count or -1 when too many. */
static int split(char *line, char **field) {
  int n = 0;
  char *p = line;
  for (;;) {
    if (n == RULES_MAX_FIELDS) return -1;
    char *comma = strchr(p, ',');
    if (comma != NULL) *comma = '\0';
    field[n++] = trim(p);
    if (comma == NULL) return n;
    p = comma + 1;
  }
}

static const rr_rule_range range_any = {INT64_MIN, INT64_MAX};

static rr_status parse_net(parse_ctx *pc, char **f, int nf, rr_rules *out) {
  if (out->net.present) return fail(pc, "a second @net line (one describes the network)");
  rr_rules_net net = {.present = 1, .nics = 0, .gbps = 0.0, .lat_us = -1.0};
  for (int i = 1; i < nf; i++) {
    char *eq = strchr(f[i], '=');
    if (eq == NULL) return fail(pc, "@net field '%s' is not key=value", f[i]);
    *eq = '\0';
    const char *key = trim(f[i]), *val = trim(eq + 1);
    int64_t iv;
    double dv;
    if (strcmp(key, "nics") == 0) {
      if (parse_int(val, &iv) != 0 || iv < 1 || iv > 64)
        return fail(pc, "@net nics='%s': expected 1..64 NICs per host", val);
      net.nics = (int)iv;
    } else if (strcmp(key, "gbps") == 0) {
      if (parse_double(val, &dv) != 0 || dv <= 0.0 || dv > 1e5)
        return fail(pc, "@net gbps='%s': expected a line rate in Gbit/s (0 < gbps <= 100000)", val);
      net.gbps = dv;
    } else if (strcmp(key, "lat_us") == 0) {
      if (parse_double(val, &dv) != 0 || dv < 0.0 || dv > 1e6)
        return fail(pc, "@net lat_us='%s': expected a latency in microseconds (0..1000000)", val);
      net.lat_us = dv;
    } else {
      return fail(pc, "@net: unknown key '%s' (known: nics, gbps, lat_us)", key);
    }
  }
  if (net.nics == 0 || net.gbps == 0.0 || net.lat_us < 0.0)
    return fail(pc, "@net needs nics=, gbps= and lat_us=");
  out->net = net;
  return RR_OK;
}

static rr_status parse_rule(parse_ctx *pc, char **f, int nf, rr_rule *r) {
  if (nf < 8)
    return fail(pc, "%d field%s; a rule needs at least 8: collective,min_bytes,max_bytes,"
                "algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]",
                nf, nf == 1 ? "" : "s");
  memset(r, 0, sizeof(*r));
  r->line = pc->line;
  r->pipe_ops = r->reg_buff = r->rails_down = range_any;
  r->chunk = RR_RULE_KEEP;

  if (strcmp(f[0], "*") == 0) r->coll = RR_RULE_ANY_COLL;
  else if ((r->coll = lookup(f[0], coll_names, RR_NUM_COLLS)) < 0)
    return fail(pc, "unknown collective '%s' (broadcast, reduce, allgather, reducescatter, "
                "allreduce, *)", f[0]);

  int64_t lo, hi;
  if (parse_bytes(f[1], &lo) != 0 || lo < 0)
    return fail(pc, "min_bytes '%s' is not a byte count", f[1]);
  if (parse_bytes(f[2], &hi) != 0) return fail(pc, "max_bytes '%s' is not a byte count", f[2]);
  r->min_bytes = (uint64_t)lo;
  r->max_bytes = hi < 0 ? UINT64_MAX : (uint64_t)hi;
  if (r->max_bytes < r->min_bytes)
    return fail(pc, "max_bytes %s is below min_bytes %s", f[2], f[1]);

  if (strcasecmp(f[3], "keep") == 0 || strcmp(f[3], "-") == 0) r->algo = RR_RULE_KEEP;
  else if ((r->algo = lookup(f[3], algo_names, RR_NUM_ALGOS)) < 0)
    return fail(pc, "unknown algorithm '%s' (tree, ring, collnet_direct, collnet_chain, nvls, "
                "nvls_tree, pat, keep)", f[3]);
  if (strcasecmp(f[4], "keep") == 0 || strcmp(f[4], "-") == 0) r->proto = RR_RULE_KEEP;
  else if ((r->proto = lookup(f[4], proto_names, RR_NUM_PROTOS)) < 0)
    return fail(pc, "unknown protocol '%s' (ll, ll128, simple, keep)", f[4]);

  int64_t ch;
  if (parse_int(f[5], &ch) != 0 || ch == 0 || ch < -1 || ch > 64)
    return fail(pc, "channels '%s': expected 1..64, or -1 to keep NCCL's count", f[5]);
  r->channels = (int)ch;

  if (parse_range(f[6], &r->nodes) != 0)
    return fail(pc, "nNodes '%s': expected -1, N or A-B", f[6]);
  if (parse_range(f[7], &r->ranks) != 0)
    return fail(pc, "nRanks '%s': expected -1, N or A-B", f[7]);

  /* Positional optional fields, then key=value extensions. */
  int i = 8;
  if (i < nf && strchr(f[i], '=') == NULL) {
    if (parse_range(f[i], &r->pipe_ops) != 0)
      return fail(pc, "numPipeOps '%s': expected -1, N or A-B", f[i]);
    i++;
  }
  if (i < nf && strchr(f[i], '=') == NULL) {
    if (parse_range(f[i], &r->reg_buff) != 0 ||
        (r->reg_buff.lo != INT64_MIN && (r->reg_buff.lo < 0 || r->reg_buff.hi > 1)))
      return fail(pc, "regBuff '%s': expected 0, 1 or -1", f[i]);
    i++;
  }
  int seen_rails = 0, seen_chunk = 0;
  for (; i < nf; i++) {
    char *eq = strchr(f[i], '=');
    if (eq == NULL)
      return fail(pc, "field %d '%s': after regBuff only key=value fields (rails_down=, chunk=)",
                  i + 1, f[i]);
    *eq = '\0';
    const char *key = trim(f[i]), *val = trim(eq + 1);
    if (strcmp(key, "rails_down") == 0) {
      if (seen_rails++) return fail(pc, "rails_down given twice");
      if (parse_range(val, &r->rails_down) != 0 ||
          (r->rails_down.hi != INT64_MAX && r->rails_down.hi > 64))
        return fail(pc, "rails_down='%s': expected N or A-B (0..64), or -1", val);
    } else if (strcmp(key, "chunk") == 0) {
      if (seen_chunk++) return fail(pc, "chunk given twice");
      int64_t c;
      if (parse_bytes(val, &c) != 0 || c == 0 || (c > 0 && c < 512) || c > ((int64_t)1 << 30))
        return fail(pc, "chunk='%s': expected 512..1G bytes, or -1 to keep NCCL's", val);
      r->chunk = c;
    } else {
      return fail(pc, "unknown key '%s' (rerail knows rails_down, chunk)", key);
    }
  }
  if (r->algo == RR_RULE_KEEP && r->proto == RR_RULE_KEEP && r->channels == RR_RULE_KEEP &&
      r->chunk == RR_RULE_KEEP)
    return fail(pc, "the rule changes nothing (algorithm, protocol, channels and chunk all kept)");
  return RR_OK;
}

rr_status rr_rules_parse(const char *text, const char *name, rr_rules *out, char *err,
                         size_t err_len) {
  if (err != NULL && err_len > 0) err[0] = '\0';
  if (out == NULL) return RR_ERR_INVALID;
  memset(out, 0, sizeof(*out));
  parse_ctx pc = {.name = name != NULL ? name : "rules", .line = 0, .err = err,
                  .err_len = err_len};
  if (text == NULL) return fail(&pc, "no text");
  rr_status st = RR_OK;
  const char *p = text;
  while (*p != '\0' && st == RR_OK) {
    pc.line++;
    const char *nl = strchr(p, '\n');
    size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
    if (len >= RULES_MAX_LINE) {
      st = fail(&pc, "line longer than %d characters", RULES_MAX_LINE - 1);
      break;
    }
    char buf[RULES_MAX_LINE];
    memcpy(buf, p, len);
    buf[len] = '\0';
    p = nl != NULL ? nl + 1 : p + len;
    char *line = trim(buf);
    if (*line == '\0' || *line == '#') continue;
    char *f[RULES_MAX_FIELDS];
    int nf = split(line, f);
    if (nf < 0) {
      st = fail(&pc, "more than %d fields", RULES_MAX_FIELDS);
    } else if (strcasecmp(f[0], "@net") == 0) {
      st = parse_net(&pc, f, nf, out);
    } else if (out->count == RR_RULES_MAX) {
      st = fail(&pc, "more than %d rules", RR_RULES_MAX);
    } else {
      st = parse_rule(&pc, f, nf, &out->rule[out->count]);
      if (st == RR_OK) out->count++;
    }
  }
  if (st != RR_OK) {
    out->count = 0;
    out->net.present = 0;
  }
  return st;
}

rr_status rr_rules_load(const char *path, rr_rules *out, char *err, size_t err_len) {
  if (out != NULL) memset(out, 0, sizeof(*out));
  if (path == NULL || out == NULL) return RR_ERR_INVALID;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    snprintf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
    return RR_ERR_SYSTEM;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > (off_t)RULES_MAX_FILE) {
    snprintf(err, err_len, "%s: not a regular file of at most %u bytes", path, RULES_MAX_FILE);
    close(fd);
    return RR_ERR_INVALID;
  }
  char *text = malloc((size_t)sb.st_size + 1);
  if (text == NULL) {
    close(fd);
    snprintf(err, err_len, "%s: out of memory", path);
    return RR_ERR_NOMEM;
  }
  size_t got = 0;
  while (got < (size_t)sb.st_size) {
    ssize_t n = read(fd, text + got, (size_t)sb.st_size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fd);
  text[got] = '\0';
  rr_status st;
  if (strlen(text) != got) {
    snprintf(err, err_len, "%s: contains NUL bytes (not a text file)", path);
    st = RR_ERR_INVALID;
  } else {
    st = rr_rules_parse(text, path, out, err, err_len);
  }
  free(text);
  return st;
}

static int in_range(const rr_rule_range *r, int64_t v) { return v >= r->lo && v <= r->hi; }

const rr_rule *rr_rules_match(const rr_rules *rules, const rr_rule_query *q) {
  if (rules == NULL || q == NULL) return NULL;
  for (int i = 0; i < rules->count; i++) {
    const rr_rule *r = &rules->rule[i];
    if (r->coll != RR_RULE_ANY_COLL && r->coll != q->coll) continue;
    if (q->nbytes < r->min_bytes || q->nbytes > r->max_bytes) continue;
    if (!in_range(&r->nodes, q->nodes) || !in_range(&r->ranks, q->ranks)) continue;
    if (!q->shape_unknown &&
        (!in_range(&r->pipe_ops, q->pipe_ops) || !in_range(&r->reg_buff, q->reg_buff)))
      continue;
    if (!in_range(&r->rails_down, q->rails_down)) continue;
    return r;
  }
  return NULL;
}
