/* A NIC reset is not permanent. A device-fatal async event (a firmware
 * reset, a PCI error, the device removed: `rdma link delete` on Soft-RoCE
 * delivers it to every process holding the device) makes every object on
 * the device's context dead. The event reader fails every endpoint of the
 * device (verbs_hca.c) and closes the device here; the monitor thread then
 * looks for the device again at a low rate and, once it is back with its
 * port ACTIVE, opens it again under the same rerail device index and
 * reports the port up: the engines reopen their rails on it through their
 * usual reopen path, with their usual flap damping, and traffic fails back.
 *
 * What must not happen is a use after free: the engines destroy their
 * failed endpoints whenever they get to it, and an endpoint's QPs, CQ and
 * MRs live in the context and protection domain it was made on. So each
 * opening of the device is an object (verbs_gen) counted by the device and
 * by every endpoint made on it; the PD is deallocated and the context
 * closed when the last of them lets go, after the endpoint destroyed its
 * own objects. Registrations are the core's handles (verbs_mr): they stay
 * valid across the reset, their cache entries are released at the close
 * and made again on the new PD at the reopen, with new keys. */
#include "rail_verbs.h"
#include "verbs_ep.h"
#include "rr_clock.h"
#include "rr_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* How often a closed device is looked for: listing devices opens sysfs and
 * the uverbs devices, cheap but not free, and a reset takes seconds. */
#define VERBS_PROBE_INTERVAL_NS 200000000ull

struct verbs_gen {
  const rr_ibv_api *api;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  _Atomic int refs;
  /* Probe filler's scratch (verbs_probe.c), made on the first endpoint
   * that asks and shared by every endpoint of this opening. */
  /* guards: scratch, scratch_mr. */
  pthread_mutex_t scratch_lock;
  void *scratch;
  struct ibv_mr *scratch_mr;
};

verbs_gen *verbs_gen_new(const rr_ibv_api *api, struct ibv_context *ctx, struct ibv_pd *pd) {
  verbs_gen *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->api = api;
  g->ctx = ctx;
  g->pd = pd;
  atomic_init(&g->refs, 1);
  pthread_mutex_init(&g->scratch_lock, NULL);
  return g;
}

