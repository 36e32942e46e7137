#include "verbs_ports.h"
#include "rail.h"
#include "rr_log.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* RoCE GID tables can hold 1024 entries (rxe) or more; the ones in use are at the front. */
#define RR_GID_SCAN_MAX 256

static int read_line(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char *ok = fgets(buf, (int)len, f);
  fclose(f);
  if (!ok) return -1;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

rr_status rr_gid_parse_text(const char *text, uint8_t raw[16]) {
  for (int g = 0; g < 8; g++) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
      char c = *text++;
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return RR_ERR_INVALID;
      v = v << 4 | (unsigned)d;
    }
    raw[2 * g] = (uint8_t)(v >> 8);
    raw[2 * g + 1] = (uint8_t)v;
    if (g < 7 && *text++ != ':') return RR_ERR_INVALID;
  }
  return *text == '\0' || *text == '\n' ? RR_OK : RR_ERR_INVALID;
}

const char *rr_gid_str(const uint8_t raw[16], char *buf, size_t len) {
  if (!inet_ntop(AF_INET6, raw, buf, (socklen_t)len)) snprintf(buf, len, "<gid>");
  return buf;
}

int rr_verbs_read_gid_table(const char *sysfs_root, const char *dev, int port, rr_gid_entry *tbl,
                            char (*ndevs)[IF_NAMESIZE], int max) {
  char path[PATH_MAX], line[128];
  int n = 0;
  for (int i = 0; i < max; i++, n++) {
    snprintf(path, sizeof path, "%s/class/infiniband/%s/ports/%d/gids/%d", sysfs_root, dev, port, i);
    memset(&tbl[i], 0, sizeof tbl[i]);
    if (ndevs) ndevs[i][0] = '\0';
    if (read_line(path, line, sizeof line) != 0) break;
    if (rr_gid_parse_text(line, tbl[i].raw) != RR_OK) {
      memset(tbl[i].raw, 0, sizeof tbl[i].raw);
      continue;
    }
    static const uint8_t zero[16];
    if (!memcmp(tbl[i].raw, zero, sizeof zero)) continue;
    snprintf(path, sizeof path, "%s/class/infiniband/%s/ports/%d/gid_attrs/types/%d", sysfs_root,
             dev, port, i);
    if (read_line(path, line, sizeof line) == 0) tbl[i].type = rr_gid_type_parse(line);
    if (ndevs) {
      snprintf(path, sizeof path, "%s/class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", sysfs_root,
               dev, port, i);
      if (read_line(path, line, sizeof line) == 0 && strlen(line) < IF_NAMESIZE)
        strcpy(ndevs[i], line);
    }
  }
  return n;
}

int rr_verbs_gdr_present(const char *sysfs_root) {
  /* The files NCCL looks for: nv_peer_mem (and its non-coherent variant),
   * nvidia-peermem as the memory-peers interface and as a module. */
  static const char *const marks[] = {"kernel/mm/memory_peers/nv_mem/version",
                                      "kernel/mm/memory_peers/nv_mem_nc/version",
                                      "kernel/mm/memory_peers/nvidia-peermem/version",
                                      "module/nvidia_peermem/version"};
  char path[PATH_MAX];
  for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", sysfs_root, marks[i]);
    if (access(path, F_OK) == 0) return 1;
  }
  return 0;
}

static void read_device_sysfs(const char *root, rr_verbs_port *p) {
  char path[PATH_MAX], line[32];
  p->pci_path[0] = '\0';
  snprintf(path, sizeof path, "%s/class/infiniband/%s/device", root, p->dev_name);
  char *real = realpath(path, NULL);
  if (real) {
    if (strlen(real) < sizeof p->pci_path) strcpy(p->pci_path, real);
    free(real);
  }
  p->numa_node = -1;
  snprintf(path, sizeof path, "%s/class/infiniband/%s/device/numa_node", root, p->dev_name);
  if (read_line(path, line, sizeof line) == 0) p->numa_node = atoi(line);
}

/* The GID a RoCE port uses. sysfs gives the table with types in one place; without it (a
 * container with a partial /sys) the table comes from libibverbs, types unknown. */
