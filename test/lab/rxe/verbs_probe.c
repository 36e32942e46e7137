/* verbs_probe: print what the verbs rail's device layer finds, one line per usable port, so
 * the rxe lab can check discovery, RERAIL_IB_HCA and the GID choice against real devices.
 * Reads RERAIL_IB_HCA and RERAIL_IB_GID_INDEX as the plugin does. Exit 0 unless libibverbs
 * could not be used at all while --require-lib was given. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rr_counters.h"
#include "rr_params.h"
#include "verbs_ports.h"

int main(int argc, char **argv) {
  int require_lib = argc > 1 && !strcmp(argv[1], "--require-lib");
  const rr_params *prm = rr_params_get();
  const rr_ibv_api *api = rr_ibv_load();
  printf("verbs_probe: lib=%s\n", api ? "ok" : "absent");
  /* The process counter an operator reads in the .prom file: tests decide on it, not on the log. */
  printf("verbs_probe: lib_unusable=%llu\n", (unsigned long long)rr_counter_get(RR_CTR_VERBS_LIB_UNUSABLE));
  if (!api) return require_lib ? 1 : 0;
  rr_verbs_opts o = {.hca_spec = prm->ib_hca, .gid_index = prm->ib_gid_index, .sysfs_root = "/sys"};
  static rr_verbs_port ports[RR_VERBS_MAX_PORTS];
  int n = 0;
  if (rr_verbs_discover(api, &o, ports, RR_VERBS_MAX_PORTS, &n) != RR_OK) return 1;
  printf("verbs_probe: ports=%d\n", n);
  printf("verbs_probe: gdr=%d\n", rr_verbs_gdr_present("/sys"));
  for (int i = 0; i < n; i++) {
    const rr_verbs_port *p = &ports[i];
    char gs[64];
    struct ibv_context *ctx = rr_verbs_open_device(api, p->dev_name);
    int dmabuf = rr_verbs_dmabuf_supported(api, ctx);
    if (ctx) api->close_device(ctx);
    printf("port %s:%d link=%s gid_index=%d gid=%s gid_type=%s netdev=%s speed_mbps=%d "
           "guid=0x%016" PRIx64 " pci=%s numa=%d max_qp=%d max_qp_wr=%d mtu=%d dmabuf=%d\n",
           p->dev_name, p->port, p->link_layer == IBV_LINK_LAYER_ETHERNET ? "roce" : "ib",
           p->gid_index, rr_gid_str(p->gid.raw, gs, sizeof gs),
           p->gid_type == RR_GID_TYPE_ROCE_V2 ? "v2" : p->gid_type == RR_GID_TYPE_IB_ROCE_V1 ? "v1" : "?",
           p->netdev[0] ? p->netdev : "-", p->speed_mbps, p->guid, p->pci_path[0] ? p->pci_path : "-",
           p->numa_node, p->max_qp, p->max_qp_wr, p->active_mtu, dmabuf);
  }
  return 0;
}
