/* Fuzz target: the verbs rail's control ring as a hostile peer fills it,
 * read by the real reader (verbs_ring_read / verbs_ring_consume /
 * verbs_ring_credit, the code the verbs rail runs on every progress call).
 *
 * The input is a script: a header that sets the reader's counts, then
 * steps. The peer writes well-formed messages (the real encoder) or any
 * bytes anywhere in the ring and the credit word; the reader reads, the
 * engine delivers ordered requests, the rail sends messages of its own.
 * Every answer of the reader is checked against a model of the slot format
 * written here from the format's description (verbs_ring.h), not from the
 * reader's code: a forged stamp, length, count or credit must be refused,
 * a message delivered must be exactly what the slot held and no longer than
 * the rail's control maximum, and the counts must stay consistent. The ring
 * is an allocation of exactly its size, so a read past it is caught. */
#include <endian.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "verbs_ring.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  rr_log_set_logger(fuzz_quiet_logger);
  return 0;
}

/* The input, consumed front to back; what is missing reads as zero. */
typedef struct script {
  const uint8_t *p;
  size_t left;
} script;

static uint8_t take8(script *s) {
  if (!s->left) return 0;
  s->left--;
  return *s->p++;
}
static uint32_t take16(script *s) { return take8(s) | (uint32_t)take8(s) << 8; }
static uint32_t take32(script *s) { return take16(s) | take16(s) << 16; }

static uint32_t raw32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return le32toh(v);
}

/* The model: what the reader must answer for the slot of message s->rx_msgs. */
static verbs_ring_read_result model(const uint8_t *ring, const verbs_ring_state *s) {
  const uint8_t *slot = ring + (s->rx_msgs % VERBS_RING_SLOTS) * VERBS_RING_SLOT_BYTES;
  uint32_t stamp = (uint32_t)(s->rx_msgs % 0xffffffffu) + 1u;
  uint32_t head = raw32(slot), len = raw32(slot + 4), ops = raw32(slot + 8), credit = raw32(slot + 12);
  if (head == 0) return VERBS_RING_READ_EMPTY;
  /* A stamp still landing a byte at a time: each of its 4 bytes 0 or the stamp's. */
  uint8_t hb[4], sb[4];
  memcpy(hb, slot, 4);
  uint32_t le = htole32(stamp);
  memcpy(sb, &le, 4);
  int landing = 1;
  for (int i = 0; i < 4; i++) landing &= hb[i] == 0 || hb[i] == sb[i];
  if (head != stamp && landing) return VERBS_RING_READ_EMPTY;
  if (head != stamp || len > RR_RAIL_CTRL_MAX) return VERBS_RING_READ_MALFORMED;
  if (raw32(slot + 16 + ((len + 3) & ~3u)) != stamp) return VERBS_RING_READ_EMPTY;
  int64_t back = (int32_t)(ops - s->rx_last_ops), ahead = (int32_t)(ops - s->rx_ops);
  if (back < 0 || ahead > (int64_t)s->max_ahead) return VERBS_RING_READ_BAD_ORDER;
  if (ahead > 0) return VERBS_RING_READ_HELD;
  int64_t more = (int32_t)(credit - (uint32_t)s->tx_acked);
  if (more > 0 && (uint64_t)more > s->tx_msgs - s->tx_acked) return VERBS_RING_READ_BAD_CREDIT;
  return VERBS_RING_READ_READY;
}

static void check_state(const verbs_ring_state *s) {
  FUZZ_CHECK(s->tx_acked <= s->tx_msgs);
  FUZZ_CHECK(s->tx_msgs - s->tx_acked <= VERBS_RING_SLOTS);
}

