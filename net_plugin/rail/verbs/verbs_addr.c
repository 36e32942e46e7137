/* A verbs endpoint's address on the wire: what the peer needs to connect its
 * QPs to ours, little-endian at fixed offsets (verbs_addr.h). It arrives
 * inside the authenticated setup handshake, and is still checked field by
 * field before any of it reaches modify_qp; a blob decodes only if encoding
 * it again gives the same bytes. */
#include "verbs_addr.h"

#include <endian.h>
#include <string.h>

static void put16(uint8_t *p, uint16_t v) {
  v = htole16(v);
  memcpy(p, &v, 2);
}
static void put32(uint8_t *p, uint32_t v) {
  v = htole32(v);
  memcpy(p, &v, 4);
}
static uint16_t get16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return le16toh(v);
}
static uint32_t get32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return le32toh(v);
}
static size_t qpn_off(int k) { return k == 0 ? 0 : 44 + 4 * (size_t)(k - 1); }

void rr_verbs_addr_encode(const rr_verbs_addr *a, uint8_t out[RR_VERBS_ADDR_LEN]) {
  memset(out, 0, RR_VERBS_ADDR_LEN);
  for (int k = 0; k < a->nqps && k < RR_VERBS_MAX_QPS; k++) put32(out + qpn_off(k), a->qpn[k]);
  put32(out + 4, a->psn);
  memcpy(out + 8, a->gid, 16);
  put16(out + 24, a->lid);
  out[26] = a->mtu;
  out[27] = a->link_layer;
  put16(out + 28, a->ring_slots);
  out[30] = a->nqps;
  uint64_t ring = htole64(a->ring_addr);
  memcpy(out + 32, &ring, 8);
  put32(out + 40, a->ring_rkey);
  uint64_t scratch = htole64(a->scratch_addr);
  memcpy(out + 104, &scratch, 8);
  put32(out + 112, a->scratch_rkey);
}

rr_status rr_verbs_addr_decode(const void *in, uint32_t len, rr_verbs_addr *a) {
  const uint8_t *p = in;
  if (!in || len != RR_VERBS_ADDR_LEN) return RR_ERR_PROTOCOL;
  memset(a, 0, sizeof *a);
  a->psn = get32(p + 4);
  memcpy(a->gid, p + 8, 16);
  a->lid = get16(p + 24);
  a->mtu = p[26];
  a->link_layer = p[27];
  a->ring_slots = get16(p + 28);
  a->nqps = p[30];
  uint64_t ring;
  memcpy(&ring, p + 32, 8);
  a->ring_addr = le64toh(ring);
  a->ring_rkey = get32(p + 40);
  uint64_t scratch;
  memcpy(&scratch, p + 104, 8);
  a->scratch_addr = le64toh(scratch);
  a->scratch_rkey = get32(p + 112);
  if (p[31] || a->nqps < 1 || a->nqps > RR_VERBS_MAX_QPS || a->psn >= 1u << 24 || a->mtu < IBV_MTU_256 ||
      a->mtu > IBV_MTU_4096 || (a->link_layer != IBV_LINK_LAYER_INFINIBAND && a->link_layer != IBV_LINK_LAYER_ETHERNET))
    return RR_ERR_PROTOCOL;
  for (int k = 0; k < RR_VERBS_MAX_QPS; k++) {
    uint32_t q = get32(p + qpn_off(k));
    if (k < a->nqps ? q >= 1u << 24 : q != 0) return RR_ERR_PROTOCOL;
    a->qpn[k] = q;
  }
  return RR_OK;
}
