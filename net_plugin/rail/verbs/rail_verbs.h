/* The verbs rail: one endpoint is RERAIL_IB_QPS_PER_RAIL RC queue pairs
 * (one by default) on one HCA port (InfiniBand or RoCE). Chunks are RDMA
 * WRITE WITH IMMEDIATE straight into the receive buffer NCCL posted (zero
 * copy); control messages are RDMA WRITEs into a ring in the peer's memory
 * (verbs_ring.h); drain barriers are SENDs, delivered behind every write
 * posted before them. One CQ per device serves all its endpoints.
 *
 * Same shape as the TCP rail: rail_verbs.c is the endpoint layer (with
 * verbs_ep_setup.c, verbs_post.c, verbs_ctrl.c, verbs_progress.c; verbs_ep.h),
 * verbs_hca.c the device layer (protection domain, shared CQ, registration
 * cache, async events), verbs_lib.c the run-time binding of libibverbs,
 * verbs_dev.c/verbs_select.c the discovery of usable ports. */
#ifndef RERAIL_RAIL_VERBS_H
#define RERAIL_RAIL_VERBS_H
#include <pthread.h>
#include <stdint.h>

#include "rail.h"
#include "verbs_addr.h"
#include "verbs_dev.h"
#include "verbs_lib.h"

extern const rr_rail_ops rr_verbs_rail_ops;
/* The transport (verbs_transport.c): every usable RDMA port is a device. */
extern const rr_rail_transport rr_verbs_transport;

/* Open the port described by `port` (from rr_verbs_discover) as rerail
 * device `index`. */
rr_status rr_verbs_dev_open(int index, const rr_verbs_port *port, rr_rail_dev **dev);

/* ibv_reg_mr calls made for buffers rerail was asked to register (a
 * failover must make none). An endpoint's own control ring is registered
 * when the endpoint opens: at connect, and when a failed rail is reopened,
 * never on the way to the backup. */
uint64_t rr_verbs_reg_calls(void);


/* ---- between verbs_hca.c and the endpoint (rail_verbs.c, verbs_ep.h) ---- */

typedef struct verbs_ep verbs_ep;

/* Completions polled from the device's CQ wait here for their endpoint's
 * own progress (under the device lock); sized for everything an endpoint
 * can have outstanding, so it never overflows. */
#define VERBS_SQ_DEPTH 256
#define VERBS_RQ_DEPTH 512

typedef struct verbs_hca {
  rr_rail_dev base;
  const rr_ibv_api *api;
  rr_verbs_port port;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  pthread_mutex_t lock;      /* the CQ, the endpoint list and every inbox */
  verbs_ep **eps;            /* endpoints with a QP, looked up by QP number */
  int neps, cap_eps;
  struct verbs_mr_entry *mrs; /* registration cache */
  int port_down;             /* the last async event said so */
  /* The flush QP (verbs_flush.c): made on the first flush, shared by every
   * connection on the device, under its own lock (never the device lock). */
  pthread_mutex_t flush_lock;
  struct verbs_flusher *flusher;
} verbs_hca;

typedef struct verbs_inbox {
  struct ibv_wc *wc;         /* cap entries: every QP's send and receive queue, full */
  uint32_t cap, head, tail;
} verbs_inbox;

/* Register / unregister an endpoint's QP for completion dispatch. */
rr_status verbs_hca_attach(verbs_hca *h, verbs_ep *ep);
void verbs_hca_detach(verbs_hca *h, verbs_ep *ep);
/* Poll the CQ and file completions into their endpoints' inboxes. */
rr_status verbs_hca_poll(verbs_hca *h);
/* The inbox, QPs and QP numbers of an endpoint (verbs_ep.h defines the struct). */
verbs_inbox *verbs_ep_inbox(verbs_ep *ep);
int verbs_ep_nqps(const verbs_ep *ep);
int verbs_ep_has_qpn(const verbs_ep *ep, uint32_t qpn);
/* An async event (QP fatal, CQ error, device fatal) concerning ep: the
 * endpoint fails with RR_ERR_RAIL on its next progress or post. Thread safe
 * (the monitor thread calls it, the endpoint's owner acts on it). */
void verbs_ep_async_error(verbs_ep *ep, enum ibv_event_type t);

rr_status verbs_reg_mr(rr_rail_dev *dev, void *base, size_t len, uint32_t kind, int dmabuf_fd,
                       uint64_t dmabuf_offset, rr_rail_mr **mr);
void verbs_dereg_mr(rr_rail_mr *mr);
rr_status verbs_dev_progress(rr_rail_dev *dev);
rr_rail_dev_event_kind verbs_dev_event(rr_rail_dev *dev, rr_rail_dev_event *ev);
void verbs_dev_close(rr_rail_dev *dev);
/* The memory kinds (enum rr_mem_kind) a device registers: host, CUDA with
 * GPUDirect RDMA's module loaded (under sysfs_root), DMA-BUF when the probe
 * registration says the kernel and provider can. */
uint32_t verbs_mem_kinds(const rr_ibv_api *api, struct ibv_context *ctx, const char *sysfs_root);
/* Where the verbs rail reads sysfs in production ("/sys"); tests pass a fake
 * tree to the functions that take a root. */
const char *rr_verbs_sysfs_root(void);

/* verbs_flush.c: flushes of GPU memory by an RDMA READ on a QP connected to
 * itself (rr_rail_ops flush_*); verbs_flush_close releases the flush QP. */
rr_status verbs_flush_post(rr_rail_dev *dev, const rr_rail_mr *mr, const void *addr, rr_rail_flush *f);
void verbs_flush_poll(rr_rail_dev *dev);
void verbs_flush_abandon(rr_rail_dev *dev, rr_rail_flush *f);
void verbs_flush_close(verbs_hca *h);
/* Flush reads completed, and failed, in this process (tests, logs). */
uint64_t rr_verbs_flush_reads(void);
uint64_t rr_verbs_flush_failures(void);

/* verbs_events.c: the port's GID table changed (IBV_EVENT_GID_CHANGE):
 * choose its GID again as discovery does (sysfs under sysfs_root, else
 * libibverbs), for the endpoints opened from now on; the flush QP is made
 * again. The old GID stays when none qualifies (RR_ERR_RAIL) or the port
 * cannot be read (RR_ERR_SYSTEM). Monitor thread only (dev_event). */
rr_status verbs_gid_refresh(verbs_hca *h, const char *sysfs_root);

#endif
