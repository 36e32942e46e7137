/* Core lifecycle: contexts, devices, properties, and the data-path entry
 * points, which check NCCL's pointers and hand over to the engine. */
#include "connect_job.h"
#include "core_internal.h"
#include "rr_health.h"
#include "rr_health_table.h"
#include "rr_log.h"
#include "rr_params.h"
#include "rr_telemetry.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t core_lock = PTHREAD_MUTEX_INITIALIZER;
static int ctx_refs;
static rr_net_ctx default_ctx;
static int default_ctx_live;
static rr_devices devices;
static int devices_ready;

/* The settings every connection runs with (the transport is chosen per NIC,
 * transport.c). */
static void choose_transport(void) {
  const rr_params *p = rr_params_get();
  rr_core_transport_discover();
  RR_INFO(RR_SUB_INIT | RR_SUB_NET,
          "TCP rails: %d stream(s) per rail; %zu-byte chunks, %d backup rail(s), failover %s, "
          "progress timeout %llu ms, fail-back hold %llu ms",
          p->tcp_streams, p->chunk_size, p->backups, p->failover ? "balance" : "chain",
          (unsigned long long)p->progress_timeout_ms, (unsigned long long)p->failback_hold_ms);
}

static void discover_devices(void) {
  const rr_params *p = rr_params_get();
  int n = 0;
  if (rr_netif_discover(p->socket_ifname, devices.nif, RR_MAX_NETIFS, &n) != RR_OK) n = 0;
  devices.count = n;
  if (n == 0) {
    if (p->socket_ifname[0])
      RR_WARN("RERAIL_SOCKET_IFNAME=%s matches no interface that is up and has an address: "
              "rerail offers no devices, NCCL falls back to its own transports", p->socket_ifname);
    else
      RR_WARN("no network interface is up: rerail offers no devices");
  }
  /* Devices no transport can open are left out, not fatal. */
  int kept = 0;
  for (int i = 0; i < n; i++) {
    rr_rail_dev *rd = NULL;
    const rr_verbs_port *vp = NULL;
    if (rr_core_dev_open(kept, &devices.nif[i], &rd, &vp) != RR_OK) {
      RR_WARN("device %s: no transport can open it; left out", devices.nif[i].name);
      continue;
    }
    devices.nif[kept] = devices.nif[i];
    devices.verbs[kept] = vp;
    /* status, the .prom file and the event log name the transport beside the NIC */
    rr_health_nic_transport_set(kept, vp ? "verbs" : "tcp", vp ? vp->dev_name : "", vp ? vp->port : 0);
    devices.rail[kept++] = rd;
  }
  devices.count = n = kept;
  for (int i = 0; i < n; i++) {
    char abuf[64];
    RR_INFO(RR_SUB_INIT | RR_SUB_NET, "device %d: %s %s speed %d Mb/s pci %s numa %d", i,
            devices.nif[i].name,
            rr_sockaddr_str((const struct sockaddr *)&devices.nif[i].addr, abuf, sizeof abuf),
            devices.nif[i].speed_mbps, devices.nif[i].pci_path[0] ? devices.nif[i].pci_path : "-",
            devices.nif[i].numa_node);
  }
}

const rr_devices *rr_core_devices(void) { return &devices; }

/* How long teardown waits for reopened rails still connecting: several
 * times the slowest connect seen in the lab (an ARP resolution after a link
 * came back), short enough that a process exit is not held noticeably. */
#define CONNECT_DRAIN_MS 3000u

/* The devices live as long as the library: NCCL dlclose()s it after its
 * last communicator, and they go then (verbs: the PD, CQ and context).
 * Last of the library's destructors (a priority runs after every plain
 * destructor): the others (connects NCCL gave up on, the monitor) still
 * destroy endpoints on these devices, and the order of plain destructors
 * across files is the linker's. */
__attribute__((destructor(150))) static void devices_close(void) {
  rr_monitor_shutdown(); /* it polls the devices: stopped first, whichever destructor runs first */
  /* A reopened rail's connect may still run on its own thread, inside a
   * device: closing the device under it would fail that thread. One stuck
   * past the bound keeps every device open (the process is going anyway). */
  if (rr_connect_job_drain(CONNECT_DRAIN_MS) != 0) {
    devices.count = 0;
    devices_ready = 0;
    return;
  }
  for (int i = 0; i < devices.count; i++)
    if (devices.rail[i]) devices.rail[i]->ops->dev_close(devices.rail[i]), devices.rail[i] = NULL;
  devices.count = 0;
  devices_ready = 0;
}

int rr_core_dev_by_addr(const struct sockaddr_storage *addr) {
  for (int i = 0; i < devices.count; i++) {
    const struct sockaddr_storage *a = &devices.nif[i].addr;
    if (a->ss_family != addr->ss_family) continue;
    if (a->ss_family == AF_INET &&
        ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)addr)->sin_addr.s_addr)
      return i;
    if (a->ss_family == AF_INET6 &&
        !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)addr)->sin6_addr, 16))
      return i;
  }
  return -1;
}