static int choose_roce_gid(const rr_ibv_api *api, struct ibv_context *ctx, const rr_verbs_opts *o,
                           rr_verbs_port *p, int tbl_len) {
  int max = tbl_len < RR_GID_SCAN_MAX ? tbl_len : RR_GID_SCAN_MAX;
  if (max <= 0) return -1;
  rr_gid_entry *tbl = calloc((size_t)max, sizeof *tbl);
  char(*ndevs)[IF_NAMESIZE] = calloc((size_t)max, sizeof *ndevs);
  int idx = -1;
  if (!tbl || !ndevs) goto out;
  int n = rr_verbs_read_gid_table(o->sysfs_root, p->dev_name, p->port, tbl, ndevs, max);
  if (n == 0) {
    for (int i = 0; i < max; i++, n++) {
      union ibv_gid g;
      if (api->query_gid(ctx, (uint8_t)p->port, i, &g) != 0) break;
      memcpy(tbl[i].raw, g.raw, sizeof g.raw);
    }
  }
  idx = rr_gid_choose(tbl, n, o->gid_index);
  if (idx >= 0) {
    p->gid_index = idx;
    memcpy(p->gid.raw, tbl[idx].raw, sizeof p->gid.raw);
    p->gid_type = tbl[idx].type;
    strcpy(p->netdev, ndevs[idx]);
  }
out:
  free(tbl);
  free(ndevs);
  return idx >= 0 ? 0 : -1;
}

static const char *gid_type_name(int t) {
  return t == RR_GID_TYPE_ROCE_V2 ? "RoCE v2" : t == RR_GID_TYPE_IB_ROCE_V1 ? "RoCE v1" : "type ?";
}

const char *rr_verbs_port_state_str(int state) {
  switch (state) {
  case IBV_PORT_NOP: return "NOP";
  case IBV_PORT_DOWN: return "DOWN";
  case IBV_PORT_INIT: return "INIT";
  case IBV_PORT_ARMED: return "ARMED";
  case IBV_PORT_ACTIVE: return "ACTIVE";
  case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
  default: return "?";
  }
}

/* A port (or a whole device, port 0) left out: logged, and told to whoever asked. */
static void left_out(const rr_verbs_opts *o, const char *dev, int port, const char *reason, const char *why) {
  char name[RR_VERBS_DEV_NAME_MAX + 8];
  if (port > 0) snprintf(name, sizeof name, "%s:%d", dev, port);
  else snprintf(name, sizeof name, "%s", dev);
  RR_INFO(RR_SUB_INIT | RR_SUB_NET, "rerail: verbs %s: %s; skipping it", name, why);
  if (o->left_out) o->left_out(o->left_out_arg, name, reason, why);
}

/* Fill out[*count] from one port when it qualifies; returns 1 when it was added. */
static int add_port(const rr_ibv_api *api, struct ibv_context *ctx, const rr_verbs_opts *o,
                    const rr_hca_filter *filter, const char *name,
                    const struct ibv_device_attr *da, int port, rr_verbs_port *p) {
  char why[96];
  if (!rr_hca_filter_match(filter, name, port)) {
    left_out(o, name, port, RR_LEFT_OUT_NOT_SELECTED, "not selected by RERAIL_IB_HCA (else NCCL_IB_HCA)");
    return 0;
  }
  struct ibv_port_attr pa;
  if (rr_ibv_query_port(api, ctx, (uint8_t)port, &pa) != 0) {
    left_out(o, name, port, RR_LEFT_OUT_UNUSABLE, "ibv_query_port failed");
    return 0;
  }
  if (pa.state != IBV_PORT_ACTIVE) {
    snprintf(why, sizeof why, "port state %s, not ACTIVE", rr_verbs_port_state_str(pa.state));
    left_out(o, name, port, RR_LEFT_OUT_NOT_ACTIVE, why);
    return 0;
  }
  /* Old providers leave the link layer unspecified: that means InfiniBand. */
  int ll = pa.link_layer == IBV_LINK_LAYER_UNSPECIFIED ? IBV_LINK_LAYER_INFINIBAND : pa.link_layer;
  if (ll != IBV_LINK_LAYER_INFINIBAND && ll != IBV_LINK_LAYER_ETHERNET) {
    snprintf(why, sizeof why, "link layer %d is neither InfiniBand nor Ethernet", (int)pa.link_layer);
    left_out(o, name, port, RR_LEFT_OUT_UNUSABLE, why);
    return 0;
  }
  memset(p, 0, sizeof *p);
  snprintf(p->dev_name, sizeof p->dev_name, "%s", name);
  p->port = port;
  p->link_layer = ll;
  p->lid = pa.lid;
  p->active_mtu = pa.active_mtu;
  p->speed_mbps = rr_ib_port_speed_mbps(pa.active_speed, pa.active_width);
  p->guid = be64toh(da->node_guid);
  p->max_qp = da->max_qp;
  p->max_qp_wr = da->max_qp_wr;
  p->max_cqe = da->max_cqe;
  p->max_sge = da->max_sge;
  p->max_qp_rd_atom = da->max_qp_rd_atom;
  read_device_sysfs(o->sysfs_root, p);
  if (ll == IBV_LINK_LAYER_ETHERNET) {
    if (choose_roce_gid(api, ctx, o, p, pa.gid_tbl_len) != 0) {
      left_out(o, name, port, RR_LEFT_OUT_UNUSABLE, "RoCE port with no usable GID (no address on its interface?)");
      return 0;
    }
  } else {
    /* InfiniBand routes by LID; the GID (index 0 unless overridden) serves global routing. */
    p->gid_index = o->gid_index >= 0 && o->gid_index < pa.gid_tbl_len ? o->gid_index : 0;
    if (api->query_gid(ctx, (uint8_t)port, p->gid_index, &p->gid) != 0) memset(&p->gid, 0, sizeof p->gid);
  }
  char gs[64], what[96];
  if (ll == IBV_LINK_LAYER_ETHERNET)
    snprintf(what, sizeof what, "RoCE, %s on %s", gid_type_name(p->gid_type),
             p->netdev[0] ? p->netdev : "?");
  else
    snprintf(what, sizeof what, "IB, LID %u", (unsigned)p->lid);
  RR_INFO(RR_SUB_INIT | RR_SUB_NET, "rerail: verbs %s:%d (%s) GID %d %s speed %d Mbps max_qp %d pci %s",
          name, port, what, p->gid_index, rr_gid_str(p->gid.raw, gs, sizeof gs), p->speed_mbps,
          p->max_qp, p->pci_path[0] ? p->pci_path : "(none)");
  return 1;
}

