/* The simulated rail's items in words, for the trace (--verbose): a write's
 * immediate or eager name, and a control message decoded as the engine
 * would. Only the trace reads these; nothing decides on them. */
#include "sim.h"

#include <stdio.h>
#include <string.h>

const char *sim_imm_str(char *buf, size_t n, const rr_write_hdr *h) {
  if (h->flags & RR_WRITE_EAGER)
    snprintf(buf, n, "eager e%u seq %u tag %d len %u epoch tag %u", imm_epoch(h->imm), h->eager.seq, (int)h->eager.tag,
             h->len, h->epoch_tag);
  else
    snprintf(buf, n, "e%u slot%u sub%u chunk%u%s%s len %u epoch tag %u", imm_epoch(h->imm), imm_slot(h->imm),
             imm_sub(h->imm), imm_chunk(h->imm), imm_last(h->imm) ? " last" : "", imm_ack_now(h->imm) ? " ack-now" : "",
             h->len, h->epoch_tag);
  return buf;
}

const char *sim_ctrl_str(char *buf, size_t n, const void *msg, uint32_t len) {
  static const char *const names[] = {"?", "CTS", "ACK", "PROBE", "FAIL", "RESUME_SLOT", "RESUME_END", "DOWN", "BYE", "PLACED"};
  engine_msg m;
  if (engine_msg_decode(msg, len, RR_MAX_RAILS + 1, &m, NULL) != RR_OK && m.type != ENGINE_CTRL_CTS &&
      m.type != ENGINE_CTRL_RESUME_SLOT) {
    snprintf(buf, n, "type %u (%u bytes)", len ? *(const uint8_t *)msg : 0, len);
    return buf;
  }
  const char *name = m.type < sizeof names / sizeof *names ? names[m.type] : "?";
  switch (m.type) {
  case ENGINE_CTRL_ACK: snprintf(buf, n, "ACK seq %u mask 0x%x", m.u.ack.seq, m.u.ack.more); break;
  case ENGINE_CTRL_FAIL:
  case ENGINE_CTRL_DOWN: snprintf(buf, n, "%s e%u down 0x%x", name, m.u.fail.epoch, m.u.fail.down_mask); break;
  case ENGINE_CTRL_RESUME_END:
    snprintf(buf, n, "RESUME_END e%u recv_seq %u slots 0x%x", m.u.end.epoch, m.u.end.recv_seq, m.u.end.slot_mask);
    break;
  case ENGINE_CTRL_PROBE: snprintf(buf, n, "PROBE rail %u", m.u.probe_rail); break;
  case ENGINE_CTRL_PLACED:
    snprintf(buf, n, "PLACED seq %u sub %u size %llu", m.u.placed.seq, m.u.placed.sub,
             (unsigned long long)m.u.placed.size);
    break;
  default: {
    /* CTS and RESUME_SLOT: the sequence number sits at a known offset. */
    uint32_t seq = 0, epoch = 0, prefix0 = 0;
    const uint8_t *b = msg;
    if (m.type == ENGINE_CTRL_CTS && len >= 8) memcpy(&seq, b + 4, 4);
    if (m.type == ENGINE_CTRL_RESUME_SLOT && len >= 12) {
      memcpy(&epoch, b + 4, 4);
      memcpy(&prefix0, b + 8, 4);
      /* the CTS body follows the prefixes; its count is at body + 4 */
      for (uint32_t k = 1; k <= RR_NET_MAX_RECVS; k++)
        if (8 + 4 * k + 5 <= len && b[8 + 4 * k + 4] == k) {
          memcpy(&seq, b + 8 + 4 * k, 4);
          break;
        }
    }
    if (m.type == ENGINE_CTRL_CTS) snprintf(buf, n, "CTS seq %u", seq);
    else snprintf(buf, n, "%s e%u seq %u prefix0 %u", name, epoch, seq, prefix0);
  }
  }
  return buf;
}
