/* A verbs endpoint's address blob (verbs_addr.c): encode, and decode with
 * every field checked. Pure: no libibverbs call, so fuzz targets link it. */
#ifndef RERAIL_VERBS_ADDR_H
#define RERAIL_VERBS_ADDR_H
#include <infiniband/verbs.h>
#include <stdint.h>

#include "rr_status.h"

/* Most QPs an endpoint offers (RERAIL_IB_QPS_PER_RAIL's upper bound). */
#define RR_VERBS_MAX_QPS 16

/* An endpoint's address on the wire (little-endian, 116 bytes): what the
 * peer needs to connect its QPs to ours, where it writes its control
 * messages (our control ring: address, key, number of slots), and where it
 * writes the filler of a probe (our scratch: address and key; address 0
 * when we have none, and then the peer's probes of this rail are refused).
 *   0 qpn[0] u32 | 4 psn u32 | 8 gid[16] | 24 lid u16 | 26 mtu | 27 link layer |
 *   28 ring slots u16 | 30 QPs u8 | 31 0 | 32 ring address u64 | 40 ring rkey u32 |
 *   44 qpn[1..15] u32 each (0 past the QPs offered) | 104 scratch address u64 |
 *   112 scratch rkey u32 */
#define RR_VERBS_ADDR_LEN 116
typedef struct rr_verbs_addr {
  uint32_t qpn[RR_VERBS_MAX_QPS];
  uint32_t psn;              /* the first PSN of every QP */
  uint8_t gid[16];
  uint16_t lid;
  uint8_t mtu;               /* enum ibv_mtu */
  uint8_t link_layer;        /* IBV_LINK_LAYER_* */
  uint8_t nqps;              /* QPs offered, 1..RR_VERBS_MAX_QPS */
  uint16_t ring_slots;       /* checked against the reader's own layout at connect */
  uint64_t ring_addr;        /* the control ring in the owner's memory */
  uint32_t ring_rkey;
  uint64_t scratch_addr;     /* RR_WRITE_PROBE_MAX bytes probe filler may land in (0: none) */
  uint32_t scratch_rkey;
} rr_verbs_addr;
void rr_verbs_addr_encode(const rr_verbs_addr *a, uint8_t out[RR_VERBS_ADDR_LEN]);
rr_status rr_verbs_addr_decode(const void *in, uint32_t len, rr_verbs_addr *a);

#endif
