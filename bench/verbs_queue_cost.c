/* What a provider's queues cost a process in resident memory, one kind of
 * object at a time: N completion queues of a given depth, or N RC queue
 * pairs of given send/receive depths and inline capacity, created on one
 * device, and the growth of the process's resident memory read from its
 * page tables (rss_now says why not VmRSS), split into anonymous and the
 * rest (where a provider that maps its rings from the kernel, as rxe does,
 * shows them), divided by N. Used by bench/verbs_queue_cost.sh to say which
 * of an endpoint's sizes costs what (docs/memory_per_connection.md).
 *
 * usage: verbs-queue-cost DEVICE N cq DEPTH
 *        verbs-queue-cost DEVICE N qp SEND_DEPTH RECV_DEPTH INLINE
 * prints one line: "<what> per object: rss KIB file KIB anon KIB (granted ...)". */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rss_sample {
  long rss, file, anon; /* KiB */
} rss_sample;

/* From the page tables (smaps_rollup), not VmRSS: a kernel with split RSS
 * counting (before 6.2) adds a thread's page insertions to VmRSS only every
 * 64 page faults, and mapping a provider's rings faults nothing. */
static int rss_now(rss_sample *s) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  if (!f) return -1;
  char line[256];
  *s = (rss_sample){-1, -1, -1};
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "Rss:", 4)) s->rss = atol(line + 4);
    else if (!strncmp(line, "Anonymous:", 10)) s->anon = atol(line + 10);
  }
  if (s->rss >= 0 && s->anon >= 0) s->file = s->rss - s->anon;
  fclose(f);
  return s->rss < 0 ? -1 : 0;
}

static struct ibv_context *open_named(const char *name) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  struct ibv_context *ctx = NULL;
  for (int i = 0; list && i < n && !ctx; i++)
    if (!strcmp(ibv_get_device_name(list[i]), name)) ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  return ctx;
}

static void print_growth(const char *what, const rss_sample *a, const rss_sample *b, int n) {
  printf("%s per object: rss %.1f KiB file %.1f KiB anon %.1f KiB\n", what, (double)(b->rss - a->rss) / n,
         (double)(b->file - a->file) / n, (double)(b->anon - a->anon) / n);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s DEVICE N cq DEPTH | DEVICE N qp SEND RECV INLINE\n", argv[0]);
    return 2;
  }
  int n = atoi(argv[2]);
  int is_qp = !strcmp(argv[3], "qp");
  if (n < 1 || (is_qp && argc < 7)) return 2;
  struct ibv_context *ctx = open_named(argv[1]);
  struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
  if (!pd) {
    fprintf(stderr, "cannot open %s\n", argv[1]);
    return 1;
  }
  /* The QPs' CQ is made before the first sample: only the QPs are counted. */
  struct ibv_cq *shared = is_qp ? ibv_create_cq(ctx, 1, NULL, NULL, 0) : NULL;
  if (is_qp && !shared) return 1;
  void **objs = calloc((size_t)n, sizeof *objs);
  if (!objs) return 1;
  rss_sample before, after;
  if (rss_now(&before)) return 1;
  char what[128];
  uint32_t granted_inline = 0;
  for (int i = 0; i < n; i++) {
    if (!is_qp) {
      objs[i] = ibv_create_cq(ctx, atoi(argv[4]), NULL, NULL, 0);
    } else {
      struct ibv_qp_init_attr qa = {.send_cq = shared, .recv_cq = shared, .qp_type = IBV_QPT_RC,
                                    .cap = {.max_send_wr = (uint32_t)atoi(argv[4]), .max_recv_wr = (uint32_t)atoi(argv[5]),
                                            .max_send_sge = 1, .max_recv_sge = 1,
                                            .max_inline_data = (uint32_t)atoi(argv[6])}};
      objs[i] = ibv_create_qp(pd, &qa);
      granted_inline = qa.cap.max_inline_data;
    }
    if (!objs[i]) {
      fprintf(stderr, "object %d: creation failed\n", i);
      return 1;
    }
  }
  if (rss_now(&after)) return 1;
  if (is_qp)
    snprintf(what, sizeof what, "qp send %s recv %s inline %s (granted %u)", argv[4], argv[5], argv[6], granted_inline);
  else
    snprintf(what, sizeof what, "cq %s", argv[4]);
  print_growth(what, &before, &after, n);
  for (int i = 0; i < n; i++) is_qp ? (void)ibv_destroy_qp(objs[i]) : (void)ibv_destroy_cq(objs[i]);
  if (shared) ibv_destroy_cq(shared);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  free(objs);
  return 0;
}
