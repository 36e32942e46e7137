/* The rules of connect_plan.h. */
#include "connect_plan.h"

enum rr_connect_verdict rr_connect_decide(const rr_connect_rail_view *v, int n, int settled,
                                          uint32_t *later, uint32_t *dropped) {
  *later = *dropped = 0;
  int ready = 0, alive = 0;
  for (int r = 0; r < n; r++) {
    ready |= v[r].status == RAIL_READY;
    alive |= v[r].status != RAIL_FAILED;
  }
  /* Nothing up yet: keep trying every rail that may still come (the
   * connect timeout bounds it), unless none can. */
  if (!ready) return alive ? RR_CONNECT_WAIT : RR_CONNECT_FAIL;
  for (int r = 0; r < n; r++) {
    if (v[r].status != RAIL_PENDING) continue;
    /* A rail that has not failed may be about to come up: it gets the
     * settle time. One that failed is down now; waiting is for nothing. */
    if (!v[r].failed && !settled) return RR_CONNECT_WAIT;
    if (v[r].base) *later |= 1u << r;
    else *dropped |= 1u << r;
  }
  return RR_CONNECT_COMMIT;
}

int rr_connect_backups_short(const rr_connect_rail_view *v, int n, int want) {
  int hoped = 0;
  for (int r = 1; r < n; r++)
    hoped += v[r].status == RAIL_READY || (v[r].status == RAIL_PENDING && !v[r].failed);
  return hoped < want ? want - hoped : 0;
}
