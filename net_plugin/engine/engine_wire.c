/* Control messages to and from bytes: explicit little-endian fields, every
 * length and reserved field checked on the way in. */
#include "engine_wire.h"

#include <string.h>

typedef struct wbuf {
  uint8_t *p;
  uint32_t len, cap;
} wbuf;

static void put8(wbuf *b, uint8_t v) {
  if (b->len + 1 <= b->cap) b->p[b->len] = v;
  b->len += 1;
}
static void put16(wbuf *b, uint16_t v) {
  put8(b, (uint8_t)v);
  put8(b, (uint8_t)(v >> 8));
}
static void put32(wbuf *b, uint32_t v) {
  put16(b, (uint16_t)v);
  put16(b, (uint16_t)(v >> 16));
}
static void put64(wbuf *b, uint64_t v) {
  put32(b, (uint32_t)v);
  put32(b, (uint32_t)(v >> 32));
}

typedef struct rbuf {
  const uint8_t *p;
  uint32_t off, len;
  int short_read;
} rbuf;

static uint8_t get8(rbuf *b) {
  if (b->off + 1 > b->len) {
    b->short_read = 1;
    return 0;
  }
  return b->p[b->off++];
}
static uint16_t get16(rbuf *b) {
  uint16_t lo = get8(b);
  return (uint16_t)(lo | (uint16_t)get8(b) << 8);
}
static uint32_t get32(rbuf *b) {
  uint32_t lo = get16(b);
  return lo | (uint32_t)get16(b) << 16;
}
static uint64_t get64(rbuf *b) {
  uint64_t lo = get32(b);
  return lo | (uint64_t)get32(b) << 32;
}

static void put_cts_body(wbuf *b, const engine_cts *c) {
  put32(b, c->seq);
  put8(b, c->n);
  put8(b, c->nrails);
  put16(b, 0);
  for (int i = 0; i < c->n; i++) {
    put32(b, (uint32_t)c->e[i].tag);
    put32(b, c->e[i].flags);
    put64(b, c->e[i].addr);
    put64(b, c->e[i].size);
    for (int r = 0; r < c->nrails; r++) put32(b, c->e[i].rkey[r]);
  }
}

uint32_t engine_msg_encode(const engine_msg *m, uint8_t *buf, uint32_t cap) {
  wbuf b = {.p = buf, .cap = cap};
  put8(&b, m->type);
  put8(&b, 0);
  put16(&b, 0);
  switch (m->type) {
  case ENGINE_CTRL_CTS:
    if (m->u.cts.n < 1 || m->u.cts.n > RR_NET_MAX_RECVS || m->u.cts.nrails > RR_MAX_RAILS) return 0;
    put_cts_body(&b, &m->u.cts);
    break;
  case ENGINE_CTRL_ACK:
    put32(&b, m->u.ack.seq);
    put32(&b, m->u.ack.more);
    break;
  case ENGINE_CTRL_PROBE:
    put32(&b, m->u.probe_rail);
    break;
  case ENGINE_CTRL_BYE:
    put32(&b, m->u.bye_seq);
    break;
  case ENGINE_CTRL_PLACED:
    if (m->u.placed.sub >= RR_NET_MAX_RECVS) return 0;
    put32(&b, m->u.placed.seq);
    put8(&b, m->u.placed.sub);
    put8(&b, 0);
    put16(&b, 0);
    put64(&b, m->u.placed.size);
    break;
  case ENGINE_CTRL_FAIL:
  case ENGINE_CTRL_DOWN:
    put32(&b, m->u.fail.epoch);
    put32(&b, m->u.fail.down_mask);
    put32(&b, m->u.fail.degraded_mask);
    put32(&b, m->u.fail.local_mask);
    break;
  case ENGINE_CTRL_RESUME_SLOT:
    if (m->u.slot.cts.n < 1 || m->u.slot.cts.n > RR_NET_MAX_RECVS || m->u.slot.cts.nrails > RR_MAX_RAILS)
      return 0;
    put32(&b, m->u.slot.epoch);
    for (int i = 0; i < m->u.slot.cts.n; i++) put32(&b, m->u.slot.prefix[i]);
    put_cts_body(&b, &m->u.slot.cts);
    break;
  case ENGINE_CTRL_RESUME_END:
    put32(&b, m->u.end.epoch);
    put32(&b, m->u.end.recv_seq);
    put32(&b, m->u.end.slot_mask);
    break;
  default:
    return 0;
  }
  return b.len <= cap ? b.len : 0;
}

/* The body of a clear-to-send; n comes from the caller when it was read
 * before (RESUME_SLOT), else from the body. */
