/* The verbs rail's device layer: an opened HCA port with its protection
 * domain, one completion queue shared by every endpoint on it, a
 * registration cache and the device's async events.
 *
 * The CQ is polled by whichever endpoint's progress comes first; what it
 * finds is filed into the owning endpoint's inbox under the device lock, and
 * each endpoint delivers its own completions to its own engine. So a
 * connection's thread never runs another connection's engine, and no engine
 * lock is ever taken under the device lock. */
#include "rail_verbs.h"
#include "rr_log.h"
#include "rr_params.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CQ_ENTRIES_MAX 32768
#define POLL_BATCH 32

typedef struct verbs_mr_entry {
  struct verbs_mr_entry *next;
  void *base;
  size_t len;
  uint32_t kind;
  struct ibv_mr *mr;
  int refs;
} verbs_mr_entry;

typedef struct verbs_mr {
  rr_rail_mr base;
  verbs_mr_entry *entry;
} verbs_mr;

static _Atomic uint64_t reg_calls;

uint64_t rr_verbs_reg_calls(void) { return atomic_load(&reg_calls); }

static verbs_hca *to_hca(rr_rail_dev *dev) { return rr_container_of(dev, verbs_hca, base); }

/* ------------------------------------------------------------ registrations */

/* NCCL registers the same buffer again and again (per communicator, per
 * channel): a cache keeps that to one ibv_reg_mr per buffer and device. */
rr_status verbs_reg_mr(rr_rail_dev *dev, void *base, size_t len, uint32_t kind, int dmabuf_fd,
                       uint64_t dmabuf_offset, rr_rail_mr **out) {
  verbs_hca *h = to_hca(dev);
  if (!(kind & (RR_MEM_HOST | RR_MEM_CUDA | RR_MEM_DMABUF))) return RR_ERR_UNSUPPORTED;
  if (kind == RR_MEM_DMABUF && !h->api->reg_dmabuf_mr) return RR_ERR_UNSUPPORTED;
  verbs_mr *m = calloc(1, sizeof *m);
  if (!m) return RR_ERR_NOMEM;
  pthread_mutex_lock(&h->lock);
  verbs_mr_entry *e = h->mrs;
  while (e && !(e->base == base && e->len == len && e->kind == kind)) e = e->next;
  if (!e) {
    e = calloc(1, sizeof *e);
    if (!e) {
      pthread_mutex_unlock(&h->lock);
      free(m);
      return RR_ERR_NOMEM;
    }
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    uint64_t nth = atomic_fetch_add(&reg_calls, 1) + 1;
    RR_INFO(RR_SUB_NET, "verbs %s: ibv_reg_mr #%llu: %zu bytes", h->port.dev_name, (unsigned long long)nth, len);
    e->mr = kind == RR_MEM_DMABUF
                ? h->api->reg_dmabuf_mr(h->pd, dmabuf_offset, len, (uint64_t)(uintptr_t)base, dmabuf_fd, access)
                : h->api->reg_mr(h->pd, base, len, access);
    if (!e->mr) {
      int err = errno;
      pthread_mutex_unlock(&h->lock);
      RR_WARN("verbs %s: registering %zu bytes failed: %s", h->port.dev_name, len, strerror(err));
      free(e);
      free(m);
      return err == ENOMEM ? RR_ERR_NOMEM : RR_ERR_SYSTEM;
    }
    e->base = base;
    e->len = len;
    e->kind = kind;
    e->next = h->mrs;
    h->mrs = e;
  }
  e->refs++;
  pthread_mutex_unlock(&h->lock);
  m->entry = e;
  m->base = (rr_rail_mr){.dev = dev, .base = base, .len = len, .lkey = e->mr->lkey, .rkey = e->mr->rkey};
  *out = &m->base;
  return RR_OK;
}

void verbs_dereg_mr(rr_rail_mr *rmr) {
  verbs_mr *m = rr_container_of(rmr, verbs_mr, base);
  verbs_hca *h = to_hca(rmr->dev);
  pthread_mutex_lock(&h->lock);
  verbs_mr_entry *e = m->entry;
  if (--e->refs == 0) {
    for (verbs_mr_entry **p = &h->mrs; *p; p = &(*p)->next)
      if (*p == e) {
        *p = e->next;
        break;
      }
    h->api->dereg_mr(e->mr);
    free(e);
  }
  pthread_mutex_unlock(&h->lock);
  free(m);
}

