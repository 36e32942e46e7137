/* Verbs devices and ports rerail can use: ACTIVE InfiniBand and RoCE ports that RERAIL_IB_HCA
 * selects, each with the GID it addresses peers with and the properties NCCL asks for. */
#ifndef RERAIL_VERBS_PORTS_H
#define RERAIL_VERBS_PORTS_H
#include <limits.h>
#include <net/if.h>
#include <stdint.h>

#include "rr_status.h"
#include "verbs_lib.h"
#include "verbs_select.h"

#define RR_VERBS_MAX_PORTS 32
#define RR_VERBS_DEV_NAME_MAX 64

typedef struct rr_verbs_port {
  char dev_name[RR_VERBS_DEV_NAME_MAX]; /* "mlx5_0", "rxe0" */
  int port;                             /* 1-based */
  int link_layer;                       /* IBV_LINK_LAYER_INFINIBAND or IBV_LINK_LAYER_ETHERNET */
  int gid_index;                        /* RoCE: the chosen GID; IB: RERAIL_IB_GID_INDEX or 0 */
  union ibv_gid gid;
  int gid_type;                         /* enum rr_gid_type (RoCE) */
  char netdev[IF_NAMESIZE];             /* RoCE: the GID's network interface; "" if unknown */
  uint16_t lid;                         /* IB */
  int active_mtu;                       /* enum ibv_mtu */
  int speed_mbps;                       /* active speed x width; 0 when unknown */
  uint64_t guid;                        /* node GUID, host byte order */
  char pci_path[PATH_MAX];              /* realpath of the device in sysfs; "" for a virtual one */
  int numa_node;                        /* -1 when unknown */
  int max_qp;                           /* device limits: maxComms is max_qp */
  int max_qp_wr;
  int max_cqe;
  int max_sge;
  int max_qp_rd_atom;
} rr_verbs_port;

typedef struct rr_verbs_opts {
  const char *hca_spec;   /* RERAIL_IB_HCA; NULL/"" = every device */
  int gid_index;          /* RERAIL_IB_GID_INDEX; -1 = choose */
  const char *sysfs_root; /* "/sys"; tests pass fake trees */
  /* Told of each port left out (rail.h's rr_rail_probe.left_out); may be NULL. */
  void (*left_out)(void *arg, const char *name, const char *reason, const char *why);
  void *left_out_arg;
} rr_verbs_opts;

/* Enumerate usable ports into out[0..max): devices in libibverbs order, ports in order.
 * api NULL (no libibverbs) gives *count = 0 and RR_OK: "no verbs devices" is not an error.
 * Devices that cannot be opened or queried are reported and skipped. */
rr_status rr_verbs_discover(const rr_ibv_api *api, const rr_verbs_opts *opts, rr_verbs_port *out,
                            int max, int *count);

/* The GID a RoCE port uses, chosen by the rules of discovery (rr_gid_choose over the port's
 * table, from sysfs or else libibverbs, opts->gid_index as the override) among the first
 * gid_tbl_len entries: fills p's gid, gid_index, gid_type and netdev. -1 (p untouched) when no
 * entry qualifies. Discovery uses it, and so does a GID change event (verbs_events.c). */
int rr_verbs_choose_roce_gid(const rr_ibv_api *api, struct ibv_context *ctx, const rr_verbs_opts *opts,
                             rr_verbs_port *p, int gid_tbl_len);

/* Open the device named `name` (NULL when libibverbs does not list it or it cannot be opened);
 * close it with api->close_device. */
struct ibv_context *rr_verbs_open_device(const rr_ibv_api *api, const char *name);

/* Read port `port` of `dev`'s GID table from sysfs (ports/P/gids/N, gid_attrs/types/N), up to
 * max entries; empty entries are kept (all zero) so indices match. Returns the number read
 * (0 when sysfs has no table), and fills ndevs (when not NULL, IF_NAMESIZE each) from
 * gid_attrs/ndevs/N. */
int rr_verbs_read_gid_table(const char *sysfs_root, const char *dev, int port, rr_gid_entry *tbl,
                            char (*ndevs)[IF_NAMESIZE], int max);

/* Parse sysfs's GID text "fe80:0000:...:000a" (8 groups of 4 hex digits) into 16 bytes. */
rr_status rr_gid_parse_text(const char *text, uint8_t raw[16]);

/* "::ffff:10.55.0.1" / "fe80::55:ff:fe00:a"; buf of at least 46 bytes. */
const char *rr_gid_str(const uint8_t raw[16], char *buf, size_t len);

/* Can this device register DMA-BUF memory? Asked as NCCL asks it: a registration with an
 * invalid file descriptor fails with EOPNOTSUPP/EPROTONOSUPPORT when the provider or kernel
 * cannot do it at all, with another error (EBADF) when it could. 0 when libibverbs predates
 * ibv_reg_dmabuf_mr or a PD cannot be made. */
int rr_verbs_dmabuf_supported(const rr_ibv_api *api, struct ibv_context *ctx);

/* "ACTIVE", "DOWN", ... for enum ibv_port_state. */
const char *rr_verbs_port_state_str(int state);

/* Is GPUDirect RDMA available (nvidia_peermem or the older nv_peer_mem loaded)? */
int rr_verbs_gdr_present(const char *sysfs_root);

#endif
