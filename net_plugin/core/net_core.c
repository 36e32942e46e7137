/* Core lifecycle: contexts, devices, properties, and the data-path entry
 * points, which check NCCL's pointers and hand over to the engine. */
#include "connect_job.h"
#include "core_internal.h"
#include "rr_counters.h"
#include "rr_nic_state.h"
#include "rr_health_table.h"
#include "rr_log.h"
#include "rr_params.h"
#include "rr_telemetry.h"

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* guards: ctx_refs, default_ctx, default_ctx_live, device discovery (devices_ready);
 * init, finalize and discovery take it, with no other lock held (level 1). */
static pthread_mutex_t core_lock = PTHREAD_MUTEX_INITIALIZER;
static int ctx_refs;
static rr_net_ctx default_ctx;
static int default_ctx_live;
static rr_devices devices;
static int devices_ready;

/* The settings every connection runs with. */
static void log_settings(void) {
  const rr_params *p = rr_params_get();
  RR_INFO(RR_SUB_INIT | RR_SUB_NET,
          "TCP rails: %d stream(s) per rail; %zu-byte chunks, %d backup rail(s), failover %s, "
          "progress timeout %llu ms, fail-back hold %llu ms",
          p->tcp_streams, p->chunk_size, p->backups, p->failover ? "balance" : "chain",
          (unsigned long long)p->progress_timeout_ms, (unsigned long long)p->failback_hold_ms);
}

static void discover_devices(void) {
  const rr_params *p = rr_params_get();
  rr_netif nifs[RR_MAX_NETIFS];
  int nnifs = 0;
  if (rr_netif_discover(p->socket_ifname, nifs, RR_MAX_NETIFS, &nnifs) != RR_OK) nnifs = 0;
  /* Devices no transport can open are left out, not fatal. */
  rr_core_devices_open(nifs, nnifs, p->socket_ifname, &devices);
  int n = devices.count;
  int need_oob = 0;
  for (int i = 0; i < n; i++) need_oob |= !(devices.rail[i]->attr.caps & RR_RAIL_CAP_SETUP_IS_DATA);
  devices.need_oob = need_oob;
  devices.has_oob = need_oob && rr_core_choose_oob(nifs, nnifs, p->socket_ifname, &devices.oob);
  if (need_oob) {
    char abuf[64];
    if (devices.has_oob)
      RR_INFO(RR_SUB_INIT | RR_SUB_NET, "out-of-band interface %s (%s): setup of the RDMA devices travels over it",
              devices.oob.name, rr_sockaddr_str((const struct sockaddr *)&devices.oob.addr, abuf, sizeof abuf));
    else
      RR_WARN("no out-of-band interface is up with an address%s%s: RDMA devices set connections up over "
              "their own address, or not at all", p->socket_ifname[0] ? " among RERAIL_SOCKET_IFNAME=" : "",
              p->socket_ifname);
  }
  if (n == 0) {
    if (p->socket_ifname[0]) {
      rr_counter_inc(RR_CTR_SETTINGS_REFUSED);
      RR_WARN("RERAIL_SOCKET_IFNAME=%s matches no interface that is up and has an address: "
              "rerail offers no devices, NCCL falls back to its own transports", p->socket_ifname);
    } else
      RR_WARN("no network interface is up: rerail offers no devices");
  }
  for (int i = 0; i < n; i++) {
    const rr_rail_dev_attr *a = &devices.rail[i]->attr;
    const char *tname = devices.rail[i]->ops->name;
    /* status, the .prom file and the event log name the transport beside the
     * NIC, and the adapter of a port ("mlx5_0" of "mlx5_0:1") */
    char hca[RR_RAIL_DEV_NAME_MAX] = "";
    if (a->port) {
      snprintf(hca, sizeof hca, "%s", a->name);
      char *colon = strrchr(hca, ':');
      if (colon) *colon = '\0';
    }
    rr_health_nic_transport_set(i, tname, hca, a->port);
    char abuf[64] = "-";
    if (devices.nif[i].addr.ss_family != AF_UNSPEC)
      rr_sockaddr_str((const struct sockaddr *)&devices.nif[i].addr, abuf, sizeof abuf);
    RR_INFO(RR_SUB_INIT | RR_SUB_NET, "device %d: %s (%s) %s speed %d Mb/s pci %s numa %d", i,
            devices.nif[i].name, tname, abuf, devices.nif[i].speed_mbps,
            devices.nif[i].pci_path[0] ? devices.nif[i].pci_path : "-", devices.nif[i].numa_node);
  }
}

const rr_devices *rr_core_devices(void) { return &devices; }

/* Under core_lock: once per process (until the devices close). */
static void devices_ensure_locked(void) {
  if (devices_ready) return;
  rr_params_get();
  log_settings();
  discover_devices();
  rr_monitor_read_links("link state when the plugin started");
  devices_ready = 1;
}

const rr_devices *rr_core_devices_discover(void) {
  pthread_mutex_lock(&core_lock);
  devices_ensure_locked();
  pthread_mutex_unlock(&core_lock);
  return &devices;
}

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

