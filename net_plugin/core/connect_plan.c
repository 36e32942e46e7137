/* The rules of connect_plan.h. */
#include "connect_plan.h"

enum rr_connect_verdict rr_connect_decide(const rr_connect_rail_view *v, int n, int settled, int patience_over,
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
    /* A rail whose listener is answering the attempt under way is coming,
     * slowly: it gets the patience bound, whatever earlier attempts met. A
     * rail that has not failed may be about to come up: it gets the settle
     * time. One that failed, with no answer since, is down now; waiting is
     * for nothing. */
    if (v[r].answered && !patience_over) return RR_CONNECT_WAIT;
    if (!v[r].failed && !settled) return RR_CONNECT_WAIT;
    if (v[r].base) *later |= 1u << r;
    else *dropped |= 1u << r;
  }
  return RR_CONNECT_COMMIT;
}

/* Up, or may be: no attempt failed yet, or the listener answers this one. */
static int hoped(const rr_connect_rail_view *v) {
  return v->status == RAIL_READY || (v->status == RAIL_PENDING && (!v->failed || v->answered));
}

int rr_connect_backups_short(const rr_connect_rail_view *v, int n, int want) {
  int backups = 0;
  for (int r = 1; r < n; r++) backups += hoped(&v[r]);
  if (backups < want) return want - backups;
  /* Even without backups wanted, a connection whose every rail is down
   * reaches its peer over another NIC rather than not at all. */
  return !backups && (n < 1 || !hoped(&v[0]));
}

enum rr_commit_verdict rr_commit_resolve(uint32_t committed, uint32_t whole, uint32_t lost_seen, uint32_t *up,
                                         uint32_t *lost) {
  *up = committed & whole;
  *lost = committed & ~whole & lost_seen;
  if (committed & ~whole & ~lost_seen) return RR_COMMIT_WAIT; /* a PROOF still to come */
  return *up ? RR_COMMIT_GO : RR_COMMIT_DROP;
}

void rr_setup_clock_start(rr_setup_clock *k, uint64_t progress, uint64_t now) {
  k->progress_ns = now;
  k->seen = progress;
}

int rr_setup_clock_expired(rr_setup_clock *k, uint64_t progress, uint64_t now, uint64_t limit_ns) {
  if (progress != k->seen) rr_setup_clock_start(k, progress, now);
  return now - k->progress_ns > limit_ns;
}

int rr_group_stale(uint64_t age_ns, uint64_t idle_ns, int open, uint64_t timeout_ns) {
  if (idle_ns <= timeout_ns) return 0;
  return !open || age_ns > RR_SETUP_CAP_TIMEOUTS * timeout_ns;
}