void rr_core_engine_config(int role, size_t chunk_size, const struct sockaddr *peer,
                           rr_profiler_fn profiler, rr_engine_config *cfg) {
  const rr_params *p = rr_params_get();
  memset(cfg, 0, sizeof *cfg);
  cfg->role = role;
  cfg->chunk_size = chunk_size;
  cfg->failover_mode = p->failover;
  cfg->progress_timeout_ns = p->progress_timeout_ms * 1000000ull;
  cfg->failback_hold_ns = p->failback_hold_ms * 1000000ull;
  cfg->profiler = profiler;
  cfg->eager_max = p->tcp_eager_max;
  cfg->degraded_pct = p->degraded_pct;
  cfg->restore_pct = p->degraded_restore_pct;
  cfg->degraded_ns = p->degraded_ms * 1000000ull;
  cfg->retrans_pct = p->degraded_retrans_pct;
  rr_sockaddr_str(peer, cfg->peer, sizeof cfg->peer);
}

rr_status rr_net_init(const rr_init_args *args, rr_net_ctx **out) {
  if (!args || !out) return RR_ERR_INVALID;
  if (args->logger) rr_log_set_logger(args->logger);
  pthread_mutex_lock(&core_lock);
  if (!devices_ready) {
    rr_params_get();
    choose_transport();
    discover_devices();
    rr_monitor_read_links("link state when the plugin started");
    devices_ready = 1;
  }
  rr_net_ctx *ctx;
  if (args->comm_id == 0) {
    /* v8-v10: one process-wide context, shared by every init call. */
    ctx = &default_ctx;
    if (!default_ctx_live) {
      ctx_refs++;
      rr_health_table_start(devices.nif, devices.count);
      /* events while no connection is open still get logged */
      default_ctx.tel_held = rr_tel_retain() == 0;
    }
    default_ctx_live = 1;
  } else {
    ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
      pthread_mutex_unlock(&core_lock);
      return RR_ERR_NOMEM;
    }
    ctx_refs++;
    /* Publish this host's NICs in the shared health table, and keep the
     * telemetry exporter up between connections (both refcounted). */
    rr_health_table_start(devices.nif, devices.count);
    ctx->tel_held = rr_tel_retain() == 0;
  }
  ctx->comm_id = args->comm_id;
  ctx->traffic_class = args->traffic_class;
  ctx->profiler = args->profiler;
  pthread_mutex_unlock(&core_lock);
  *out = ctx;
  return RR_OK;
}

rr_net_ctx *rr_net_default_ctx(void) { return &default_ctx; }

rr_status rr_net_finalize(rr_net_ctx *ctx) {
  if (!ctx) return RR_OK;
  pthread_mutex_lock(&core_lock);
  if (ctx == &default_ctx) {
    if (default_ctx_live) {
      ctx_refs--;
      rr_health_table_stop();
      if (ctx->tel_held) rr_tel_release();
      ctx->tel_held = 0;
    }
    default_ctx_live = 0;
  } else {
    ctx_refs--;
    rr_health_table_stop();
    if (ctx->tel_held) rr_tel_release();
    free(ctx);
  }
  pthread_mutex_unlock(&core_lock);
  return RR_OK;
}

rr_status rr_net_devices(int *ndev) {
  if (!ndev) return RR_ERR_INVALID;
  *ndev = devices.count;
  return RR_OK;
}

