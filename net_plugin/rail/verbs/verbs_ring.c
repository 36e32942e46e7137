/* The control ring's slot format (verbs_ring.h). The NIC places a write in
 * the reader's memory while the reader polls it, so a slot is judged by its
 * stamps: the leading one says a message of this number has started to land,
 * the trailing one (at an offset that depends on the length) that all of it
 * has. A cleared slot is all zero, and no stamp is 0. A stamp still landing
 * (some of its bytes, the rest 0) is not yet a message, not a bad one. */
#include "verbs_ring.h"

#include <endian.h>
#include <string.h>

static void put32(uint8_t *p, uint32_t v) {
  v = htole32(v);
  memcpy(p, &v, 4);
}

/* A load the compiler may not hoist out of the polling loop, and behind
 * which the reads of what the stamp guards are not moved. */
static uint32_t load32(const uint8_t *p) {
  uint32_t v = __atomic_load_n((const uint32_t *)(const void *)p, __ATOMIC_ACQUIRE);
  return le32toh(v);
}

uint32_t verbs_ring_encode(void *out, uint64_t n, uint32_t ops, uint32_t credit, const void *body, uint32_t len) {
  uint8_t *p = out;
  uint32_t stamp = verbs_ring_stamp(n);
  put32(p, stamp);
  put32(p + 4, len);
  put32(p + 8, ops);
  put32(p + 12, credit);
  uint32_t tail = verbs_ring_trailer_off(len);
  memset(p + VERBS_RING_HDR, 0, tail - VERBS_RING_HDR);
  if (len) memcpy(p + VERBS_RING_HDR, body, len);
  put32(p + tail, stamp);
  return tail + 4;
}

/* The NIC need not store a 4-byte field at once (Soft-RoCE places a write
 * with the kernel's memcpy, byte by byte where that is `rep movsb` under an
 * emulated CPU), so a poll can read the stamp with only some of its bytes
 * landed over the cleared slot's zeros: every byte 0 or the stamp's own. */
static int stamp_landing(uint32_t head, uint32_t stamp) {
  for (unsigned b = 0; b < 32; b += 8) {
    uint32_t x = (head >> b) & 0xffu;
    if (x && x != ((stamp >> b) & 0xffu)) return 0;
  }
  return 1;
}

verbs_ring_peek_result verbs_ring_peek(const void *slot, uint64_t n, verbs_ring_msg *m) {
  const uint8_t *p = slot;
  uint32_t stamp = verbs_ring_stamp(n);
  uint32_t head = load32(p);
  if (head == 0) return VERBS_RING_EMPTY;
  if (head != stamp) return stamp_landing(head, stamp) ? VERBS_RING_EMPTY : VERBS_RING_BAD;
  uint32_t len = load32(p + 4);
  if (len > RR_RAIL_CTRL_MAX) return VERBS_RING_BAD;
  /* Not all of it has landed while the trailer is not the stamp (a cleared
   * slot holds 0 there). */
  if (load32(p + verbs_ring_trailer_off(len)) != stamp) return VERBS_RING_EMPTY;
  m->len = len;
  m->ops = load32(p + 8);
  m->credit = load32(p + 12);
  if (len) memcpy(m->body, p + VERBS_RING_HDR, len);
  return VERBS_RING_READY;
}

void verbs_ring_clear(void *slot, uint32_t len) {
  if (len > RR_RAIL_CTRL_MAX) len = RR_RAIL_CTRL_MAX;
  /* The stamp last: a poll between the two sees an empty slot. */
  memset((uint8_t *)slot + 4, 0, verbs_ring_trailer_off(len));
  __atomic_store_n((uint32_t *)slot, 0, __ATOMIC_RELEASE);
}

uint32_t verbs_ring_credit_word(const void *ring) { return load32((const uint8_t *)ring + VERBS_RING_CREDIT_OFF); }

int verbs_ring_credit(const verbs_ring_state *s, uint32_t consumed, uint64_t *acked) {
  *acked = s->tx_acked;
  int32_t more = (int32_t)(consumed - (uint32_t)s->tx_acked);
  if (more <= 0) return 0;
  if ((uint64_t)more > s->tx_msgs - s->tx_acked) return -1;
  *acked = s->tx_acked + (uint64_t)more;
  return 0;
}

verbs_ring_read_result verbs_ring_read(const void *ring, const verbs_ring_state *s, verbs_ring_msg *m) {
  const uint8_t *slot = (const uint8_t *)ring + verbs_ring_slot_off(s->rx_msgs);
  verbs_ring_peek_result r = verbs_ring_peek(slot, s->rx_msgs, m);
  if (r == VERBS_RING_EMPTY) return VERBS_RING_READ_EMPTY;
  if (r == VERBS_RING_BAD) return VERBS_RING_READ_MALFORMED;
  /* The peer cannot be further ahead than its send queues and our receive
   * queues hold, nor count backwards. */
  int32_t ahead = (int32_t)(m->ops - s->rx_ops);
  if ((int32_t)(m->ops - s->rx_last_ops) < 0 || (ahead > 0 && (uint32_t)ahead > s->max_ahead))
    return VERBS_RING_READ_BAD_ORDER;
  if (ahead > 0) return VERBS_RING_READ_HELD; /* behind a write (or drain) not yet delivered */
  uint64_t acked;
  if (verbs_ring_credit(s, m->credit, &acked) != 0) return VERBS_RING_READ_BAD_CREDIT;
  return VERBS_RING_READ_READY;
}

void verbs_ring_consume(void *ring, verbs_ring_state *s, const verbs_ring_msg *m) {
  uint64_t acked;
  if (verbs_ring_credit(s, m->credit, &acked) == 0) s->tx_acked = acked;
  verbs_ring_clear((uint8_t *)ring + verbs_ring_slot_off(s->rx_msgs), m->len);
  s->rx_msgs++;
  s->rx_last_ops = m->ops;
}
