/* tuner_probe: opens an ncclTuner plugin the way NCCL does and drives one
 * communicator's worth of calls, so that a packaged or containerised
 * install can be checked without NCCL or a GPU.
 *
 * NCCL's rules, as far as a probe needs them: NCCL_TUNER_PLUGIN=X is handed
 * to dlopen() as is, then as "libnccl-tuner-X.so"; RTLD_NOW | RTLD_LOCAL;
 * the newest table it knows is bound (v6 for NCCL 2.30, v5 for 2.28). The
 * library is found through the ordinary search path, never a path we give.
 *
 * Checks: init succeeds, getCollInfo leaves the cost table and channel count
 * exactly as NCCL filled them (rerail's tuner must not steer yet), finalize
 * succeeds. Exit 0 and one "tuner_probe: ..." line on success, 1 otherwise. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/tuner_v5.h"
#include "nccl/tuner_v6.h"

static int warnings;

static void probe_logger(nccl_log_level_t level, unsigned long flags, const char *file, int line,
                         const char *fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  if (level == NCCL_LEVEL_WARN) warnings++;
  va_list ap;
  va_start(ap, fmt);
  fputs("tuner_probe: plugin says: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void *open_like_nccl(const char *name) {
  void *dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (dl != NULL) return dl;
  char alt[512];
  if (snprintf(alt, sizeof(alt), "libnccl-tuner-%s.so", name) >= (int)sizeof(alt)) return NULL;
  dl = dlopen(alt, RTLD_NOW | RTLD_LOCAL);
  if (dl == NULL) fprintf(stderr, "tuner_probe: cannot open %s nor %s: %s\n", name, alt, dlerror());
  return dl;
}

int main(void) {
  const char *name = getenv("NCCL_TUNER_PLUGIN");
  if (name == NULL || name[0] == '\0') {
    fprintf(stderr, "tuner_probe: NCCL_TUNER_PLUGIN is not set\n");
    return 1;
  }
  void *dl = open_like_nccl(name);
  if (dl == NULL) return 1;

  /* v6 adds only an optional entry after v5's; both start with v5's layout. */
  const char *version = "v6";
  const nccl_tuner_v5_t *t = dlsym(dl, "ncclTunerPlugin_v6");
  if (t == NULL) {
    version = "v5";
    t = dlsym(dl, "ncclTunerPlugin_v5");
  }
  if (t == NULL || t->init == NULL || t->get_coll_info == NULL || t->finalize == NULL) {
    fprintf(stderr, "tuner_probe: %s exports no usable ncclTunerPlugin_v6 or _v5\n", name);
    return 1;
  }

  static nccl_tuner_constants_v5_t constants;
  nccl_nvl_domain_info_v5_t nvl = {.n_domains = 1, .min_ranks_per_domain = 8, .max_ranks_per_domain = 8};
  void *ctx = NULL;
  if (t->init(&ctx, 0x5eedULL, 16, 2, probe_logger, &nvl, &constants) != NCCL_RESULT_SUCCESS) {
    fprintf(stderr, "tuner_probe: init failed\n");
    return 1;
  }

  float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
  float *rows[NCCL_NUM_ALGORITHMS];
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) {
    rows[a] = table[a];
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) table[a][p] = (float)(10 * a + p + 1);
  }
  float before[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
  memcpy(before, table, sizeof(table));
  int channels = 4;
  nccl_result_t r = t->get_coll_info(ctx, NCCL_FUNC_ALL_REDUCE, 1 << 20, 1, rows, NCCL_NUM_ALGORITHMS,
                                     NCCL_NUM_PROTOCOLS, 0, &channels);
  int changed = memcmp(before, table, sizeof(table)) != 0 || channels != 4;
  if (t->finalize(ctx) != NCCL_RESULT_SUCCESS) {
    fprintf(stderr, "tuner_probe: finalize failed\n");
    return 1;
  }
  if (r != NCCL_RESULT_SUCCESS || changed) {
    fprintf(stderr, "tuner_probe: getCollInfo %s\n", r != NCCL_RESULT_SUCCESS ? "failed" : "changed NCCL's choices");
    return 1;
  }
  if (warnings > 0) {
    fprintf(stderr, "tuner_probe: the plugin warned %d time(s)\n", warnings);
    return 1;
  }
  printf("tuner_probe: %s bound ncclTunerPlugin_%s (\"%s\"): init, getCollInfo, finalize ok\n", name,
         version, t->name != NULL ? t->name : "?");
  dlclose(dl);
  return 0;
}
