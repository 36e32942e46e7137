/* The verbs rail: one endpoint is RERAIL_IB_QPS_PER_RAIL RC queue pairs
 * (one by default) on one HCA port (InfiniBand or RoCE). Chunks are RDMA
 * WRITE WITH IMMEDIATE straight into the receive buffer NCCL posted (zero
 * copy); control messages are RDMA WRITEs into a ring in the peer's memory
 * (verbs_ring.h); drain barriers are SENDs, delivered behind every write
 * posted before them. Each endpoint polls its own completion queue.
 *
 * Same shape as the TCP rail: rail_verbs.c is the endpoint layer (with
 * verbs_ep_setup.c, verbs_post.c, verbs_ctrl.c, verbs_progress.c; verbs_ep.h),
 * verbs_hca.c the device layer (protection domain, registration, async
 * events), verbs_mr_cache.c the registration cache, verbs_lib.c the
 * run-time binding of libibverbs,
 * verbs_ports.c/verbs_select.c the discovery of usable ports. */
#ifndef RERAIL_RAIL_VERBS_H
#define RERAIL_RAIL_VERBS_H
#include <pthread.h>
#include <stdint.h>

#include "rail.h"
#include "verbs_addr.h"
#include "verbs_ports.h"
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

/* Each endpoint has its own completion queue, sized for everything its QPs
 * can have outstanding (every send and receive queue full), so it never
 * overflows and its completions need no sorting: see verbs_ep_setup.c for
 * why a CQ per endpoint rather than one per device.
 *
 * Depths one under a power of two: providers keep a ring of a power of two
 * entries with one left empty (rxe and mlx5 CQs round n + 1 up; rxe its
 * send and receive queues too), so 256 would cost 512 entries.
 *
 * The receive queue holds as many as the peer's send queue: every request
 * that consumes one of our receives (a write with immediate, a drain, a
 * NOP) sits in the peer's send queue until our NIC acknowledged it, so the
 * peer never has more of them outstanding than VERBS_SQ_DEPTH per QP. A
 * receive comes back when its request is delivered, which with one QP is as
 * soon as progress polls it; should the peer refill its send queue before
 * we poll, our NIC answers RNR and the peer's NIC retries (rnr_retry 7:
 * for ever), which slows the peer and loses nothing. The 512 before held
 * two send queues' worth for that case, at twice the memory. */
#define VERBS_SQ_DEPTH 255
#define VERBS_RQ_DEPTH 255
/* Most bytes one write carries (rr_rail_dev_attr.write_max). */
#define VERBS_WRITE_MAX (4u << 20)

struct verbs_mr_cache;
/* NCCL's registration on one device: the handle the core holds. Its keys
 * are the cache entry's; a reopened device gives them new values. */
struct verbs_mr {
  rr_rail_mr base;
  struct verbs_mr_entry *entry;        /* NULL while the device is closed */
  uint32_t kind;                       /* enum rr_mem_kind */
  /* DMA-BUF: our own duplicate of NCCL's descriptor (NCCL closes its own
   * after regMr), to register it again on a reopened device; -1 none. */
  int dmabuf_fd;
  uint64_t dmabuf_offset;
  struct verbs_mr *prev, *next;        /* the device's handles (mr_handles) */
};
typedef struct verbs_mr verbs_mr;
/* One opening of the device (verbs_reset.c): its context and protection
 * domain, alive while the device or any endpoint made on them holds them. */
typedef struct verbs_gen verbs_gen;

typedef struct verbs_hca {
  rr_rail_dev base;
  const rr_ibv_api *api;
  rr_verbs_port port;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  /* The endpoint list, for the events that concern all of them (a fatal
   * device). Never taken by an endpoint's progress or by a registration. */
  /* guards: eps, neps, mr_handles, port (GID fields), ctx/pd/mrs/closed swaps; after flush_lock. */
  pthread_mutex_t lock;
  verbs_ep *eps;             /* attached endpoints (intrusive list) */
  int neps;
  struct verbs_mr_cache *mrs; /* registration cache, under its own lock */
  int port_down;             /* the last async event said so */
  /* The flush QP (verbs_flush.c): made on the first flush, shared by every
   * connection on the device, under its own lock (never the device lock). */
  /* guards: flusher and its QP/CQ/slots; after gen_lock, before lock; polled by trylock. */
  pthread_mutex_t flush_lock;
  struct verbs_flusher *flusher;
  /* Reset (verbs_reset.c). A fatal event closes the device: ctx, pd and mrs
   * become NULL, `closed` 1, and the opening (gen) they belonged to lives on
   * until the last endpoint made on it is destroyed. The device is opened
   * again under the same index when its port is ACTIVE again. gen_lock is
   * held for reading by what uses ctx, pd and mrs from outside the monitor
   * thread (ep_open, reg_mr, dereg_mr), for writing by close and reopen;
   * never by an endpoint's progress. Order: gen_lock, flush_lock, lock. */
  /* guards: ctx, pd, mrs, gen, closed (read: ep_open, reg_mr, dereg_mr; write: close, reopen). */
  pthread_rwlock_t gen_lock;
  verbs_gen *gen;            /* the current opening; NULL while closed (and in tests that make none) */
  int closed;
  uint64_t next_probe_ns;    /* while closed: when to look for the device again */
  uint32_t resets, reopens;  /* counted for tests and logs */
  /* Every registration handle NCCL holds on this device (under lock): each
   * is registered again when the device reopens, and its keys replaced. */
  verbs_mr *mr_handles;
} verbs_hca;

