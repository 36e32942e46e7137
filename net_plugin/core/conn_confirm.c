/* The connector's last pass, behind NCCL's back.
 *
 * Setting up thousands of connections, NCCL calls connect() for each in
 * turn, and every message that waits for the listener's next turn costs the
 * connector a pass over all of them (bench/RESULTS.md, "Thousands of
 * connections"). When the COMMIT goes out behind the PROOFs (early_commit_due
 * in conn_connect.c), the listener hands its end out on the last PROOF, and
 * all the connector still waits for are the ACCEPTs: the listener's endpoint
 * blobs (empty for TCP) and its word that it took every socket. So the send
 * comm goes to NCCL then, one pass earlier, with no rail in its engine yet,
 * and the ACCEPTs are read here, by the first of NCCL's isend(), the monitor
 * or closeSend to come. Until they are in, isend() returns a NULL request
 * (NCCL tries again), which costs nothing: no byte could leave before the
 * rails are connected, and on loopback the ACCEPTs are normally there before
 * the first isend.
 *
 * Authentication is untouched: the listener proved itself with its CHALLENGE
 * before the PROOFs left, and every ACCEPT is still checked against the
 * handle's secret before its socket carries a byte of data.
 *
 * A socket the listener refuses now (crowded out, or NCCL closed it) ends
 * before its ACCEPT. What the listener holds decides what follows, and the
 * connector can tell: a socket that got its ACCEPT is in the listener's
 * group; the COMMIT rides on stream 0 of the commit rail, so the listener has
 * it once that socket got its ACCEPT, and never otherwise.
 *  - The COMMIT's socket refused, or a rail refused with no socket of it
 *    accepted (the listener holds nothing of it to see end), or no rail left
 *    whole: the listener never hands this attempt out (or drops it once its
 *    sockets end). The attempt starts over as a new connection, as connect()
 *    would have done: the comm NCCL holds is never in error for it.
 *  - Otherwise a rail with a refused socket is lost right after setup: its
 *    sockets close, the listener sees them end and hands its end out with
 *    that rail held down (docs/failover.md, "Lost after it was accepted"),
 *    and here it joins as a rail to reopen, which the engine reopens like
 *    any failed rail, through the reconnect path.
 * A listener that stops answering fails the connection only after
 * RERAIL_CONNECT_TIMEOUT without progress, as connect() does. */
#include "conn_confirm.h"
#include "rr_clock.h"
#include "rr_log.h"
#include "rr_params.h"

#include <stdatomic.h>

/* guards: the setup state (conn) and confirm_status of every send comm
 * whose `confirming` is set. Level 1, as connect_lock (engine and device
 * locks under it); the monitor, which holds its registry lock, only tries
 * it. */
static pthread_mutex_t confirm_lock = PTHREAD_MUTEX_INITIALIZER;

rr_status rr_conn_confirm_start(rr_send_comm *s) {
  s->conn.handed_out = 1;
  s->confirm_status = RR_AGAIN;
  s->magic = RR_MAGIC_SEND;
  atomic_store(&s->confirming, 1);
  rr_monitor_add_confirming(s);
  return RR_OK;
}

/* A step on every rail's ACCEPTs. A socket that ends before its ACCEPT
 * marks its rail lost; the rail's other sockets are read on (stream 0 of
 * the commit rail says whether the listener has the COMMIT), never
 * reopened. RR_OK: every rail is up or lost with a socket the listener
 * holds; RR_AGAIN; RR_ERR_RAIL: the attempt must start over; RR_ERR_PEER:
 * the primary's listener is not the handle's. */
static rr_status accepts_read(connect_state *c, uint64_t now) {
  for (int r = 0; r < c->nrails; r++) {
    connect_rail *cr = &c->rails[r];
    const char *why = "?";
    rr_status st = cr->status == RAIL_PENDING ? rr_conn_rail_advance(c, cr, r, now, 0, &why) : RR_OK;
    if (st == RR_OK) continue;
    if (st == RR_ERR_PROTOCOL && r == 0) {
      /* The primary's listener failed its proof: not the peer the handle
       * names, as connect() would have said (no retry changes that). */
      RR_WARN("connect: %s", why);
      return RR_ERR_PEER;
    }
    if (!cr->lost)
      RR_INFO(RR_SUB_NET, "connect: rail %d: the listener closed a setup socket before its ACCEPT (%s)", r, why);
    cr->lost = 1;
    cr->why = why;
    cr->retry_at_ns = UINT64_MAX; /* its fate is decided below, not retried */
  }
  const setup_stream *commit = &c->rails[c->commit_rail].s[0];
  if (commit->fd < 0) return RR_ERR_RAIL;
  if (commit->state != SS_DONE) return RR_AGAIN;
  int up = 0;
  for (int r = 0; r < c->nrails; r++) {
    const connect_rail *cr = &c->rails[r];
    up |= cr->status == RAIL_READY;
    if (cr->status != RAIL_PENDING) continue;
    if (!cr->lost) return RR_AGAIN;
    /* Lost: what the listener holds of it is known once each socket has
     * its ACCEPT or ended (one decided early would start over a connection
     * the listener hands out once it sees the rail end). */
    int held = 0;
    for (int i = 0; i < c->nstreams; i++) {
      if (cr->s[i].fd >= 0 && cr->s[i].state != SS_DONE) return RR_AGAIN;
      held |= cr->s[i].fd >= 0;
    }
    if (!held) return RR_ERR_RAIL;
  }
  return up ? RR_OK : RR_ERR_RAIL;
}

