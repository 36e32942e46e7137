/* rerail devices [--json]: the devices as the net plugin would pool them
 * here, found by the plugin's own discovery (the transport registry,
 * net_plugin/core/devices.h), not by a second reading of the host:
 *
 *   - each RDMA port as NCCL users look at one: HCA:port, link layer, state,
 *     speed, the GID chosen (index and value), LID (InfiniBand), netdev,
 *     NUMA node, PCI path, GPUDirect (by address through nvidia-peermem, by
 *     DMA-BUF) as the plugin decides it for ptrSupport;
 *   - each TCP interface;
 *   - what was left out and why (a port not ACTIVE, docker0 being virtual ...);
 *   - the out-of-band interface connection setup travels over;
 *   - RLIMIT_MEMLOCK when it is too low for registering memory on an RDMA
 *     port (the classic container failure: ibv_reg_mr fails with ENOMEM).
 *
 * --json is for scripts: the keys below are stable, and the reasons things
 * were left out are words (rail.h's RR_LEFT_OUT_*), not sentences. */
#include "devices.h"
#include "net_core.h"
#include "rr_log.h"
#include "rr_params.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Below this a job's registrations are likely to fail: every connection of
 * an RDMA port pins its rings and receive buffers, and host buffers NCCL
 * registers count too (GPU memory does not). NCCL's documentation asks for
 * an unlimited limit; this is the line under which rerail warns. */
#define MEMLOCK_ADVISED ((uint64_t)1 << 30)

/* The kernel lets a process with CAP_IPC_LOCK pin past its limit (ib_umem
 * charges pinned pages to RLIMIT_MEMLOCK only without it). Bit 14 of the
 * effective set in /proc/self/status. */
static int has_cap_ipc_lock(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  int yes = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long long caps;
    if (sscanf(line, "CapEff: %llx", &caps) == 1) {
      yes = (caps >> 14) & 1;
      break;
    }
  }
  fclose(f);
  return yes;
}

typedef struct memlock_view {
  int unlimited;
  uint64_t limit;          /* bytes (soft limit), when not unlimited */
  int cap_ipc_lock;
  int ok;                  /* registration is not held back by the limit */
} memlock_view;

static memlock_view memlock_read(void) {
  memlock_view m = {.unlimited = 1};
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    m.unlimited = 0;
    m.limit = (uint64_t)rl.rlim_cur;
  }
  m.cap_ipc_lock = has_cap_ipc_lock();
  m.ok = m.unlimited || m.cap_ipc_lock || m.limit >= MEMLOCK_ADVISED;
  return m;
}

static int is_rdma(const rr_rail_dev *rd) { return rd->attr.link[0] != '\0'; }

static const char *addr_str(const struct sockaddr_storage *ss, char *buf, size_t len) {
  if (ss->ss_family != AF_INET && ss->ss_family != AF_INET6) return "";
  return rr_sockaddr_str((const struct sockaddr *)ss, buf, len);
}

static const char *gid_str(const uint8_t raw[16], char *buf, size_t len) {
  if (!inet_ntop(AF_INET6, raw, buf, (socklen_t)len)) snprintf(buf, len, "?");
  return buf;
}

/* A JSON string value (names and sentences here hold no control characters,
 * but a quote or a backslash in an interface name must not break the text). */
static void json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') putchar('\\');
    if ((unsigned char)*s >= 0x20) putchar(*s);
  }
  putchar('"');
}

static void print_json(const rr_params *p, const rr_devices *d, const memlock_view *m) {
  printf("{\"ifname_filter\":");
  json_str(p->socket_ifname);
  printf(",\"devices\":[");
  for (int i = 0; i < d->count; i++) {
    const rr_rail_dev *rd = d->rail[i];
    const rr_rail_dev_attr *a = &rd->attr;
    const rr_netif *nif = &d->nif[i];
    char abuf[64], gbuf[64];
    int ptr = rr_core_ptr_support(i);
    printf("%s{\"dev\":%d,\"name\":", i ? "," : "", i);
    json_str(a->name[0] ? a->name : nif->name);
    printf(",\"transport\":");
    json_str(rd->ops->name);
    printf(",\"address\":");
    json_str(addr_str(&nif->addr, abuf, sizeof abuf));
    printf(",\"netdev\":");
    json_str(a->netdev);
    printf(",\"speed_mbps\":%d,\"numa_node\":%d,\"pci_path\":", nif->speed_mbps, nif->numa_node);
    json_str(nif->pci_path);
    printf(",\"state\":\"%s\"", is_rdma(rd) ? "ACTIVE" : nif->is_up ? "UP" : "DOWN");
    if (is_rdma(rd)) {
      printf(",\"port\":%d,\"guid\":\"0x%016" PRIx64 "\",\"link_layer\":", a->port, a->guid);
      json_str(a->link);
      printf(",\"gid_index\":%d,\"gid\":\"%s\",\"lid\":%u", a->gid_index, gid_str(a->gid, gbuf, sizeof gbuf),
             (unsigned)a->lid);
    }
    printf(",\"gpudirect\":{\"cuda\":%s,\"dmabuf\":%s},\"ptr_support\":%d}", ptr & RR_PTR_CUDA ? "true" : "false",
           ptr & RR_PTR_DMABUF ? "true" : "false", ptr);
  }
  printf("],\"left_out\":[");
  for (int i = 0; i < d->nleft; i++) {
    const rr_left_out *l = &d->left[i];
    printf("%s{\"name\":", i ? "," : "");
    json_str(l->name);
    printf(",\"transport\":");
    json_str(l->transport);
    printf(",\"reason\":");
    json_str(l->reason);
    printf(",\"why\":");
    json_str(l->why);
    putchar('}');
  }
  char abuf[64];
  printf("],\"oob\":{\"needed\":%s,\"name\":", d->need_oob ? "true" : "false");
  json_str(d->has_oob ? d->oob.name : "");
  printf(",\"address\":");
  json_str(d->has_oob ? addr_str(&d->oob.addr, abuf, sizeof abuf) : "");
  printf("},\"memlock\":{\"limit_bytes\":%" PRId64 ",\"cap_ipc_lock\":%s,\"ok\":%s}}\n",
         m->unlimited ? (int64_t)-1 : (int64_t)m->limit, m->cap_ipc_lock ? "true" : "false", m->ok ? "true" : "false");
}