/* ------------------------------------------------------------- completions */

rr_status verbs_hca_attach(verbs_hca *h, verbs_ep *ep) {
  pthread_mutex_lock(&h->lock);
  rr_status st = RR_OK;
  if (h->neps == h->cap_eps) {
    int cap = h->cap_eps ? 2 * h->cap_eps : 16;
    verbs_ep **n = realloc(h->eps, (size_t)cap * sizeof *n);
    if (n) h->eps = n, h->cap_eps = cap;
    else st = RR_ERR_NOMEM;
  }
  /* Every endpoint may have a full send and receive queue outstanding on
   * the shared CQ: refuse one the CQ could overflow with. */
  int qps = verbs_ep_nqps(ep);
  for (int i = 0; i < h->neps; i++) qps += verbs_ep_nqps(h->eps[i]);
  if (st == RR_OK && qps * (VERBS_SQ_DEPTH + VERBS_RQ_DEPTH) > h->cq->cqe) st = RR_AGAIN;
  if (st == RR_OK) h->eps[h->neps++] = ep;
  pthread_mutex_unlock(&h->lock);
  return st;
}

void verbs_hca_detach(verbs_hca *h, verbs_ep *ep) {
  pthread_mutex_lock(&h->lock);
  for (int i = 0; i < h->neps; i++)
    if (h->eps[i] == ep) {
      h->eps[i] = h->eps[--h->neps];
      break;
    }
  pthread_mutex_unlock(&h->lock);
}

static verbs_ep *ep_by_qpn(verbs_hca *h, uint32_t qpn) {
  for (int i = 0; i < h->neps; i++)
    if (verbs_ep_has_qpn(h->eps[i], qpn)) return h->eps[i];
  return NULL;
}

rr_status verbs_hca_poll(verbs_hca *h) {
  if (pthread_mutex_trylock(&h->lock) != 0) return RR_OK; /* another thread is polling */
  rr_status st = RR_OK;
  for (int rounds = 0; rounds < 8; rounds++) {
    struct ibv_wc wc[POLL_BATCH];
    int n = ibv_poll_cq(h->cq, POLL_BATCH, wc);
    if (n < 0) {
      st = RR_ERR_RAIL;
      break;
    }
    for (int i = 0; i < n; i++) {
      verbs_ep *ep = ep_by_qpn(h, wc[i].qp_num);
      if (!ep) continue; /* its endpoint is gone: nothing waits for it */
      verbs_inbox *in = verbs_ep_inbox(ep);
      if (in->tail - in->head < in->cap) in->wc[in->tail++ % in->cap] = wc[i];
    }
    if (n < POLL_BATCH) break;
  }
  pthread_mutex_unlock(&h->lock);
  return st;
}

rr_status verbs_dev_progress(rr_rail_dev *dev) { return verbs_hca_poll(to_hca(dev)); }

/* --------------------------------------------------------------- events */

/* A QP in error, or the CQ every endpoint shares, fails the endpoints
 * concerned now rather than when their next completion (or the silence
 * detector) says so: an idle endpoint may have nothing outstanding to
 * complete in error. The endpoint itself turns the mark into a rail failure
 * on its owner's thread. Called under the device lock, with the event not yet
 * acknowledged, so its QP is still alive and its endpoint still attached. */
static void fail_eps_locked(verbs_hca *h, const struct ibv_async_event *ae) {
  enum ibv_event_type t = ae->event_type;
  if (t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR || t == IBV_EVENT_QP_ACCESS_ERR) {
    verbs_ep *ep = ae->element.qp ? ep_by_qpn(h, ae->element.qp->qp_num) : NULL;
    if (ep) verbs_ep_async_error(ep, t);
  } else if (t == IBV_EVENT_CQ_ERR || t == IBV_EVENT_DEVICE_FATAL) {
    for (int i = 0; i < h->neps; i++) verbs_ep_async_error(h->eps[i], t);
  }
}

