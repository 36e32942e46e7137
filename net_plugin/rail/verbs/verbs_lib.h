/* libibverbs, opened at run time.
 *
 * The plugin never links libibverbs: a host without rdma-core must still load the plugin and
 * run TCP. rr_ibv_load() dlopen()s "libibverbs.so.1" once and resolves every entry point
 * rerail calls into one table. Use the table for every exported verbs function; the data-path
 * calls that verbs.h defines as static inlines over the context's ops (ibv_post_send,
 * ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) reference no symbol and may be called
 * directly. Never call the verbs.h macros that expand to exported symbols (ibv_query_port,
 * ibv_reg_mr, ibv_query_gid_ex, ...): rr_ibv_query_port() stands in for the first, the table's
 * reg_mr for the second. The plugin links with --no-undefined, so a stray use fails the build. */
#ifndef RERAIL_VERBS_LIB_H
#define RERAIL_VERBS_LIB_H
#include <infiniband/verbs.h>

#include "rr_status.h"

struct _compat_ibv_port_attr;

typedef struct rr_ibv_api {
  struct ibv_device **(*get_device_list)(int *num);
  void (*free_device_list)(struct ibv_device **list);
  const char *(*get_device_name)(struct ibv_device *dev);
  struct ibv_context *(*open_device)(struct ibv_device *dev);
  int (*close_device)(struct ibv_context *ctx);
  int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
  /* The exported symbol behind verbs.h's ibv_query_port() macro, which takes the old,
   * shorter port attribute layout: call rr_ibv_query_port() instead. */
  int (*query_port_compat)(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr);
  int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
  int (*dealloc_pd)(struct ibv_pd *pd);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
  int (*dereg_mr)(struct ibv_mr *mr);
  struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
  int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
  struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context,
                              struct ibv_comp_channel *ch, int comp_vector);
  int (*destroy_cq)(struct ibv_cq *cq);
  int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
  void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
  struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
  int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
  int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
                  struct ibv_qp_init_attr *init);
  int (*destroy_qp)(struct ibv_qp *qp);
  int (*get_async_event)(struct ibv_context *ctx, struct ibv_async_event *ev);
  void (*ack_async_event)(struct ibv_async_event *ev);
  const char *(*event_type_str)(enum ibv_event_type t);
  const char *(*wc_status_str)(enum ibv_wc_status s);
  /* Optional (NULL when this libibverbs predates them). */
  struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
                                 unsigned int access);
  struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
                                  int fd, int access);
  int (*fork_init)(void);
} rr_ibv_api;

/* The process-wide table, loaded on first call (thread safe); NULL when libibverbs is absent
 * or lacks a required entry point (reported once at INFO: the plugin then has no verbs
 * devices and runs TCP). */
const rr_ibv_api *rr_ibv_load(void);

/* Open the library named soname and fill *api: RR_ERR_UNSUPPORTED (with *why set to a
 * static or dlerror() text) when it cannot be opened or misses a required entry point.
 * For rr_ibv_load() and tests; the handle is never closed (providers stay loaded). */
rr_status rr_ibv_open(const char *soname, rr_ibv_api *api, const char **why);

/* Do registrations ask for PCIe relaxed ordering (IBV_ACCESS_RELAXED_ORDERING, through
 * ibv_reg_mr_iova2 for memory by address)? As NCCL decides it: RERAIL_IB_PCI_RELAXED_ORDERING
 * (default NCCL_IB_PCI_RELAXED_ORDERING, else 2) is 1 or 2 and this libibverbs has
 * ibv_reg_mr_iova2 (IBVERBS_1.8, the version that defines the flag). A device that cannot do
 * relaxed ordering ignores the flag: libibverbs passes it as an optional access bit. */
int rr_ibv_relaxed_ordering(const rr_ibv_api *api);

/* ibv_query_port() as verbs.h defines it: the provider's extended query when the context
 * has one (the full struct), else the exported compat entry point. */
int rr_ibv_query_port(const rr_ibv_api *api, struct ibv_context *ctx, uint8_t port,
                      struct ibv_port_attr *attr);

#endif