void rr_core_engine_config(int role, size_t chunk_size, const struct sockaddr *peer,
                           rr_profiler_fn profiler, rr_engine_config *cfg) {
  const rr_params *p = rr_params_get();
  memset(cfg, 0, sizeof *cfg);
  cfg->role = role;
  cfg->chunk_size = chunk_size;
  cfg->ar_threshold = p->ib_ar_threshold;
  cfg->failover_mode = p->failover;
  cfg->progress_timeout_ns = p->progress_timeout_ms * 1000000ull;
  cfg->failback_hold_ns = p->failback_hold_ms * 1000000ull;
  cfg->profiler = profiler;
  cfg->eager_max = p->tcp_eager_max;
  cfg->degraded_pct = p->degraded_pct;
  cfg->restore_pct = p->degraded_restore_pct;
  cfg->degraded_ns = p->degraded_ms * 1000000ull;
  cfg->retrans_pct = p->degraded_retrans_pct;
  cfg->latency_x = p->degraded_latency_x;
  cfg->latency_min_ns = p->degraded_latency_min_us * 1000ull;
  rr_sockaddr_str(peer, cfg->peer, sizeof cfg->peer);
}

rr_status rr_net_init(const rr_init_args *args, rr_net_ctx **out) {
  if (!args || !out) return RR_ERR_INVALID;
  if (args->logger) rr_log_set_logger(args->logger);
  pthread_mutex_lock(&core_lock);
  devices_ensure_locked();
  rr_net_ctx *ctx;
  if (args->comm_id == 0) {
    /* v7-v10: one process-wide context, shared by every init call. */
    ctx = &default_ctx;
    if (!default_ctx_live) {
      ctx_refs++;
      rr_health_table_start(devices.nif, devices.count);
      /* events while no connection is open still get logged */
      default_ctx.tel_held = rr_tel_retain() == RR_OK;
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
    ctx->tel_held = rr_tel_retain() == RR_OK;
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
  const rr_rail_dev_attr *a = &devices.rail[dev]->attr;
  const rr_params *p = rr_params_get();
  memset(props, 0, sizeof *props);
  /* NCCL pairs GPUs and NICs by the PCI path, groups ports of one adapter
   * by the GUID, and may open a connection per comm up to maxComms. */
  props->name = a->name[0] ? a->name : nif->name;
  props->pci_path = nif->pci_path[0] ? nif->pci_path : NULL;
  props->guid = a->guid ? a->guid : nic_guid(nif);
  props->ptr_support = rr_core_ptr_support(dev); /* per device: issue 23 */
  props->reg_is_global = 1;       /* a registration covers every pooled NIC (mr.c) */
  props->force_flush = 0;
  /* Virtual NICs (veth, lo) report no speed: assume 10 Gb/s like NCCL's sockets. */
  props->speed_mbps = nif->speed_mbps > 0 ? nif->speed_mbps : 10000;
  props->port = a->port;
  props->latency_us = 0;
  props->max_comms = a->max_eps > 0 ? (int)a->max_eps : 65536;
  /* Speed and latency are the NIC's, whatever its health: every rank of a
   * host builds its topology from these, and before NCCL 2.22 local ranks
   * that saw different speeds could build different rings and hang. A NIC
   * that is down is failed over by the rails instead. */
  props->rail_id = rr_netif_rail_id(nif);
  props->max_recvs = RR_NET_MAX_RECVS;
  /* A message may have IMM_MAX_CHUNKS chunks (2^17 since the immediate
   * gave a bit to group writes: 16 GiB at the default 128 KiB chunk, 512 MiB
   * at the smallest, 4 KiB; NCCL splits larger messages); above 8 MiB chunks
   * that passes NCCL's limit, which NCCL would refuse at connection setup. */
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
  /* Handed out before the listener's ACCEPTs (conn_confirm.c): nothing
   * leaves until they are in; a NULL request makes NCCL try again. */
  if (atomic_load(&comm->confirming) || comm->confirm_status != RR_OK) {
    rr_status st = rr_connect_confirm(comm);
    if (st != RR_OK) return st == RR_AGAIN ? RR_OK : st;
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

rr_status rr_net_conn_id(const void *comm, uint64_t *id) {
  if (!comm) return RR_ERR_INVALID;
  uint32_t magic;
  memcpy(&magic, comm, sizeof magic); /* both comms begin with it */
  if (magic == RR_MAGIC_SEND) *id = rr_connect_conn_id((const rr_send_comm *)comm);
  else if (magic == RR_MAGIC_RECV) *id = ((const rr_recv_comm *)comm)->conn_id;
  else return RR_ERR_INVALID;
  return RR_OK;
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
  /* One handed out before its ACCEPTs: its listener may have handed its
   * end out, so it closes in order if they are in; else (or if it failed)
   * its sockets just go, no rail being in its engine. */
  if (comm->magic == RR_MAGIC_SEND && atomic_load(&comm->confirming)) rr_connect_confirm_close(comm);
  if (comm->magic == RR_MAGIC_SEND && comm->confirm_status != RR_OK) {
    rr_monitor_remove(&comm->engine);
    rr_engine_fini(&comm->engine);
    comm->magic = RR_MAGIC_DEAD;
    rr_connect_release(comm);
    free(comm);
    return RR_OK;
  }
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