static void print_gpudirect(int ptr) {
  printf("    GPUDirect RDMA: by address %s, by DMA-BUF %s\n",
         ptr & RR_PTR_CUDA ? "yes" : "no (nvidia-peermem not loaded)",
         ptr & RR_PTR_DMABUF ? "yes" : "no (ibv_reg_dmabuf_mr unsupported here)");
}

static void print_text(const rr_params *p, const rr_devices *d, const memlock_view *m) {
  int nrdma = 0;
  for (int i = 0; i < d->count; i++) nrdma += is_rdma(d->rail[i]);
  printf("RERAIL_SOCKET_IFNAME=%s  ->  %d device(s): %d RDMA port(s), %d TCP interface(s)\n",
         p->socket_ifname[0] ? p->socket_ifname : "(default)", d->count, nrdma, d->count - nrdma);
  for (int i = 0; i < d->count; i++) {
    const rr_rail_dev *rd = d->rail[i];
    const rr_rail_dev_attr *a = &rd->attr;
    const rr_netif *nif = &d->nif[i];
    char abuf[64], gbuf[64];
    const char *pci = nif->pci_path[0] ? nif->pci_path : "- (virtual)";
    if (is_rdma(rd)) {
      printf("dev %d  %-14s %-10s ACTIVE  %d Mb/s\n", i, a->name, a->link, nif->speed_mbps);
      printf("    GID %d %s", a->gid_index, gid_str(a->gid, gbuf, sizeof gbuf));
      if (a->lid) printf("  LID 0x%x", (unsigned)a->lid);
      printf("  netdev %s  NUMA %d\n", a->netdev[0] ? a->netdev : "-", nif->numa_node);
      printf("    PCI %s\n", pci);
      print_gpudirect(rr_core_ptr_support(i));
    } else {
      printf("dev %d  %-14s TCP        %-6s  %d Mb/s  %s\n", i, nif->name, nif->is_up ? "UP" : "DOWN",
             nif->speed_mbps, addr_str(&nif->addr, abuf, sizeof abuf));
      printf("    NUMA %d  PCI %s  (host memory only: sockets move bytes through the CPU)\n", nif->numa_node, pci);
    }
  }
  if (d->count == 0) printf("no usable device: NCCL would fall back to its own transports\n");
  if (d->nleft) printf("left out:\n");
  for (int i = 0; i < d->nleft; i++) printf("  %-14s %s\n", d->left[i].name, d->left[i].why);
  if (d->need_oob) {
    char abuf[64];
    if (d->has_oob)
      printf("out-of-band interface: %s %s (connection setup of the RDMA ports travels over it)\n", d->oob.name,
             addr_str(&d->oob.addr, abuf, sizeof abuf));
    else
      printf("out-of-band interface: none is up with an address%s%s: RDMA ports set up over their own "
             "address, or not at all\n", p->socket_ifname[0] ? " among RERAIL_SOCKET_IFNAME=" : "", p->socket_ifname);
  }
  if (nrdma && !m->ok)
    printf("warning: RLIMIT_MEMLOCK is %" PRIu64 " KiB and this process lacks CAP_IPC_LOCK: registering memory "
           "on the RDMA ports will fail (ibv_reg_mr: Cannot allocate memory) once a job pins more than that. "
           "Set it unlimited: `ulimit -l unlimited`, docker/podman `--ulimit memlock=-1`, Slurm "
           "PropagateResourceLimits, or `* - memlock unlimited` in /etc/security/limits.conf.\n",
           m->limit >> 10);
}

int cmd_devices(int argc, char **argv) {
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: rerail devices [--json]\n"
             "  the devices the net plugin would pool here (the same discovery and settings:\n"
             "  RERAIL_TRANSPORT, RERAIL_IB_HCA, RERAIL_SOCKET_IFNAME ...), what it leaves out and\n"
             "  why, the out-of-band interface, and whether RLIMIT_MEMLOCK allows registration\n");
      return 0;
    } else {
      fprintf(stderr, "rerail devices: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  const rr_params *p = rr_params_get();
  const rr_devices *d = rr_core_devices_discover();
  memlock_view m = memlock_read();
  if (json) print_json(p, d, &m);
  else print_text(p, d, &m);
  return 0;
}
