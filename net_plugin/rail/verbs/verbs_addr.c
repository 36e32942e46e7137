/* A verbs endpoint's address on the wire: what the peer needs to connect its
 * QP to ours, little-endian at fixed offsets. It arrives inside the
 * authenticated setup handshake, and is still checked field by field before
 * any of it reaches modify_qp. */
#include "verbs_addr.h"

#include <endian.h>
#include <string.h>

void rr_verbs_addr_encode(const rr_verbs_addr *a, uint8_t out[RR_VERBS_ADDR_LEN]) {
  uint32_t qpn = htole32(a->qpn), psn = htole32(a->psn);
  uint16_t lid = htole16(a->lid);
  memset(out, 0, RR_VERBS_ADDR_LEN);
  memcpy(out, &qpn, 4);
  memcpy(out + 4, &psn, 4);
  memcpy(out + 8, a->gid, 16);
  memcpy(out + 24, &lid, 2);
  out[26] = a->mtu;
  out[27] = a->link_layer;
  uint64_t ring = htole64(a->ring_addr);
  uint32_t rkey = htole32(a->ring_rkey), slots = htole32(a->ring_slots);
  memcpy(out + 32, &ring, 8);
  memcpy(out + 40, &rkey, 4);
  memcpy(out + 44, &slots, 4);
}

rr_status rr_verbs_addr_decode(const void *in, uint32_t len, rr_verbs_addr *a) {
  const uint8_t *p = in;
  if (!in || len != RR_VERBS_ADDR_LEN) return RR_ERR_PROTOCOL;
  uint32_t qpn, psn, reserved;
  uint16_t lid;
  memcpy(&qpn, p, 4);
  memcpy(&psn, p + 4, 4);
  memcpy(&lid, p + 24, 2);
  memcpy(&reserved, p + 28, 4);
  *a = (rr_verbs_addr){.qpn = le32toh(qpn), .psn = le32toh(psn), .lid = le16toh(lid), .mtu = p[26],
                       .link_layer = p[27]};
  memcpy(a->gid, p + 8, 16);
  uint64_t ring;
  uint32_t rkey, slots;
  memcpy(&ring, p + 32, 8);
  memcpy(&rkey, p + 40, 4);
  memcpy(&slots, p + 44, 4);
  a->ring_addr = le64toh(ring), a->ring_rkey = le32toh(rkey), a->ring_slots = le32toh(slots);
  if (reserved || a->qpn >= 1u << 24 || a->psn >= 1u << 24 || a->mtu < IBV_MTU_256 || a->mtu > IBV_MTU_4096 ||
      (a->link_layer != IBV_LINK_LAYER_INFINIBAND && a->link_layer != IBV_LINK_LAYER_ETHERNET))
    return RR_ERR_PROTOCOL;
  return RR_OK;
}

