/* The verbs rail's device layer: an opened HCA port with its protection
 * domain, the registrations made on it (verbs_mr_cache.c holds them) and the
 * device's async events.
 *
 * Completions are not the device's business: each endpoint has its own CQ
 * and polls it on its owner's thread (verbs_ep_setup.c says why). So an
 * endpoint's progress takes no lock of the device's, and a registration,
 * however long ibv_reg_mr takes, stalls no connection. The device keeps a
 * list of its endpoints only to fail them all when the device fails. */
#include "rail_verbs.h"
#include "verbs_ep.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_nic_state.h"
#include "rr_log.h"
#include "rr_params.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic uint64_t reg_calls;

uint64_t rr_verbs_reg_calls(void) { return atomic_load(&reg_calls); }

static verbs_hca *to_hca(rr_rail_dev *dev) { return rr_container_of(dev, verbs_hca, base); }

/* ------------------------------------------------------------ registrations */

/* One ibv_reg_mr for memory by address or by DMA-BUF, with PCIe relaxed
 * ordering where NCCL would ask for it (rr_ibv_relaxed_ordering): the NIC's
 * writes into GPU memory may then pass each other on PCIe, which is what
 * lets them run at full rate behind a PCIe switch; the flush read after a
 * receive (verbs_flush.c) is what orders them for the GPU, as in NCCL. */
static struct ibv_mr *register_now(verbs_hca *h, void *base, size_t len, uint32_t kind, int dmabuf_fd,
                                   uint64_t dmabuf_offset) {
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  int relaxed = rr_ibv_relaxed_ordering(h->api);
  if (relaxed) access |= IBV_ACCESS_RELAXED_ORDERING;
  if (kind == RR_MEM_DMABUF)
    return h->api->reg_dmabuf_mr(h->pd, dmabuf_offset, len, (uint64_t)(uintptr_t)base, dmabuf_fd, access);
  if (relaxed) return h->api->reg_mr_iova2(h->pd, base, len, (uint64_t)(uintptr_t)base, (unsigned)access);
  return h->api->reg_mr(h->pd, base, len, access);
}

/* NCCL registers the same buffer again and again (per communicator, per
 * channel): the cache keeps that to one ibv_reg_mr per buffer and device.
 * No lock is held while registering: a registration of a large buffer (it
 * pins every page) must not stall another thread registering something
 * else, nor anything on the data path. Two threads registering the same
 * buffer at once both register it; the second to finish finds the first's
 * entry on insert and deregisters its own. (gen_lock, held for reading, only
 * keeps the device from being closed or reopened under the registration.) */
rr_status verbs_mr_register(verbs_hca *h, verbs_mr *m) {
  void *base = m->base.base;
  size_t len = m->base.len;
  verbs_mr_entry *e = verbs_mr_cache_get(h->mrs, base, len, m->kind);
  if (!e) {
    uint64_t nth = atomic_fetch_add(&reg_calls, 1) + 1;
    RR_INFO(RR_SUB_NET, "verbs %s: ibv_reg_mr #%llu: %zu bytes", h->port.dev_name, (unsigned long long)nth, len);
    rr_counter_inc(rr_health_down_seen() ? RR_CTR_VERBS_REGISTRATIONS_AFTER_DOWN : RR_CTR_VERBS_REGISTRATIONS);
    struct ibv_mr *mr = register_now(h, base, len, m->kind, m->dmabuf_fd, m->dmabuf_offset);
    if (!mr) {
      int err = errno;
      RR_WARN("verbs %s: registering %zu bytes failed: %s", h->port.dev_name, len, strerror(err));
      return err == ENOMEM ? RR_ERR_NOMEM : RR_ERR_SYSTEM;
    }
    int raced = 0;
    e = verbs_mr_cache_put(h->mrs, base, len, m->kind, mr, &raced);
    if (!e || raced) h->api->dereg_mr(mr); /* out of memory, or another thread's is cached */
    if (!e) return RR_ERR_NOMEM;
  }
  struct ibv_mr *mr = verbs_mr_entry_mr(e);
  m->entry = e;
  /* Atomic stores: a reopen replaces the keys of handles the engine may be
   * reading (for a rail on another device it never uses them). */
  __atomic_store_n(&m->base.lkey, mr->lkey, __ATOMIC_RELAXED);
  __atomic_store_n(&m->base.rkey, mr->rkey, __ATOMIC_RELAXED);
  return RR_OK;
}

