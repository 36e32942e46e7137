/* What the FAIL and DOWN notices say of the rails they name, beyond "down":
 * which ones the sender demoted (the receiver holds them DEGRADED on that
 * word and restores them on the next notice that no longer names them) and
 * which failed at this end's own NIC (the peer then knows the fault is not
 * its own: where = peer). Both ends agree on a demotion through these, as on
 * a failure (docs/protocol.md). Moved out of engine_gray.c, whose job is the
 * sender's measurements and verdicts; this file only reads and writes rail
 * fields and the notice. The receiver's length check of a probe write (the
 * sender's probes are engine_gray.c's) is here too: it needs no link state. */
#include "engine_internal.h"
#include "rr_counters.h"
#include "rr_health_bus.h"

engine_msg engine_notice(const rr_engine *e, uint8_t type, uint32_t epoch, uint32_t down_mask) {
  engine_msg m = {.type = type, .u.fail = {.epoch = epoch, .down_mask = down_mask}};
  for (int i = 0; i < e->nrails; i++) {
    if (!(down_mask & (1u << i))) continue;
    if (e->rails[i].state == RR_RAIL_DEGRADED || e->rails[i].g_demoted) m.u.fail.degraded_mask |= 1u << i;
    else if (e->rails[i].where == RR_WHERE_LOCAL) m.u.fail.local_mask |= 1u << i;
  }
  return m;
}

void engine_notice_where(rr_engine *e, const engine_msg *m) {
  for (int i = 0; i < e->nrails; i++) {
    engine_rail *rl = &e->rails[i];
    if (!(m->u.fail.local_mask & (1u << i))) continue;
    /* The peer's own NIC: ours is not to blame. A rail already down here
     * (we saw it first, as silence) learns where its fault is. */
    rl->where_hint = RR_WHERE_PEER;
    if (rl->state == RR_RAIL_DOWN || rl->state == RR_RAIL_DEAD) rl->where = RR_WHERE_PEER;
  }
}

void engine_gray_on_notice(rr_engine *e, const engine_msg *m) {
  for (int i = 0; i < e->nrails; i++) {
    uint32_t bit = 1u << i;
    engine_rail *rl = &e->rails[i];
    if ((m->u.fail.degraded_mask & bit) && rl->state == RR_RAIL_ACTIVE) {
      e->stats.demotions++;
      rr_counter_inc(RR_CTR_DEMOTIONS);
      rl->g_demoted = 1;
      engine_rail_set_state(e, i, RR_RAIL_DEGRADED, "the sender demoted it");
    } else if ((m->u.fail.degraded_mask & bit) && rl->state != RR_RAIL_DEAD) {
      /* Demoted and reopened by the sender (verbs): the fresh endpoint is
       * held demoted here too, never put back in service on signs of life. */
      rl->g_demoted = 1;
      if (rl->state == RR_RAIL_RECOVERING || (rl->state == RR_RAIL_DOWN && rl->fresh)) {
        rl->fresh = 0;
        engine_rail_set_state(e, i, RR_RAIL_DEGRADED, "reopened; the sender holds it demoted");
      }
    } else if (!(m->u.fail.degraded_mask & bit)) {
      rl->g_demoted = 0;
      if (!(m->u.fail.down_mask & bit) && rl->state == RR_RAIL_DEGRADED)
        engine_rail_set_state(e, i, RR_RAIL_ACTIVE, "the sender restored it");
    }
  }
}

rr_status engine_gray_probe_begin(rr_engine *e, int rail, const rr_write_hdr *h) {
  if (h->len > ENGINE_PROBE_MAX_WRITE)
    return engine_violation(e, rail, ENGINE_VIOL_LENGTH, "a probe write of %u bytes", (unsigned)h->len);
  return RR_OK;
}