/* A stable 64-bit id per NIC: FNV-1a of its name (and PCI path when known). */
static uint64_t nic_guid(const rr_netif *nif) {
  uint64_t h = 1469598103934665603ull;
  for (const char *p = nif->name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  for (const char *p = nif->pci_path; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  return h;
}

rr_status rr_net_get_properties(int dev, rr_dev_props *props) {
  if (!props) return RR_ERR_INVALID;
  if (dev < 0 || dev >= devices.count) {
    RR_WARN("getProperties: device %d does not exist (%d devices)", dev, devices.count);
    return RR_ERR_INVALID;
  }
  const rr_netif *nif = &devices.nif[dev];
  const rr_verbs_port *vp = devices.verbs[dev];
  const rr_params *p = rr_params_get();
  memset(props, 0, sizeof *props);
  props->name = nif->name;
  props->pci_path = nif->pci_path[0] ? nif->pci_path : NULL;
  props->guid = nic_guid(nif);
  props->ptr_support = rr_core_ptr_support(dev); /* per device: issue 23 */
  props->reg_is_global = 1;       /* a registration covers every pooled NIC (mr.c) */
  props->force_flush = 0;
  /* Virtual NICs (veth, lo) report no speed: assume 10 Gb/s like NCCL's sockets. */
  props->speed_mbps = nif->speed_mbps > 0 ? nif->speed_mbps : 10000;
  props->port = 0;
  props->latency_us = 0;
  props->max_comms = 65536;
  if (vp) {
    /* An RDMA port: NCCL pairs GPUs and NICs by its PCI path, groups ports
     * of one adapter by its GUID, and may open a QP per comm. */
    if (vp->pci_path[0]) props->pci_path = vp->pci_path;
    props->guid = vp->guid ? vp->guid : props->guid;
    props->port = vp->port;
    if (vp->speed_mbps > 0) props->speed_mbps = vp->speed_mbps;
    const rr_rail_dev_attr *a = &devices.rail[dev]->attr;
    if (a->max_eps > 0) props->max_comms = (int)a->max_eps;
  }
  /* Speed and latency are the NIC's, whatever its health: every rank of a
   * host builds its topology from these, and before NCCL 2.22 local ranks
   * that saw different speeds could build different rings and hang. A NIC
   * that is down is failed over by the rails instead. */
  props->rail_id = rr_netif_rail_id(nif);
  props->max_recvs = RR_NET_MAX_RECVS;
  /* A message may have IMM_MAX_CHUNKS chunks; above 4 MiB chunks that passes
   * NCCL's limit, which NCCL would refuse at connection setup. */
  size_t max_bytes = p->chunk_size * (size_t)IMM_MAX_CHUNKS;
  if (max_bytes > RR_NET_MAX_BYTES) max_bytes = RR_NET_MAX_BYTES;
  props->max_p2p_bytes = max_bytes;
  props->max_coll_bytes = max_bytes;
  props->max_multi_request_size = 1;
  return RR_OK;
}

/* ---------------------------------------------------------------- data path */

rr_status rr_net_isend(rr_send_comm *comm, void *data, size_t size, int tag, void *mhandle,
                       void *phandle, void **request) {
  if (!request) return RR_ERR_INVALID;
  *request = NULL;
  if (!comm || comm->magic != RR_MAGIC_SEND) {
    RR_WARN("isend: not a rerail send comm");
    return RR_ERR_INVALID;
  }
  return rr_engine_isend(&comm->engine, data, size, tag, mhandle, phandle, request);
}

rr_status rr_net_irecv(rr_recv_comm *comm, int n, void **data, const size_t *sizes,
                       const int *tags, void **mhandles, void **phandles, void **request) {
  if (!request) return RR_ERR_INVALID;
  *request = NULL;
  if (!comm || comm->magic != RR_MAGIC_RECV) {
    RR_WARN("irecv: not a rerail receive comm");
    return RR_ERR_INVALID;
  }
  if (!data || !sizes || !tags) return RR_ERR_INVALID;
  return rr_engine_irecv(&comm->engine, n, data, sizes, tags, (rr_mr **)mhandles, phandles, request);
}

rr_status rr_net_test(void *request, int *done, size_t *sizes) {
  if (!request || !done) {
    RR_WARN("test: NULL request");
    return RR_ERR_INVALID;
  }
  if (*(const uint8_t *)request == RR_REQ_FLUSH) return rr_core_flush_test(request, done);
  return rr_engine_test(request, done, sizes);
}

/* Closing a comm: its engine leaves the monitor first, so the background
 * thread never touches it again; then it delivers what it owes the peer
 * (acknowledgements, messages reported done) and says BYE, within the
 * progress timeout, so the peer's last calls end in order, not in an error;
 * then the rails go. */
static rr_status close_comm(uint32_t *magic, uint32_t want, rr_engine *e, const char *what) {
  if (*magic != want) {
    RR_WARN("%s: not a rerail %s comm", what, want == RR_MAGIC_SEND ? "send" : "receive");
    return RR_ERR_INVALID;
  }
  rr_monitor_remove(e);
  (void)rr_engine_close(e, rr_params_get()->progress_timeout_ms * 1000000ull); /* counted; never NCCL's error */
  rr_engine_fini(e);
  *magic = RR_MAGIC_DEAD;
  return RR_OK;
}

rr_status rr_net_close_send(rr_send_comm *comm) {
  if (!comm) return RR_OK;
  rr_status st = close_comm(&comm->magic, RR_MAGIC_SEND, &comm->engine, "closeSend");
  if (st == RR_OK) rr_connect_release(comm); /* a reconnect under way: its sockets and endpoint */
  if (st == RR_OK) free(comm);
  return st;
}

rr_status rr_net_close_recv(rr_recv_comm *comm) {
  if (!comm) return RR_OK;
  if (comm->magic == RR_MAGIC_RECV) rr_listen_release(comm); /* no reconnect reaches it now */
  rr_status st = close_comm(&comm->magic, RR_MAGIC_RECV, &comm->engine, "closeRecv");
  if (st == RR_OK) free(comm);
  return st;
}
