/* The pure decisions of verbs device discovery, apart from libibverbs so they can be tested
 * on any host: which (device, port) RERAIL_IB_HCA selects, which GID a RoCE port uses, what a
 * port's speed is, and what sysfs's GID type text means. */
#ifndef RERAIL_VERBS_SELECT_H
#define RERAIL_VERBS_SELECT_H
#include <stdint.h>

#include "rr_status.h"

/* A parsed RERAIL_IB_HCA (NCCL_IB_HCA syntax): "mlx5_0:1,mlx5_1" selects port 1 of devices
 * named mlx5_0* and every port of mlx5_1*; a leading '^' excludes the listed ones instead; a
 * '=' (after '^' if any) makes names exact instead of prefixes. */
#define RR_HCA_MAX_ENTRIES 32
#define RR_HCA_NAME_MAX 64
typedef struct rr_hca_filter {
  int exclude, exact, count;
  struct {
    char name[RR_HCA_NAME_MAX];
    int port;  /* -1: every port */
  } entry[RR_HCA_MAX_ENTRIES];
} rr_hca_filter;

/* Parse spec (NULL or "" selects everything). Malformed entries (a port that is not a number
 * in 1..255, a name too long, too many entries) are reported once and skipped; the rest of
 * the list still applies. RR_ERR_INVALID when an entry was skipped (the filter is usable). */
rr_status rr_hca_filter_parse(const char *spec, rr_hca_filter *f);

/* Does the filter select port `port` (1-based) of device `dev`? */
int rr_hca_filter_match(const rr_hca_filter *f, const char *dev, int port);

/* GID types as sysfs names them (ports/P/gid_attrs/types/N). */
enum rr_gid_type { RR_GID_TYPE_UNKNOWN = 0, RR_GID_TYPE_IB_ROCE_V1, RR_GID_TYPE_ROCE_V2 };

/* "IB/RoCE v1\n", "RoCE v2\n" -> the type; anything else UNKNOWN. */
int rr_gid_type_parse(const char *text);

typedef struct rr_gid_entry {
  uint8_t raw[16];
  int type;  /* enum rr_gid_type */
} rr_gid_entry;

/* Is the GID IPv4-mapped (::ffff:a.b.c.d)? */
int rr_gid_is_ipv4(const uint8_t raw[16]);

/* The GID index a RoCE port uses, as NCCL chooses with its defaults: an IPv4-mapped GID before
 * an IPv6 one, RoCE v2 before v1 within a family (first index on ties); link-local GIDs only
 * when nothing else is there. Empty (all-zero) entries never qualify. override >= 0
 * (RERAIL_IB_GID_INDEX) is used as is when it names a non-empty entry of the table, else it is
 * reported and ignored. -1 when no entry qualifies. */
int rr_gid_choose(const rr_gid_entry *tbl, int n, int override);

/* Port speed in Mbps from ibv_port_attr's active_speed and active_width codes (per-lane rate
 * times lane count); 0 when a code is unknown. */
int rr_ib_port_speed_mbps(unsigned active_speed, unsigned active_width);

#endif