/* One read as ring_deliver does it; 0 when the endpoint would fail. */
static int read_one(uint8_t *ring, verbs_ring_state *s) {
  verbs_ring_msg m;
  memset(&m, 0xee, sizeof m);
  const uint8_t *slot = ring + (s->rx_msgs % VERBS_RING_SLOTS) * VERBS_RING_SLOT_BYTES;
  verbs_ring_read_result want = model(ring, s);
  verbs_ring_read_result got = verbs_ring_read(ring, s, &m);
  FUZZ_CHECK(got == want);
  if (got != VERBS_RING_READ_READY) return got >= 0;
  /* Delivered: exactly the slot's message, within the rail's limit. */
  FUZZ_CHECK(m.len <= RR_RAIL_CTRL_MAX);
  FUZZ_CHECK(m.len == raw32(slot + 4) && m.ops == raw32(slot + 8) && m.credit == raw32(slot + 12));
  FUZZ_CHECK(memcmp(m.body, slot + VERBS_RING_HDR, m.len) == 0);
  verbs_ring_state before = *s;
  verbs_ring_consume(ring, s, &m);
  FUZZ_CHECK(s->rx_msgs == before.rx_msgs + 1 && s->rx_last_ops == m.ops && s->rx_ops == before.rx_ops);
  FUZZ_CHECK(s->tx_msgs == before.tx_msgs && s->tx_acked >= before.tx_acked);
  /* The slot reads as empty for the next lap, the trailer included. */
  uint32_t end = VERBS_RING_HDR + ((m.len + 3) & ~3u) + 4;
  for (uint32_t i = 0; i < end; i++) FUZZ_CHECK(slot[i] == 0);
  check_state(s);
  return 1;
}

enum step { PEER_MSG, PEER_BYTES, READ, DELIVER_OP, SEND, CREDIT_WORD, NSTEPS };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint8_t *ring;
  static uint8_t slotbuf[VERBS_RING_SLOT_BYTES];
  if (!ring && !(ring = malloc(VERBS_RING_BYTES))) abort();
  memset(ring, 0, VERBS_RING_BYTES);
  script in = {data, size};

  verbs_ring_state s;
  s.rx_msgs = take32(&in);
  s.rx_ops = take32(&in);
  s.rx_last_ops = s.rx_ops - take8(&in);
  s.max_ahead = (1u + take8(&in) % 4u) * 768u; /* 1-4 QPs of 256 send + 512 receive requests */
  s.tx_acked = take16(&in);
  s.tx_msgs = s.tx_acked + take8(&in) % (VERBS_RING_SLOTS + 1);

  while (in.left) {
    switch (take8(&in) % NSTEPS) {
    case PEER_MSG: { /* a message as a peer's encoder writes it, counts near ours */
      uint64_t n = s.rx_msgs + take8(&in) % (VERBS_RING_SLOTS + 2);
      uint32_t ops = s.rx_ops + (uint32_t)(int8_t)take8(&in);
      uint32_t credit = (uint32_t)s.tx_acked + (uint32_t)(int8_t)take8(&in);
      uint32_t len = take16(&in) % (RR_RAIL_CTRL_MAX + 1);
      uint8_t body[RR_RAIL_CTRL_MAX] = {0};
      for (uint32_t i = 0; i < len && in.left; i++) body[i] = take8(&in);
      uint32_t bytes = verbs_ring_encode(slotbuf, n, ops, credit, body, len);
      FUZZ_CHECK(bytes <= VERBS_RING_SLOT_BYTES);
      memcpy(ring + verbs_ring_slot_off(n), slotbuf, bytes);
      break;
    }
    case PEER_BYTES: { /* anything, anywhere: forged fields, half-landed writes */
      uint32_t off = (take16(&in) | (uint32_t)take8(&in) << 16) % VERBS_RING_BYTES;
      uint32_t n = take8(&in);
      for (uint32_t i = 0; i < n && off + i < VERBS_RING_BYTES && in.left; i++) ring[off + i] = take8(&in);
      break;
    }
    case READ:
      for (int k = 0; k < 4; k++)
        if (!read_one(ring, &s)) return 0; /* refused: the rail fails the endpoint */
      break;
    case DELIVER_OP:
      s.rx_ops++;
      break;
    case SEND: /* a message of ours, when a credit allows it */
      if (s.tx_msgs - s.tx_acked < VERBS_RING_SLOTS) s.tx_msgs++;
      break;
    case CREDIT_WORD: { /* the count without a message, as post_ctrl reads it */
      uint32_t w = (uint32_t)s.tx_acked + (uint32_t)(int8_t)take8(&in);
      w = htole32(w);
      memcpy(ring + VERBS_RING_CREDIT_OFF, &w, 4);
      uint32_t consumed = verbs_ring_credit_word(ring);
      int64_t more = (int32_t)(consumed - (uint32_t)s.tx_acked);
      uint64_t acked = 0;
      int r = verbs_ring_credit(&s, consumed, &acked);
      FUZZ_CHECK((r != 0) == (more > 0 && (uint64_t)more > s.tx_msgs - s.tx_acked));
      if (r != 0) return 0;
      FUZZ_CHECK(acked >= s.tx_acked && acked <= s.tx_msgs);
      s.tx_acked = acked;
      break;
    }
    }
    check_state(&s);
  }
  return 0;
}