rr_rail_dev_event_kind verbs_dev_event(rr_rail_dev *dev, rr_rail_dev_event *ev) {
  verbs_hca *h = to_hca(dev);
  memset(ev, 0, sizeof *ev);
  struct ibv_async_event ae;
  while (h->api->get_async_event(h->ctx, &ae) == 0) {
    enum ibv_event_type t = ae.event_type;
    int port = ae.element.port_num;
    pthread_mutex_lock(&h->lock);
    fail_eps_locked(h, &ae);
    pthread_mutex_unlock(&h->lock);
    h->api->ack_async_event(&ae);
    if (t == IBV_EVENT_GID_CHANGE) {
      if (port == h->port.port) verbs_gid_refresh(h, rr_verbs_sysfs_root());
      continue; /* new endpoints use the new GID; nothing to report */
    }
    if ((t == IBV_EVENT_PORT_ERR || t == IBV_EVENT_PORT_ACTIVE) && port != h->port.port) continue;
    if (t == IBV_EVENT_PORT_ERR) ev->kind = RR_RAIL_DEV_EV_PORT_DOWN;
    else if (t == IBV_EVENT_PORT_ACTIVE) ev->kind = RR_RAIL_DEV_EV_PORT_UP;
    /* The shared CQ in error loses every completion of the device: as
     * unusable as a fatal device until it is opened again. */
    else if (t == IBV_EVENT_DEVICE_FATAL || t == IBV_EVENT_CQ_ERR) ev->kind = RR_RAIL_DEV_EV_FATAL;
    else continue; /* a QP's event concerns its endpoint only (marked above) */
    snprintf(ev->why, sizeof ev->why, "%.24s port %d: %.28s", h->port.dev_name, h->port.port, h->api->event_type_str(t));
    h->port_down = ev->kind != RR_RAIL_DEV_EV_PORT_UP;
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

void verbs_dev_close(rr_rail_dev *dev) {
  verbs_hca *h = to_hca(dev);
  verbs_flush_close(h); /* its QP and sink live in the PD */
  while (h->mrs) {
    verbs_mr_entry *e = h->mrs;
    h->mrs = e->next;
    h->api->dereg_mr(e->mr);
    free(e);
  }
  if (h->cq) h->api->destroy_cq(h->cq);
  if (h->pd) h->api->dealloc_pd(h->pd);
  if (h->ctx) h->api->close_device(h->ctx);
  free(h->eps);
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
  int cqe = port->max_cqe > 0 && port->max_cqe < CQ_ENTRIES_MAX ? port->max_cqe : CQ_ENTRIES_MAX;
  h->cq = h->pd ? api->create_cq(h->ctx, cqe, NULL, NULL, 0) : NULL;
  if (!h->cq) {
    RR_WARN("verbs %s: cannot create a protection domain and completion queue: %s", port->dev_name, strerror(errno));
    goto fail;
  }
  h->base.attr = (rr_rail_dev_attr){
      .caps = RR_RAIL_CAP_WRITE | RR_RAIL_CAP_WRITE_IMM | RR_RAIL_CAP_EP_ORDERED | RR_RAIL_CAP_REG_PER_DEV |
              RR_RAIL_CAP_CONNECT_MAY_BLOCK | RR_RAIL_CAP_WRITE_DONE_PLACED, /* RC: a write completes once acknowledged */
      .mem_kinds = verbs_mem_kinds(api, h->ctx, rr_verbs_sysfs_root()),
      .inline_max = 0,
      .max_eps = (uint32_t)(h->cq->cqe / (rr_params_get()->ib_qps_per_rail * (VERBS_SQ_DEPTH + VERBS_RQ_DEPTH))),
      .addr_len = RR_VERBS_ADDR_LEN,
      .speed_mbps = port->speed_mbps,
      .latency_us = 0};
  /* Test knob: host memory typed NCCL_PTR_CUDA is registered with the
   * ordinary call and treated as GPU memory everywhere else. */
  if (rr_params_get()->test_host_as_gpu) h->base.attr.mem_kinds |= RR_MEM_CUDA;
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