rr_status verbs_reg_mr(rr_rail_dev *dev, void *base, size_t len, uint32_t kind, int dmabuf_fd,
                       uint64_t dmabuf_offset, rr_rail_mr **out) {
  verbs_hca *h = to_hca(dev);
  if (!(kind & (RR_MEM_HOST | RR_MEM_CUDA | RR_MEM_DMABUF))) return RR_ERR_UNSUPPORTED;
  if (kind == RR_MEM_DMABUF && !h->api->reg_dmabuf_mr) return RR_ERR_UNSUPPORTED;
  verbs_mr *m = calloc(1, sizeof *m);
  if (!m) return RR_ERR_NOMEM;
  m->base = (rr_rail_mr){.dev = dev, .base = base, .len = len};
  m->kind = kind;
  m->dmabuf_fd = kind == RR_MEM_DMABUF ? dmabuf_fd : -1; /* NCCL's, for this call only */
  m->dmabuf_offset = dmabuf_offset;
  pthread_rwlock_rdlock(&h->gen_lock);
  /* A closed device (reset) takes the registration with keys 0, which no
   * rail carries (the engine's rail_carries), and registers it when it
   * reopens: NCCL's regMr does not fail for a NIC that is being reset. */
  rr_status st = h->closed ? RR_OK : verbs_mr_register(h, m);
  if (st == RR_OK && kind == RR_MEM_DMABUF) {
    /* Our own duplicate, to register it again after a reset; without one
     * the buffer is carried by the other NICs only after a reset. */
    m->dmabuf_fd = fcntl(dmabuf_fd, F_DUPFD_CLOEXEC, 0);
    if (m->dmabuf_fd < 0)
      RR_WARN("verbs %s: cannot keep a DMA-BUF descriptor (%s): after a reset that buffer is not registered here",
              h->port.dev_name, strerror(errno));
  }
  if (st == RR_OK) {
    pthread_mutex_lock(&h->lock);
    m->prev = NULL;
    m->next = h->mr_handles;
    if (h->mr_handles) h->mr_handles->prev = m;
    h->mr_handles = m;
    pthread_mutex_unlock(&h->lock);
  }
  pthread_rwlock_unlock(&h->gen_lock);
  if (st != RR_OK) {
    free(m);
    return st;
  }
  *out = &m->base;
  return RR_OK;
}

/* The handle's reference on its cache entry, dropped (caller holds gen_lock). */
void verbs_mr_unregister(verbs_hca *h, verbs_mr *m) {
  if (!m->entry) return;
  struct ibv_mr *last = verbs_mr_cache_release(h->mrs, m->entry);
  if (last) h->api->dereg_mr(last); /* outside the cache's lock */
  m->entry = NULL;
}

void verbs_dereg_mr(rr_rail_mr *rmr) {
  verbs_mr *m = rr_container_of(rmr, verbs_mr, base);
  verbs_hca *h = to_hca(rmr->dev);
  pthread_rwlock_rdlock(&h->gen_lock);
  pthread_mutex_lock(&h->lock);
  if (m->prev) m->prev->next = m->next;
  else h->mr_handles = m->next;
  if (m->next) m->next->prev = m->prev;
  pthread_mutex_unlock(&h->lock);
  verbs_mr_unregister(h, m);
  pthread_rwlock_unlock(&h->gen_lock);
  if (m->dmabuf_fd >= 0) close(m->dmabuf_fd);
  free(m);
}

/* ------------------------------------------------------------- endpoints */

void verbs_hca_attach(verbs_hca *h, verbs_ep *ep) {
  pthread_mutex_lock(&h->lock);
  ep->dev_prev = NULL;
  ep->dev_next = h->eps;
  if (h->eps) h->eps->dev_prev = ep;
  h->eps = ep;
  h->neps++;
  ep->attached = 1;
  pthread_mutex_unlock(&h->lock);
}