/* Every rail settled: the lost ones down for now, the rest into the engine. */
static rr_status install_settled(rr_send_comm *s) {
  connect_state *c = &s->conn;
  c->rails_mask = c->later_mask = 0;
  for (int r = 0; r < c->nrails; r++) {
    connect_rail *cr = &c->rails[r];
    if (cr->status == RAIL_PENDING && cr->lost) {
      rr_conn_rail_defer(c, cr);
      c->later_mask |= 1u << r;
    }
    if (cr->status == RAIL_READY) c->rails_mask |= 1u << r;
  }
  return rr_conn_install(s);
}

/* One step (confirm_lock held). After a start over the attempt runs
 * connect()'s state machine again; once its COMMIT is out, early, the
 * ACCEPTs are read as above (the same machine's late COMMIT means they are
 * in already). closing: closeSend's last step, which starts nothing over
 * (new sockets would only reach the listener to be closed). */
static rr_status confirm_step(rr_send_comm *s, int closing) {
  connect_state *c = &s->conn;
  uint64_t now = rr_now_ns();
  rr_status st = RR_OK;
  /* An attempt started over and not committed yet: the listener has
   * nothing of it to hand out. */
  if (!c->early && closing) return RR_AGAIN;
  if (!c->early) st = rr_conn_advance(s);
  if (st == RR_OK && c->early && !c->rails_mask) {
    st = accepts_read(c, now);
    if (st == RR_ERR_RAIL && closing) return st;
    if (st == RR_ERR_RAIL) {
      rr_conn_start_over(s, now);
      if (!s->restarted_ns) s->restarted_ns = now;
      st = RR_AGAIN;
    }
  }
  if (st == RR_OK) return c->early ? install_settled(s) : rr_conn_install(s);
  if (st != RR_AGAIN) return st;
  uint64_t limit = rr_params_get()->connect_timeout_ms * 1000000ull;
  /* Each attempt sends its COMMIT, which counts as progress: a listener
   * that refuses every one (NCCL closed it) is bounded by the timeout
   * from the first start over. */
  if (s->restarted_ns && now - s->restarted_ns > limit) {
    RR_WARN("connect: the listener refused every attempt for RERAIL_CONNECT_TIMEOUT=%llu ms after the "
            "connection was handed out", (unsigned long long)rr_params_get()->connect_timeout_ms);
    return RR_ERR_PEER;
  }
  if (!rr_setup_clock_expired(&c->deadline, c->progress, now, limit)) return RR_AGAIN;
  RR_WARN("connect: the listener stopped answering after the connection was handed out: no progress for "
          "RERAIL_CONNECT_TIMEOUT=%llu ms", (unsigned long long)rr_params_get()->connect_timeout_ms);
  return RR_ERR_PEER;
}

/* confirm_lock held. */
static rr_status confirm_locked(rr_send_comm *s) {
  if (!atomic_load(&s->confirming)) return s->confirm_status;
  rr_status st = confirm_step(s, 0);
  if (st == RR_AGAIN) return st;
  if (st != RR_OK) RR_WARN("connect: the connection to %s failed after it was handed out: %s", s->engine.cfg.peer,
                           rr_status_str(st));
  s->confirm_status = st;
  atomic_store(&s->confirming, 0);
  return st;
}

rr_status rr_connect_confirm(rr_send_comm *s) {
  pthread_mutex_lock(&confirm_lock);
  rr_status st = confirm_locked(s);
  pthread_mutex_unlock(&confirm_lock);
  return st;
}

/* A start over (under confirm_lock, possibly on the monitor's thread)
 * gives the attempt a new id: read it under the same lock. */
uint64_t rr_connect_conn_id(const rr_send_comm *s) {
  pthread_mutex_lock(&confirm_lock);
  uint64_t id = s->conn.conn_id;
  pthread_mutex_unlock(&confirm_lock);
  return id;
}

/* The monitor tries a comm at most this often: nothing waits on it (the
 * peer's engine blames no rail before it first hears ours, and isend reads
 * the ACCEPTs itself), and a try per comm per 5 ms round was a poll(2) per
 * rail each: with thousands of comms handed out at once, a core's worth
 * of system calls while the listener's host is still accepting. */
#define CONFIRM_BACKGROUND_NS (20ull * 1000 * 1000)

int rr_connect_confirm_background(rr_send_comm *s) {
  if (!atomic_load(&s->confirming)) return 0;
  uint64_t now = rr_now_ns();
  if (now - s->confirm_tried_ns < CONFIRM_BACKGROUND_NS) return 1;
  s->confirm_tried_ns = now; /* only the monitor's thread reads and writes it */
  if (pthread_mutex_trylock(&confirm_lock) != 0) return 1;
  int waiting = confirm_locked(s) == RR_AGAIN;
  pthread_mutex_unlock(&confirm_lock);
  return waiting;
}

/* closeSend of a comm still waiting: one step takes what is in (ACCEPTs
 * already read by the kernel, so a listener that handed its end out gets an
 * orderly close), and nothing is waited for. A wait here would be paid once
 * per comm, one after another: NCCL closing N comms whose listener is gone
 * would wait N progress timeouts for answers that cannot come. If the
 * listener handed its end out and its ACCEPTs were still on their way, that
 * end sees every rail of the connection end, which is how a receive comm
 * sees a sender that closed: the peer gone, not an error of its own. */
void rr_connect_confirm_close(rr_send_comm *s) {
  pthread_mutex_lock(&confirm_lock);
  /* Not RR_OK (still waiting, or failed): closeSend lets its sockets go,
   * no rail being in its engine; nothing to warn of, NCCL closes it. */
  if (atomic_load(&s->confirming) && confirm_step(s, 1) == RR_OK) s->confirm_status = RR_OK;
  atomic_store(&s->confirming, 0);
  pthread_mutex_unlock(&confirm_lock);
}
