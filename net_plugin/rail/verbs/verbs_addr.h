/* A verbs endpoint's address blob (verbs_addr.c): encode, and decode with
 * every field checked. Pure: no libibverbs call, so fuzz targets link it. */
#ifndef RERAIL_VERBS_ADDR_H
#define RERAIL_VERBS_ADDR_H
#include <infiniband/verbs.h>
#include <stdint.h>

#include "rr_status.h"

/* An endpoint's address on the wire (little-endian, 48 bytes): what the
 * peer needs to connect its QP to ours, and where it writes its control
 * messages (our control ring: address, key, number of slots). */
#define RR_VERBS_ADDR_LEN 48
typedef struct rr_verbs_addr {
  uint32_t qpn;
  uint32_t psn;
  uint8_t gid[16];
  uint16_t lid;
  uint8_t mtu;               /* enum ibv_mtu */
  uint8_t link_layer;        /* IBV_LINK_LAYER_* */
  uint32_t reserved;         /* 0 */
  uint64_t ring_addr;        /* the control ring in the owner's memory */
  uint32_t ring_rkey;
  uint32_t ring_slots;       /* checked against the reader's own layout at connect */
} rr_verbs_addr;
void rr_verbs_addr_encode(const rr_verbs_addr *a, uint8_t out[RR_VERBS_ADDR_LEN]);
rr_status rr_verbs_addr_decode(const void *in, uint32_t len, rr_verbs_addr *a);

#endif