void verbs_hca_detach(verbs_hca *h, verbs_ep *ep) {
  pthread_mutex_lock(&h->lock);
  if (ep->dev_prev) ep->dev_prev->dev_next = ep->dev_next;
  else h->eps = ep->dev_next;
  if (ep->dev_next) ep->dev_next->dev_prev = ep->dev_prev;
  ep->dev_prev = ep->dev_next = NULL;
  h->neps--;
  ep->attached = 0; /* the event reader leaves it alone from here */
  pthread_mutex_unlock(&h->lock);
}

/* Nothing to poll for the device: every endpoint polls its own CQ. */
rr_status verbs_dev_progress(rr_rail_dev *dev) {
  (void)dev;
  return RR_OK;
}

/* --------------------------------------------------------------- events */

/* A QP or an endpoint's CQ in error fails that endpoint now rather than
 * when its next completion (or the silence detector) says so: an idle
 * endpoint may have nothing outstanding to complete in error. A fatal
 * device fails them all. The endpoint is found in O(1): its QPs and its CQ
 * carry it as their context (an event that names a QP or CQ of no endpoint,
 * the flush QP's, carries NULL). The event is not yet acknowledged, so the
 * QP or CQ, and the endpoint that owns it, are still alive: libibverbs'
 * destroy calls wait for the acknowledgement. The endpoint itself turns the
 * mark into a rail failure on its owner's thread. */
static void fail_eps(verbs_hca *h, const struct ibv_async_event *ae) {
  enum ibv_event_type t = ae->event_type;
  verbs_ep *ep = NULL;
  if (t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR || t == IBV_EVENT_QP_ACCESS_ERR)
    ep = ae->element.qp ? ae->element.qp->qp_context : NULL;
  else if (t == IBV_EVENT_CQ_ERR)
    ep = ae->element.cq ? ae->element.cq->cq_context : NULL;
  else if (t != IBV_EVENT_DEVICE_FATAL)
    return;
  /* Under the device lock: the endpoint is still attached (its QPs and CQ
   * not being destroyed) and its QP count not changing (connect). */
  pthread_mutex_lock(&h->lock);
  if (t == IBV_EVENT_DEVICE_FATAL) {
    for (verbs_ep *e = h->eps; e; e = e->dev_next) verbs_ep_async_error(e, t);
  } else if (ep && ep->attached && (t == IBV_EVENT_CQ_ERR || verbs_ep_has_qpn(ep, ae->element.qp->qp_num))) {
    if (t == IBV_EVENT_CQ_ERR)
      RR_WARN("verbs %s: an endpoint's completion queue failed (overrun or error): that rail fails",
              h->port.dev_name);
    verbs_ep_async_error(ep, t);
  }
  pthread_mutex_unlock(&h->lock);
}

rr_rail_dev_event_kind verbs_dev_event(rr_rail_dev *dev, rr_rail_dev_event *ev) {
  verbs_hca *h = to_hca(dev);
  memset(ev, 0, sizeof *ev);
  if (h->closed) { /* reset: is it back? (verbs_reset.c) */
    if (!verbs_reset_probe(h, rr_now_ns())) return RR_RAIL_DEV_EV_NONE;
    snprintf(ev->why, sizeof ev->why, "%.24s port %d: reopened after a reset", h->port.dev_name, h->port.port);
    return ev->kind = RR_RAIL_DEV_EV_PORT_UP;
  }
  struct ibv_async_event ae;
  while (h->api->get_async_event(h->ctx, &ae) == 0) {
    enum ibv_event_type t = ae.event_type;
    int port = ae.element.port_num;
    fail_eps(h, &ae);
    h->api->ack_async_event(&ae);
    if (t == IBV_EVENT_GID_CHANGE) {
      if (port == h->port.port) verbs_gid_refresh(h, rr_verbs_sysfs_root());
      continue; /* new endpoints use the new GID; nothing to report */
    }
    if ((t == IBV_EVENT_PORT_ERR || t == IBV_EVENT_PORT_ACTIVE) && port != h->port.port) continue;
    if (t == IBV_EVENT_PORT_ERR) ev->kind = RR_RAIL_DEV_EV_PORT_DOWN;
    else if (t == IBV_EVENT_PORT_ACTIVE) ev->kind = RR_RAIL_DEV_EV_PORT_UP;
    else if (t == IBV_EVENT_DEVICE_FATAL) ev->kind = RR_RAIL_DEV_EV_FATAL;
    else continue; /* a QP's or a CQ's event concerns its endpoint only (marked above) */
    snprintf(ev->why, sizeof ev->why, "%.24s port %d: %.28s", h->port.dev_name, h->port.port, h->api->event_type_str(t));
    h->port_down = ev->kind != RR_RAIL_DEV_EV_PORT_UP;
    /* Every endpoint is failed (fail_eps): the device closes, nothing more
     * is read from its dead context. */
    if (ev->kind == RR_RAIL_DEV_EV_FATAL) verbs_reset_close(h);
    return ev->kind;
  }
  return RR_RAIL_DEV_EV_NONE;
}