rr_status rr_verbs_discover(const rr_ibv_api *api, const rr_verbs_opts *opts, rr_verbs_port *out,
                            int max, int *count) {
  *count = 0;
  if (!api) return RR_OK;
  rr_verbs_opts o = *opts;
  if (!o.sysfs_root) o.sysfs_root = "/sys";
  rr_hca_filter filter;
  rr_hca_filter_parse(o.hca_spec, &filter);
  int ndev = 0;
  struct ibv_device **devs = api->get_device_list(&ndev);
  if (!devs) {
    RR_INFO(RR_SUB_INIT | RR_SUB_NET, "rerail: no verbs devices (ibv_get_device_list failed)");
    return RR_OK;
  }
  for (int d = 0; d < ndev && devs[d] && *count < max; d++) {
    const char *name = api->get_device_name(devs[d]);
    if (!name || strlen(name) >= RR_VERBS_DEV_NAME_MAX) continue;
    struct ibv_context *ctx = api->open_device(devs[d]);
    if (!ctx) {
      RR_WARN("rerail: verbs device %s cannot be opened; skipping it", name);
      if (o.left_out) o.left_out(o.left_out_arg, name, RR_LEFT_OUT_UNUSABLE, "ibv_open_device failed");
      continue;
    }
    struct ibv_device_attr da;
    if (api->query_device(ctx, &da) != 0) {
      RR_WARN("rerail: verbs device %s: ibv_query_device failed; skipping it", name);
      if (o.left_out) o.left_out(o.left_out_arg, name, RR_LEFT_OUT_UNUSABLE, "ibv_query_device failed");
      api->close_device(ctx);
      continue;
    }
    for (int port = 1; port <= da.phys_port_cnt && *count < max; port++)
      if (add_port(api, ctx, &o, &filter, name, &da, port, &out[*count])) (*count)++;
    api->close_device(ctx);
  }
  api->free_device_list(devs);
  if (*count == 0)
    RR_INFO(RR_SUB_INIT | RR_SUB_NET, "rerail: no usable verbs ports (%d device(s) seen)", ndev);
  return RR_OK;
}

struct ibv_context *rr_verbs_open_device(const rr_ibv_api *api, const char *name) {
  if (!api || !name) return NULL;
  int ndev = 0;
  struct ibv_device **devs = api->get_device_list(&ndev);
  if (!devs) return NULL;
  struct ibv_context *ctx = NULL;
  for (int d = 0; d < ndev && devs[d] && !ctx; d++) {
    const char *n = api->get_device_name(devs[d]);
    if (n && !strcmp(n, name)) ctx = api->open_device(devs[d]);
  }
  api->free_device_list(devs);
  return ctx;
}

int rr_verbs_dmabuf_supported(const rr_ibv_api *api, struct ibv_context *ctx) {
  if (!api || !ctx || !api->reg_dmabuf_mr) return 0;
  struct ibv_pd *pd = api->alloc_pd(ctx);
  if (!pd) return 0;
  errno = 0;
  struct ibv_mr *mr = api->reg_dmabuf_mr(pd, 0, 64, 0, -1, 0);
  int err = errno;
  /* Cannot succeed with fd -1; if a provider accepted it anyway, undo it and say no. */
  if (mr) api->dereg_mr(mr);
  api->dealloc_pd(pd);
  return !mr && err != 0 && err != EOPNOTSUPP && err != EPROTONOSUPPORT;
}

int rr_verbs_choose_roce_gid(const rr_ibv_api *api, struct ibv_context *ctx, const rr_verbs_opts *opts,
                             rr_verbs_port *p, int gid_tbl_len) {
  return choose_roce_gid(api, ctx, opts, p, gid_tbl_len);
}
