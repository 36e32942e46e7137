/* Fingerprints of a rank's inputs (tuner_inputs.h): FNV-1a over each
 * value in a fixed width, so that equal inputs hash alike on every host. */
#include "tuner_inputs.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef struct fnv {
  uint64_t h;
} fnv;

static void fnv_init(fnv *f) { f->h = 0xcbf29ce484222325ull; }

static void fnv_u64(fnv *f, uint64_t v) {
  for (int i = 0; i < 8; i++) {
    f->h ^= (v >> (8 * i)) & 0xffu;
    f->h *= 0x100000001b3ull;
  }
}

static void fnv_i64(fnv *f, int64_t v) { fnv_u64(f, (uint64_t)v); }

static void fnv_double(fnv *f, double v) {
  uint64_t bits;
  if (v == 0.0) v = 0.0; /* -0.0 and 0.0 are the same input */
  memcpy(&bits, &v, sizeof(bits));
  fnv_u64(f, bits);
}

static void fnv_range(fnv *f, rr_rule_range r) {
  fnv_i64(f, r.lo);
  fnv_i64(f, r.hi);
}

/* Every field a match or a choice reads; not the line it came from. */
static uint64_t rules_fp(const rr_rules *r) {
  fnv f;
  fnv_init(&f);
  fnv_i64(&f, r != NULL ? r->count : -1);
  for (int i = 0; r != NULL && i < r->count && i < RR_RULES_MAX; i++) {
    const rr_rule *x = &r->rule[i];
    fnv_i64(&f, x->coll);
    fnv_u64(&f, x->min_bytes);
    fnv_u64(&f, x->max_bytes);
    fnv_i64(&f, x->algo);
    fnv_i64(&f, x->proto);
    fnv_i64(&f, x->channels);
    fnv_range(&f, x->nodes);
    fnv_range(&f, x->ranks);
    fnv_range(&f, x->pipe_ops);
    fnv_range(&f, x->reg_buff);
    fnv_range(&f, x->rails_down);
    fnv_i64(&f, x->chunk);
  }
  return f.h;
}

static uint64_t net_fp(const rr_rules *r) {
  fnv f;
  fnv_init(&f);
  const int present = r != NULL && r->net.present;
  fnv_i64(&f, present);
  if (present) {
    fnv_i64(&f, r->net.nics);
    fnv_double(&f, r->net.gbps);
    fnv_double(&f, r->net.lat_us);
  }
  return f.h;
}

void rr_tuner_inputs_fingerprint(const rr_tuner_input_args *in, uint64_t fp[RR_AGREE_INPUT_KINDS]) {
  fp[RR_INPUT_RULES] = rules_fp(in->rules);
  fp[RR_INPUT_NET] = net_fp(in->rules);
  fnv f;
  fnv_init(&f);
  fnv_i64(&f, in->n_settings);
  for (int i = 0; i < in->n_settings; i++) fnv_u64(&f, in->settings[i]);
  fp[RR_INPUT_SETTINGS] = f.h;
  fnv_init(&f);
  fnv_i64(&f, in->abi_version);
  fnv_i64(&f, in->nccl_version);
  fnv_i64(&f, in->nccl_latencies != NULL);
  for (int a = 0; in->nccl_latencies != NULL && a < RR_NUM_ALGOS; a++)
    for (int p = 0; p < RR_NUM_PROTOS; p++) fnv_double(&f, in->nccl_latencies[a][p]);
  fp[RR_INPUT_NCCL] = f.h;
  fnv_init(&f);
  fnv_u64(&f, in->n_ranks);
  fnv_u64(&f, in->n_nodes);
  fnv_i64(&f, in->nvl_domains);
  fp[RR_INPUT_SHAPE] = f.h;
}

void rr_tuner_inputs_describe(uint32_t mask, char *out, size_t len) {
  static const char *const names[RR_AGREE_INPUT_KINDS] = {
      [RR_INPUT_RULES] = "rules (RERAIL_TUNER_CONFIG)",
      [RR_INPUT_NET] = "@net line",
      [RR_INPUT_SETTINGS] = "RERAIL_TUNER_AGREE_* settings",
      [RR_INPUT_NCCL] = "NCCL version, tuner ABI or NCCL's network latencies",
      [RR_INPUT_SHAPE] = "ranks, nodes or NVLink domains"};
  size_t n = 0;
  if (len == 0) return;
  out[0] = '\0';
  for (int k = 0; k < RR_AGREE_INPUT_KINDS; k++) {
    if (!(mask & (1u << k))) continue;
    int w = snprintf(out + n, len - n, "%s%s", n > 0 ? ", " : "", names[k]);
    if (w < 0 || (size_t)w >= len - n) return;
    n += (size_t)w;
  }
}

int rr_tuner_nccl_version(void) {
  /* NCCL exports ncclGetVersion; the tuner is loaded into NCCL's process,
   * so look it up there rather than linking against any NCCL. */
  typedef int (*get_version_fn)(int *);
  get_version_fn fn;
  void *sym = dlsym(RTLD_DEFAULT, "ncclGetVersion");
  if (sym == NULL) return 0;
  memcpy(&fn, &sym, sizeof(fn));
  int v = 0;
  return fn(&v) == 0 ? v : 0;
}