/* ---------------------------------------------------------- open, close */

/* What this device can register, as NCCL decides it: GPU memory by its
 * address (RR_MEM_CUDA) when GPUDirect RDMA's kernel module is loaded, by a
 * DMA-BUF descriptor when the provider and kernel accept ibv_reg_dmabuf_mr
 * (probed with an invalid descriptor: "not supported" and "bad descriptor"
 * fail differently). */
uint32_t verbs_mem_kinds(const rr_ibv_api *api, struct ibv_context *ctx, const char *sysfs_root) {
  uint32_t kinds = RR_MEM_HOST;
  if (rr_verbs_gdr_present(sysfs_root)) kinds |= RR_MEM_CUDA;
  if (rr_verbs_dmabuf_supported(api, ctx)) kinds |= RR_MEM_DMABUF;
  return kinds;
}

const char *rr_verbs_sysfs_root(void) { return "/sys"; }

/* maxComms, honestly: how many endpoints the device's own limits hold. Each
 * takes RERAIL_IB_QPS_PER_RAIL QPs, one CQ and two memory regions (its
 * buffers and its control ring); the flush QP takes one of each, and half
 * the device's MRs stay for the buffers NCCL registers. Host limits
 * (RLIMIT_MEMLOCK, memory) come on top and are not the device's to say. */
uint32_t verbs_max_eps_of(const struct ibv_device_attr *a, int qps_per_ep) {
  if (qps_per_ep < 1) qps_per_ep = 1;
  if ((int64_t)qps_per_ep * (VERBS_SQ_DEPTH + VERBS_RQ_DEPTH) > a->max_cqe) return 0;
  int64_t by_qp = (a->max_qp - 1) / qps_per_ep, by_cq = a->max_cq - 1, by_mr = a->max_mr / 4;
  int64_t n = by_qp < by_cq ? by_qp : by_cq;
  if (by_mr < n) n = by_mr;
  return n > 0 ? (uint32_t)n : 0;
}

static uint32_t verbs_max_eps(verbs_hca *h) {
  struct ibv_device_attr a;
  if (h->api->query_device(h->ctx, &a) != 0) /* what discovery read, then */
    a = (struct ibv_device_attr){.max_qp = h->port.max_qp, .max_cq = h->port.max_qp, .max_mr = 4 * h->port.max_qp,
                                 .max_cqe = h->port.max_cqe};
  int qps = rr_params_get()->ib_qps_per_rail;
  uint32_t n = verbs_max_eps_of(&a, qps);
  if (n == 0)
    RR_WARN("verbs %s: an endpoint needs a completion queue of %d entries, the device allows %d (max_qp %d, "
            "max_cq %d)", h->port.dev_name, qps * (VERBS_SQ_DEPTH + VERBS_RQ_DEPTH), a.max_cqe, a.max_qp, a.max_cq);
  return n ? n : 1; /* 0 would read as "no limit" */
}

void verbs_dev_close(rr_rail_dev *dev) {
  verbs_hca *h = to_hca(dev);
  if (h->ctx) verbs_flush_close(h); /* its QP and sink live in the PD */
  if (h->mrs) verbs_mr_cache_destroy(h->mrs, h->api);
  if (h->gen) {
    verbs_gen_put(h->gen); /* the PD and context go with the last endpoint */
  } else {
    if (h->pd) h->api->dealloc_pd(h->pd);
    if (h->ctx) h->api->close_device(h->ctx);
  }
  pthread_rwlock_destroy(&h->gen_lock);
  pthread_mutex_destroy(&h->flush_lock);
  pthread_mutex_destroy(&h->lock);
  free(h);
}

