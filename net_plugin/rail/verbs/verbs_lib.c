#include "verbs_lib.h"
#include "rr_counters.h"
#include "rr_log.h"
#include "rr_params.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#define RR_IBV_SONAME "libibverbs.so.1"

/* Each table slot and the symbol it comes from; optional ones may be missing. */
static const struct {
  const char *sym;
  size_t off;
  int optional;
} ibv_syms[] = {
#define REQ(field, sym) {sym, offsetof(rr_ibv_api, field), 0}
#define OPT(field, sym) {sym, offsetof(rr_ibv_api, field), 1}
    REQ(get_device_list, "ibv_get_device_list"),
    REQ(free_device_list, "ibv_free_device_list"),
    REQ(get_device_name, "ibv_get_device_name"),
    REQ(open_device, "ibv_open_device"),
    REQ(close_device, "ibv_close_device"),
    REQ(query_device, "ibv_query_device"),
    REQ(query_port_compat, "ibv_query_port"),
    REQ(query_gid, "ibv_query_gid"),
    REQ(alloc_pd, "ibv_alloc_pd"),
    REQ(dealloc_pd, "ibv_dealloc_pd"),
    REQ(reg_mr, "ibv_reg_mr"),
    REQ(dereg_mr, "ibv_dereg_mr"),
    REQ(create_comp_channel, "ibv_create_comp_channel"),
    REQ(destroy_comp_channel, "ibv_destroy_comp_channel"),
    REQ(create_cq, "ibv_create_cq"),
    REQ(destroy_cq, "ibv_destroy_cq"),
    REQ(get_cq_event, "ibv_get_cq_event"),
    REQ(ack_cq_events, "ibv_ack_cq_events"),
    REQ(create_qp, "ibv_create_qp"),
    REQ(modify_qp, "ibv_modify_qp"),
    REQ(query_qp, "ibv_query_qp"),
    REQ(destroy_qp, "ibv_destroy_qp"),
    REQ(get_async_event, "ibv_get_async_event"),
    REQ(ack_async_event, "ibv_ack_async_event"),
    REQ(event_type_str, "ibv_event_type_str"),
    REQ(wc_status_str, "ibv_wc_status_str"),
    OPT(reg_mr_iova2, "ibv_reg_mr_iova2"),
    OPT(reg_dmabuf_mr, "ibv_reg_dmabuf_mr"),
    OPT(fork_init, "ibv_fork_init"),
#undef REQ
#undef OPT
};

rr_status rr_ibv_open(const char *soname, rr_ibv_api *api, const char **why) {
  memset(api, 0, sizeof *api);
  *why = NULL;
  void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    *why = e ? e : "dlopen failed";
    return RR_ERR_UNSUPPORTED;
  }
  for (size_t i = 0; i < sizeof ibv_syms / sizeof ibv_syms[0]; i++) {
    void *fn = dlsym(h, ibv_syms[i].sym);
    if (!fn && !ibv_syms[i].optional) {
      *why = ibv_syms[i].sym;
      memset(api, 0, sizeof *api);
      /* Leave it loaded: closing a half-initialized libibverbs gains nothing. */
      return RR_ERR_UNSUPPORTED;
    }
    /* Function pointers all share one representation on the platforms NCCL runs on. */
    memcpy((char *)api + ibv_syms[i].off, &fn, sizeof fn);
  }
  return RR_OK;
}

static rr_ibv_api the_api;
static const rr_ibv_api *the_api_ptr;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* As NCCL does when it initialises its IB devices: ibv_fork_init once,
 * before any memory is registered (it must precede the first registration,
 * or it fails with EINVAL), so that a process that forks (a data loader, a
 * compiler, a shell-out) does not hand its child pages the NIC writes into.
 * On a kernel with copy-on-fork for pinned pages (5.13+) libibverbs makes it
 * a no-op; RDMAV_FORK_SAFE / IBV_FORK_SAFE in the environment have
 * libibverbs do the same at its own start, and then this call finds it done.
 * A failure is reported and nothing else changes, as in NCCL. */
static void fork_init(const rr_ibv_api *api) {
  if (!api->fork_init) return;
  int rc = api->fork_init();
  if (rc != 0)
    RR_WARN("rerail: ibv_fork_init failed (%d): memory the NIC uses may be shared with forked children", rc);
}

static void load(void) {
  const char *why;
  rr_status s = rr_ibv_open(RR_IBV_SONAME, &the_api, &why);
  if (s == RR_OK) {
    fork_init(&the_api);
    the_api_ptr = &the_api;
    RR_INFO(RR_SUB_INIT | RR_SUB_NET, "rerail: %s loaded; PCIe relaxed ordering for registrations: %s",
            RR_IBV_SONAME, rr_ibv_relaxed_ordering(&the_api) ? "on" : "off");
    return;
  }
  rr_counter_inc(RR_CTR_VERBS_LIB_UNUSABLE);
  RR_INFO(RR_SUB_INIT | RR_SUB_NET, "rerail: %s unusable (%s): no verbs devices, rails use TCP",
          RR_IBV_SONAME, why ? why : "unknown reason");
}

const rr_ibv_api *rr_ibv_load(void) {
  pthread_once(&load_once, load);
  return the_api_ptr;
}

int rr_ibv_query_port(const rr_ibv_api *api, struct ibv_context *ctx, uint8_t port,
                      struct ibv_port_attr *attr) {
  /* What verbs.h's inline does, without naming the exported symbol from this object. */
  struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx) return vctx->query_port(ctx, port, attr, sizeof *attr);
  memset(attr, 0, sizeof *attr);
  return api->query_port_compat(ctx, port, (struct _compat_ibv_port_attr *)attr);
}

int rr_ibv_relaxed_ordering(const rr_ibv_api *api) {
  int mode = rr_params_get()->ib_relaxed_ordering;
  return (mode == 1 || mode == 2) && api->reg_mr_iova2 != NULL;
}
