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
 *    rail is up that lasts until RERAIL_CONNECT_TIMEOUT passes without progress
 *    (the caller's bound, rr_setup_clock below).
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

/* Setup deadlines run from progress, not from the first call.
 *
 * NCCL's proxy sets connections up round-robin from one thread: with
 * hundreds of them, or an emulated NIC, one sweep over all takes longer
 * than RERAIL_CONNECT_TIMEOUT (512 connections under Soft-RoCE: ~35 s at
 * ~70 ms per connect() call), so a connection's handshake spans several
 * timeouts while its peer answers every message promptly. A deadline from
 * the first call failed such a connection in the very call its PROOF went
 * out. What tells a dead peer from a slow one is whether anything moves:
 * the connector fails a connection only after a whole timeout in which no
 * setup socket of it advanced (connected, sent or received a message). A
 * peer that is gone still fails within the timeout; one that answers slowly
 * never does. rr_setup_clock is that rule, fed a counter of progress:
 * connect() feeds it the connection's own progress plus the authenticated
 * answers its peer process gave any connection (peer_progress.h), since a
 * peer with thousands of connections answers each only in its turn. */
typedef struct rr_setup_clock {
  uint64_t progress_ns; /* the latest progress seen (the start, before any) */
  uint64_t seen;        /* the progress counter then */
} rr_setup_clock;
void rr_setup_clock_start(rr_setup_clock *k, uint64_t progress, uint64_t now);
/* progress: the counter now (any change is progress, which restarts the
 * clock). 1 once more than limit_ns passed without progress. */
int rr_setup_clock_expired(rr_setup_clock *k, uint64_t progress, uint64_t now, uint64_t limit_ns);

/* The listener's side: an authenticated group (the sockets of one
 * connection that proved the secret, waiting for the rest or the COMMIT).
 * Between its ACCEPTs and its COMMIT nothing travels for a whole sweep of
 * the connector, which may exceed the timeout (above). So a group is kept
 * while the connector holds its sockets open (open: some socket of it is
 * not seen to end), up to RR_SETUP_CAP_TIMEOUTS timeouts since it began (a
 * host that vanished without a FIN); one whose sockets all ended goes a
 * timeout after its last progress. Either way never while it progresses
 * (idle_ns: since a socket joined, the COMMIT came or a socket ended). */
/* Also how long connect() keeps an attempt NCCL stopped calling for: a
 * turn of NCCL's over all connections may outlast one timeout. */
#define RR_SETUP_CAP_TIMEOUTS 4
int rr_group_stale(uint64_t age_ns, uint64_t idle_ns, int open, uint64_t timeout_ns);

#endif