rr_status rr_verbs_dev_open(int index, const rr_verbs_port *port, rr_rail_dev **out) {
  const rr_ibv_api *api = rr_ibv_load();
  if (!api) return RR_ERR_UNSUPPORTED;
  verbs_hca *h = calloc(1, sizeof *h);
  if (!h) return RR_ERR_NOMEM;
  pthread_mutex_init(&h->lock, NULL);
  pthread_mutex_init(&h->flush_lock, NULL);
  pthread_rwlock_init(&h->gen_lock, NULL);
  h->api = api;
  h->port = *port;
  h->base.ops = &rr_verbs_rail_ops;
  h->base.index = index;
  rr_status st = RR_ERR_SYSTEM;
  int n = 0;
  struct ibv_device **list = api->get_device_list(&n);
  for (int i = 0; list && i < n && !h->ctx; i++)
    if (!strcmp(api->get_device_name(list[i]), port->dev_name)) h->ctx = api->open_device(list[i]);
  if (list) api->free_device_list(list);
  if (!h->ctx) {
    RR_WARN("verbs: cannot open %s", port->dev_name);
    goto fail;
  }
  /* Async events are read by the monitor thread without blocking. */
  int fl = fcntl(h->ctx->async_fd, F_GETFL);
  if (fl < 0 || fcntl(h->ctx->async_fd, F_SETFL, fl | O_NONBLOCK) != 0) goto fail;
  h->pd = api->alloc_pd(h->ctx);
  if (!h->pd) {
    RR_WARN("verbs %s: cannot create a protection domain: %s", port->dev_name, strerror(errno));
    goto fail;
  }
  if ((st = verbs_mr_cache_create(&h->mrs)) != RR_OK) goto fail;
  st = RR_ERR_NOMEM;
  if (!(h->gen = verbs_gen_new(api, h->ctx, h->pd))) goto fail;
  h->base.attr = (rr_rail_dev_attr){
      .caps = RR_RAIL_CAP_EP_ORDERED | RR_RAIL_CAP_CONNECT_MAY_BLOCK |
              RR_RAIL_CAP_WRITE_DONE_PLACED /* RC: a write completes once acknowledged */ |
              RR_RAIL_CAP_PROBE_WRITE, /* into the peer's scratch (verbs_probe.c) */
      .mem_kinds = verbs_mem_kinds(api, h->ctx, rr_verbs_sysfs_root()),
      .inline_max = 0,
      /* Chunks that go together leave as one write (one receive completion
       * at the peer): up to NCCL's own step size and more (its buffer is
       * 4 MiB per channel), small beside what a QP may write at once. */
      .write_max = VERBS_WRITE_MAX,
      .max_eps = verbs_max_eps(h),
      .addr_len = RR_VERBS_ADDR_LEN,
      .speed_mbps = port->speed_mbps,
      .latency_us = 0};
  /* Test knob: host memory typed NCCL_PTR_CUDA is registered with the
   * ordinary call and treated as GPU memory everywhere else. */
  if (rr_params_get()->test_host_as_gpu) h->base.attr.mem_kinds |= RR_MEM_CUDA;
  /* NCCL's rule for adaptive routing: InfiniBand ports have it, RoCE ports
   * not, unless the operator says. */
  int ar = rr_params_get()->ib_adaptive_routing;
  if (ar < 0 ? port->link_layer == IBV_LINK_LAYER_INFINIBAND : ar == 1)
    h->base.attr.caps |= RR_RAIL_CAP_ADAPTIVE_ROUTING;
  uint32_t k = h->base.attr.mem_kinds;
  RR_INFO(RR_SUB_INIT | RR_SUB_NET, "verbs %s: GPU memory by address (GPUDirect RDMA): %s; by DMA-BUF: %s",
          port->dev_name, k & RR_MEM_CUDA ? "yes" : "no (no nvidia-peermem)",
          k & RR_MEM_DMABUF ? "yes" : "no (ibv_reg_dmabuf_mr unsupported)");
  *out = &h->base;
  return RR_OK;
fail:
  verbs_dev_close(&h->base);
  return st;
}
