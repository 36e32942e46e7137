/* What connect() does with the rails it planned, decided from their states
 * alone (pure: unit tested in test/unit/test_connect_plan.c).
 *
 * connect() plans a primary rail (the NIC NCCL named, to the listener's first
 * address) and backups along the failover chain, and runs every rail's setup
 * sockets at once. A NIC of either end may be down meanwhile; the connection
 * must neither fail nor wait for it while another rail works:
 *
 *  - A rail whose attempt fails for any reason but the listener failing its
 *    proof (not our peer) is retried until the connection goes on; until a
 *    rail is up that lasts up to RERAIL_CONNECT_TIMEOUT (the caller's bound).
 *  - Once a rail is up, the connection goes on as soon as every other rail is
 *    up, failed at least once, or had the settle time (the progress timeout)
 *    since connect began. A rail whose listener has answered (its handshake
 *    is under way: the peer is alive and reachable that way, merely slow, as
 *    a listener sweeping hundreds of sockets under load is) is waited for
 *    longer, up to the patience bound: giving it up would leave the
 *    connection without that backup until a reopen, which the same slow
 *    listener answers no sooner.
 *  - A rail of the first plan that is not up then belongs to the connection
 *    all the same, as a rail that failed ("later"): both ends hold it down and
 *    the connector reopens it once its path works. A rail added to replace a
 *    backup that failed joins only if it is up.
 *  - While fewer backups than wanted are up or still hoped for (or none at all
 *    while the primary is down), the next NIC of the chain is planned too, so
 *    a connection reaches its peer over any NIC that works even when the first
 *    ones planned are down. */
#ifndef RERAIL_CORE_CONNECT_PLAN_H
#define RERAIL_CORE_CONNECT_PLAN_H
#include <stdint.h>

/* A planned rail's state (connect_rail.status). */
enum { RAIL_PENDING = 0, RAIL_READY, RAIL_FAILED, RAIL_LATER };

typedef struct rr_connect_rail_view {
  uint8_t status;   /* RAIL_PENDING, RAIL_READY or RAIL_FAILED */
  uint8_t failed;   /* an attempt at it failed (it is being retried) */
  uint8_t base;     /* of the first plan: kept as a later rail when it is not up */
  uint8_t answered; /* the listener has answered this attempt (its handshake is under way) */
} rr_connect_rail_view;

enum rr_connect_verdict {
  RR_CONNECT_WAIT = 0,      /* call again */
  RR_CONNECT_COMMIT,        /* go on: *later and *dropped say what becomes of the rails not up */
  RR_CONNECT_FAIL,          /* no rail can ever reach the peer */
};

/* v[0] is the primary. settled: the settle time since connect began is
 * over; patience_over: so is the longer bound for rails whose listener has
 * answered. On RR_CONNECT_COMMIT, *later: rails kept for later; *dropped:
 * pending rails left out (close them). Rails RAIL_FAILED are in neither. */
enum rr_connect_verdict rr_connect_decide(const rr_connect_rail_view *v, int n, int settled, int patience_over,
                                          uint32_t *later, uint32_t *dropped);

/* How many more backups to plan (0 or more): want minus the backups that
 * are up or still hoped for (pending, and no attempt failed yet or the
 * listener answers the one under way); with none
 * wanted (RERAIL_BACKUPS=0), one while no rail at all is up or hoped for. */
int rr_connect_backups_short(const rr_connect_rail_view *v, int n, int want);

/* The listener's side: what a first connection's COMMIT makes of the rails
 * that arrived. The COMMIT may come before the last PROOFs of the rails it
 * names (the connector sends it behind its PROOFs when the set of rails can
 * only change by a failure): a rail not whole yet is waited for. A rail
 * whose sockets were lost (the listener saw its stream end: its connector
 * closed it, or its path reset it) is not: it joins as a failed one (*lost:
 * held down, reopened by the connector like any failed rail) and the
 * connection goes on over the others (*up) at once; waiting would be for
 * sockets that never come back. The primary lost falls to the next rail
 * up. RR_COMMIT_DROP: none of the rails it names is left, the connection is
 * over. whole: the rails whose every socket the listener holds; lost_seen:
 * the rails whose sockets it saw end. */
enum rr_commit_verdict { RR_COMMIT_WAIT = 0, RR_COMMIT_GO, RR_COMMIT_DROP };
enum rr_commit_verdict rr_commit_resolve(uint32_t committed, uint32_t whole, uint32_t lost_seen, uint32_t *up,
                                         uint32_t *lost);

#endif