struct ibv_mr *verbs_gen_scratch(verbs_gen *g) {
  if (!g || !g->pd) return NULL;
  pthread_mutex_lock(&g->scratch_lock);
  if (!g->scratch_mr && !g->scratch) {
    /* Tried once per opening: a device that cannot register it is not
     * probed (its rails are judged by failures only), never failed. */
    g->scratch = aligned_alloc(4096, VERBS_SCRATCH_BYTES);
    if (g->scratch) {
      memset(g->scratch, 0, VERBS_SCRATCH_BYTES);
      g->scratch_mr = g->api->reg_mr(g->pd, g->scratch, VERBS_SCRATCH_BYTES,
                                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      if (!g->scratch_mr)
        RR_INFO(RR_SUB_NET, "verbs: cannot register the probe scratch (%s): its rails are not probed",
                strerror(errno));
    }
  }
  struct ibv_mr *mr = g->scratch_mr;
  pthread_mutex_unlock(&g->scratch_lock);
  return mr;
}

void verbs_gen_put(verbs_gen *g) {
  if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
  /* On a device that is gone these fail (the kernel already released
   * them): nothing more to do with either. */
  if (g->scratch_mr) g->api->dereg_mr(g->scratch_mr);
  free(g->scratch);
  pthread_mutex_destroy(&g->scratch_lock);
  if (g->pd) g->api->dealloc_pd(g->pd);
  if (g->ctx) g->api->close_device(g->ctx);
  free(g);
}

/* ------------------------------------------------------------- endpoints */

rr_status verbs_reset_ep_open(rr_rail_dev *dev, const rr_rail_events *events, void *events_arg, rr_rail_ep **out) {
  verbs_hca *h = rr_container_of(dev, verbs_hca, base);
  pthread_rwlock_rdlock(&h->gen_lock);
  rr_status st = RR_ERR_RAIL; /* a closed device: the rail stays down until it reopens */
  if (!h->closed) st = verbs_ep_open(dev, events, events_arg, out);
  if (st == RR_OK && h->gen) {
    verbs_ep *ep = rr_container_of(*out, verbs_ep, base);
    ep->gen = h->gen;
    atomic_fetch_add(&h->gen->refs, 1);
    ep->scratch_mr = verbs_gen_scratch(h->gen);
  }
  pthread_rwlock_unlock(&h->gen_lock);
  return st;
}

void verbs_reset_ep_destroy(rr_rail_ep *rep) {
  if (!rep) return;
  verbs_gen *g = rr_container_of(rep, verbs_ep, base)->gen;
  verbs_destroy(rep);
  verbs_gen_put(g); /* after the endpoint's own objects are gone */
}

/* ----------------------------------------------------------------- close */

void verbs_reset_close(verbs_hca *h) {
  pthread_rwlock_wrlock(&h->gen_lock);
  /* An endpoint that finished opening after the event reader failed the
   * others was made on the dead context too. */
  pthread_mutex_lock(&h->lock);
  for (verbs_ep *e = h->eps; e; e = e->dev_next) verbs_ep_async_error(e, IBV_EVENT_DEVICE_FATAL);
  pthread_mutex_unlock(&h->lock);
  verbs_flush_close(h); /* its QP and sink live in the PD */
  pthread_mutex_lock(&h->lock);
  verbs_mr *handles = h->mr_handles;
  pthread_mutex_unlock(&h->lock);
  /* No registration or deregistration runs (gen_lock): the list is still. */
  for (verbs_mr *m = handles; m; m = m->next) verbs_mr_unregister(h, m);
  verbs_mr_cache_destroy(h->mrs, h->api);
  pthread_mutex_lock(&h->flush_lock);
  pthread_mutex_lock(&h->lock);
  h->mrs = NULL;
  h->pd = NULL;
  h->ctx = NULL;
  h->closed = 1;
  h->port_down = 1;
  pthread_mutex_unlock(&h->lock);
  pthread_mutex_unlock(&h->flush_lock);
  verbs_gen *g = h->gen;
  h->gen = NULL;
  h->resets++;
  h->next_probe_ns = 0; /* look at once: a removal and re-creation can be quick */
  pthread_rwlock_unlock(&h->gen_lock);
  RR_WARN("verbs %s port %d: device-fatal event: the device is closed (its endpoints failed) and opened again "
          "when its port is ACTIVE again", h->port.dev_name, h->port.port);
  verbs_gen_put(g); /* the device's reference; endpoints not yet destroyed hold theirs */
}

/* ---------------------------------------------------------------- reopen */

/* The device by name, opened; NULL while it is not there. */
static struct ibv_context *open_by_name(const rr_ibv_api *api, const char *name) {
  int n = 0;
  struct ibv_context *ctx = NULL;
  struct ibv_device **list = api->get_device_list(&n);
  for (int i = 0; list && i < n && !ctx; i++)
    if (!strcmp(api->get_device_name(list[i]), name)) ctx = api->open_device(list[i]);
  if (list) api->free_device_list(list);
  return ctx;
}

/* Every handle registered on the new PD, with its new keys. One that cannot
 * be keeps keys 0: no rail carries that buffer over this device (the
 * engine's rail_carries), the others still do. Under gen_lock (writing). */
static void register_handles(verbs_hca *h) {
  pthread_mutex_lock(&h->lock);
  verbs_mr *handles = h->mr_handles;
  pthread_mutex_unlock(&h->lock);
  int failed = 0;
  for (verbs_mr *m = handles; m; m = m->next)
    if ((m->kind == RR_MEM_DMABUF && m->dmabuf_fd < 0) || verbs_mr_register(h, m) != RR_OK) {
      __atomic_store_n(&m->base.lkey, 0u, __ATOMIC_RELAXED);
      __atomic_store_n(&m->base.rkey, 0u, __ATOMIC_RELAXED);
      failed++;
    }
  if (failed)
    RR_WARN("verbs %s: %d registration(s) could not be made again after the reset: those buffers travel over "
            "the other NICs only", h->port.dev_name, failed);
}

int verbs_reset_probe(verbs_hca *h, uint64_t now_ns) {
  if (!h->closed || now_ns < h->next_probe_ns) return 0;
  h->next_probe_ns = now_ns + VERBS_PROBE_INTERVAL_NS;
  const rr_ibv_api *api = h->api;
  struct ibv_context *ctx = open_by_name(api, h->port.dev_name);
  if (!ctx) return 0;
  struct ibv_port_attr pa;
  rr_verbs_port p = h->port;
  struct ibv_pd *pd = NULL;
  verbs_gen *g = NULL;
  int fl = fcntl(ctx->async_fd, F_GETFL);
  /* Events are read without blocking; the GID is chosen again (a
   * re-created RoCE device may order its table differently). */
  if (rr_ibv_query_port(api, ctx, (uint8_t)p.port, &pa) != 0 || pa.state != IBV_PORT_ACTIVE ||
      fl < 0 || fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) != 0 ||
      verbs_gid_choose(h, ctx, rr_verbs_sysfs_root(), &p) != RR_OK || !(pd = api->alloc_pd(ctx)) ||
      !(g = verbs_gen_new(api, ctx, pd))) {
    if (pd) api->dealloc_pd(pd);
    api->close_device(ctx);
    return 0; /* not back yet; looked for again later */
  }
  verbs_mr_cache *mrs = NULL;
  if (verbs_mr_cache_create(&mrs) != RR_OK) {
    verbs_gen_put(g);
    return 0;
  }
  pthread_rwlock_wrlock(&h->gen_lock);
  pthread_mutex_lock(&h->flush_lock);
  pthread_mutex_lock(&h->lock);
  h->ctx = ctx;
  h->pd = pd;
  h->mrs = mrs;
  h->gen = g;
  h->port.gid = p.gid;
  h->port.gid_index = p.gid_index;
  h->port.gid_type = p.gid_type;
  h->port.lid = p.lid;
  memcpy(h->port.netdev, p.netdev, sizeof h->port.netdev);
  h->port.active_mtu = pa.active_mtu;
  pthread_mutex_unlock(&h->lock);
  pthread_mutex_unlock(&h->flush_lock);
  register_handles(h);
  h->closed = 0;
  h->port_down = 0;
  h->reopens++;
  pthread_rwlock_unlock(&h->gen_lock);
  char gs[64];
  RR_WARN("verbs %s port %d: the device is back after a reset and opened again as device %d (GID %d %s)",
          h->port.dev_name, h->port.port, h->base.index, h->port.gid_index, rr_gid_str(h->port.gid.raw, gs, sizeof gs));
  return 1;
}