/* Add / remove an endpoint to / from the device's list (O(1) both). */
void verbs_hca_attach(verbs_hca *h, verbs_ep *ep);
void verbs_hca_detach(verbs_hca *h, verbs_ep *ep);
int verbs_ep_nqps(const verbs_ep *ep);
int verbs_ep_has_qpn(const verbs_ep *ep, uint32_t qpn);
/* An async event (QP fatal, CQ error, device fatal) concerning ep: the
 * endpoint fails with RR_ERR_RAIL on its next progress or post. Thread safe
 * (the monitor thread calls it, the endpoint's owner acts on it). */
void verbs_ep_async_error(verbs_ep *ep, enum ibv_event_type t);

/* The registration cache (verbs_mr_cache.c): one ibv_reg_mr per buffer,
 * device and memory kind, however often NCCL registers it. A hash table
 * under its own mutex, which is never held across a libibverbs call: the
 * caller registers between a miss and the insert, and deregisters what the
 * last release hands back. */
typedef struct verbs_mr_cache verbs_mr_cache;
typedef struct verbs_mr_entry verbs_mr_entry;
rr_status verbs_mr_cache_create(verbs_mr_cache **out);
/* Deregisters whatever is still cached (the device is closing). */
void verbs_mr_cache_destroy(verbs_mr_cache *c, const rr_ibv_api *api);
/* A cached registration of exactly (base, len, kind), with a reference
 * taken; NULL on a miss. */
verbs_mr_entry *verbs_mr_cache_get(verbs_mr_cache *c, const void *base, size_t len, uint32_t kind);
/* Insert mr for (base, len, kind) with one reference. When another thread
 * inserted the same key since our miss, its entry is returned (referenced)
 * and *raced set: the caller deregisters its own mr. NULL: out of memory. */
verbs_mr_entry *verbs_mr_cache_put(verbs_mr_cache *c, const void *base, size_t len, uint32_t kind,
                                   struct ibv_mr *mr, int *raced);
/* Drop a reference: the mr to deregister when it was the last, else NULL. */
struct ibv_mr *verbs_mr_cache_release(verbs_mr_cache *c, verbs_mr_entry *e);
struct ibv_mr *verbs_mr_entry_mr(const verbs_mr_entry *e);
/* Entries cached (tests, the bench). */
size_t verbs_mr_cache_count(verbs_mr_cache *c);

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
/* The endpoints a device with these limits holds (its maxComms), each
 * endpoint with qps_per_ep QPs; 0 when not even one fits. */
uint32_t verbs_max_eps_of(const struct ibv_device_attr *a, int qps_per_ep);
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
/* The GID port p should use now, into *p (discovery's rules). */
rr_status verbs_gid_choose(verbs_hca *h, struct ibv_context *ctx, const char *sysfs_root, rr_verbs_port *p);

/* verbs_reset.c: a device-fatal event closes the device and a device that
 * comes back is opened again under the same index. */
/* The opening of a device made by rr_verbs_dev_open (ctx, pd: the device's). */
verbs_gen *verbs_gen_new(const rr_ibv_api *api, struct ibv_context *ctx, struct ibv_pd *pd);
/* Drop one reference; the last deallocates the PD and closes the context. */
void verbs_gen_put(verbs_gen *g);
/* The opening's scratch for probe filler (VERBS_SCRATCH_BYTES, the peer
 * may write it, nobody reads it), registered on first use; NULL when it
 * cannot be (or g is NULL). It lives as long as g. */
#define VERBS_SCRATCH_BYTES RR_WRITE_PROBE_MAX
struct ibv_mr *verbs_gen_scratch(verbs_gen *g);
/* Close the device after a fatal event (monitor thread): every endpoint has
 * been failed; registrations are released, the flush QP destroyed. */
void verbs_reset_close(verbs_hca *h);
/* While closed, at a low rate: open the device again when it is back with
 * its port ACTIVE. 1 when it reopened (the caller reports PORT_UP). */
int verbs_reset_probe(verbs_hca *h, uint64_t now_ns);
/* The endpoint ops that account for the opening an endpoint is made on. */
rr_status verbs_reset_ep_open(rr_rail_dev *dev, const rr_rail_events *events, void *events_arg, rr_rail_ep **ep);
void verbs_reset_ep_destroy(rr_rail_ep *ep);
/* Register a handle on the current opening (caller holds gen_lock; the
 * device open): its entry and keys set. */
rr_status verbs_mr_register(verbs_hca *h, verbs_mr *m);
/* Drop the handle's cache entry (caller holds gen_lock): keys stay, stale. */
void verbs_mr_unregister(verbs_hca *h, verbs_mr *m);

#endif