static const char *get_cts_body(rbuf *b, int nrails, int n_known, engine_cts *c) {
  c->seq = get32(b);
  c->n = get8(b);
  c->nrails = get8(b);
  if (get16(b) != 0) return "reserved bits set in a clear-to-send";
  if (c->n < 1 || c->n > RR_NET_MAX_RECVS) return "a clear-to-send with no or too many receives";
  if (n_known && c->n != n_known) return "a resume whose counts disagree";
  if (c->nrails != nrails) return "a clear-to-send with keys for another number of rails";
  for (int i = 0; i < c->n; i++) {
    engine_cts_entry *e = &c->e[i];
    e->tag = (int32_t)get32(b);
    e->flags = get32(b);
    if (e->flags & ~ENGINE_CTS_FLAGS) return "reserved bits set in a clear-to-send entry";
    e->addr = get64(b);
    e->size = get64(b);
    if (e->size > UINT64_MAX - e->addr) return "a receive buffer that wraps the address space";
    memset(e->rkey, 0, sizeof e->rkey);
    for (int r = 0; r < c->nrails; r++) e->rkey[r] = get32(b);
  }
  return NULL;
}

rr_status engine_msg_decode(const void *buf, uint32_t len, int nrails, engine_msg *m,
                            const char **why) {
  rbuf b = {.p = buf, .len = len};
  const char *bad = NULL;
  memset(m, 0, sizeof *m);
  m->type = get8(&b);
  if (get8(&b) != 0 || get16(&b) != 0) bad = "reserved bits set in a control header";
  switch (bad ? 0 : m->type) {
  case 0:
    break;
  case ENGINE_CTRL_CTS:
    bad = get_cts_body(&b, nrails, 0, &m->u.cts);
    break;
  case ENGINE_CTRL_ACK:
    m->u.ack.seq = get32(&b);
    m->u.ack.more = get32(&b);
    break;
  case ENGINE_CTRL_PROBE:
    m->u.probe_rail = get32(&b);
    if (m->u.probe_rail >= RR_MAX_RAILS) bad = "a probe for no rail";
    break;
  case ENGINE_CTRL_BYE:
    m->u.bye_seq = get32(&b);
    break;
  case ENGINE_CTRL_PLACED:
    m->u.placed.seq = get32(&b);
    m->u.placed.sub = get8(&b);
    if (get8(&b) != 0 || get16(&b) != 0) bad = "reserved bits set in a placement claim";
    else if (m->u.placed.sub >= RR_NET_MAX_RECVS) bad = "a placement claim for no sub-receive";
    m->u.placed.size = get64(&b);
    break;
  case ENGINE_CTRL_FAIL:
  case ENGINE_CTRL_DOWN:
    m->u.fail.epoch = get32(&b);
    m->u.fail.down_mask = get32(&b);
    /* The short form (12 bytes) is a peer that knows no degraded rails. */
    if (len != 12) {
      m->u.fail.degraded_mask = get32(&b);
      m->u.fail.local_mask = get32(&b);
    }
    if (nrails < 32 && m->u.fail.down_mask >> nrails) bad = "a failure notice for rails the connection lacks";
    else if ((m->u.fail.degraded_mask | m->u.fail.local_mask) & ~m->u.fail.down_mask)
      bad = "a failure notice that qualifies rails it does not name";
    else if (m->u.fail.degraded_mask & m->u.fail.local_mask)
      bad = "a failure notice with a rail both degraded and down at its end";
    break;
  case ENGINE_CTRL_RESUME_SLOT: {
    m->u.slot.epoch = get32(&b);
    /* n (the prefix count) is stated in the CTS body behind the prefixes:
     * take the one count whose body agrees and whose length matches. */
    int n = 0;
    for (int k = 1; k <= RR_NET_MAX_RECVS && !n; k++) {
      uint32_t body = b.off + 4u * (uint32_t)k;
      if (body + 8 <= b.len && b.p[body + 4] == k && len == body + ENGINE_CTS_HDR - 4 +
                                                            (uint32_t)k * ENGINE_CTS_ENTRY(nrails))
        n = k;
    }
    if (!n) {
      bad = "a resume of the wrong length";
      break;
    }
    for (int i = 0; i < n; i++) m->u.slot.prefix[i] = get32(&b);
    bad = get_cts_body(&b, nrails, n, &m->u.slot.cts);
    break;
  }
  case ENGINE_CTRL_RESUME_END:
    m->u.end.epoch = get32(&b);
    m->u.end.recv_seq = get32(&b);
    m->u.end.slot_mask = get32(&b);
    break;
  default:
    bad = "an unknown control message";
  }
  if (!bad && b.short_read) bad = "a truncated control message";
  if (!bad && b.off != len) bad = "a control message with trailing bytes";
  if (bad) {
    if (why) *why = bad;
    return RR_ERR_PROTOCOL;
  }
  return RR_OK;
}
