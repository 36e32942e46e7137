/* Connection establishment, connector side: connect() and the reconnects
 * failover asks for, all non-blocking.
 *
 * A connection is one endpoint per rail, each opened through the rail's ops
 * and reached over a group of setup sockets (one per stream). Every socket
 * authenticates on its own as soon as it is connected (setup_wire.h:
 * HELLO, CHALLENGE, PROOF, ACCEPT): the listener proves it holds the handle's
 * secret, then we do, and the endpoint address blobs are exchanged. Once
 * a rail is up and every other is up or known down (connect_plan.h), a
 * COMMIT names the rails up and those that belong to the connection but wait
 * for their NIC (a reconnect's COMMIT names its one rail, and installs it);
 * when nothing but a failure can change the set, the COMMIT goes out behind
 * the PROOFs, and the comm goes to NCCL then: the ACCEPTs are read behind
 * it (conn_confirm.c).
 * A NIC that is down never fails connect() while another rail works: its rail
 * joins as a failed one and is reopened when the NIC heals. NCCL calls
 * connect() again and again until it returns a comm, so the state in between
 * lives in a send comm under construction, keyed by NCCL's handle. */
#include "core_internal.h"
#include "conn_confirm.h"
#include "conn_rail.h"
#include "peer_progress.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_health_bus.h"
#include "rr_nic_state.h"
#include "rr_log.h"
#include "rr_params.h"
#include "rr_topo.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(RR_HS_MAX_STREAMS == RR_RAIL_SETUP_FDS_MAX, "setup sockets per rail");
_Static_assert(RR_MAX_RAILS <= RR_HS_MAX_RAILS, "rails per connection");

#define RETRY_DELAY_NS (20ull * 1000 * 1000)
/* A setup socket whose TCP connect has no answer this long is tried again
 * (connect() only; a reconnect has its own bound): a SYN lost to a port that
 * is down is resent by the kernel only after a second, then three. A healthy
 * path answers in well under a millisecond. */
#define SETUP_STUCK_NS (250ull * 1000 * 1000)
/* ... but a loaded host (thousands of connections set up at once, or an
 * emulated one) may answer later than that: each attempt of a rail that met
 * no answer waits twice as long as the one before, up to 16 times the
 * bound, or a peer that answers in 300 ms would never be heard. */
#define SETUP_STUCK_DOUBLINGS 4

/* guards: connecting[], next_sweep_ns, and each listed comm until connect() hands it
 * out; level 1 (device, telemetry and health locks under it; never the monitor's). */
static pthread_mutex_t connect_lock = PTHREAD_MUTEX_INITIALIZER;
/* Send comms connect() is still building, hashed by NCCL's handle pointer:
 * NCCL calls connect() for each of its pending connections in turn, and a
 * job sets up thousands at once; a single list made every call walk all of
 * them (bench/RESULTS.md, "Thousands of connections"). */
#define CONNECTING_BUCKETS 1024
static rr_send_comm *connecting[CONNECTING_BUCKETS];
static uint64_t next_sweep_ns; /* connecting_sweep runs again then */
/* The peer processes of the connections in connecting[] (connect_lock):
 * an authenticated answer from one is progress of all of them. */
static rr_peer_table peer_table;

void rr_conn_peer_answered(const connect_state *c) { rr_peer_table_answered(&peer_table, c->peer_slot); }

static void connect_peer_release(connect_state *c) {
  rr_peer_table_unref(&peer_table, c->peer_slot);
  c->peer_slot = -1;
}

static rr_send_comm **connecting_bucket(const void *handle) {
  uintptr_t h = (uintptr_t)handle;
  h ^= h >> 12;
  return &connecting[(h >> 3) % CONNECTING_BUCKETS];
}

static void connecting_unlink(rr_send_comm *s) {
  for (rr_send_comm **p = connecting_bucket(s->conn.handle); *p; p = &(*p)->next_connecting)
    if (*p == s) {
      *p = s->next_connecting;
      return;
    }
}

/* Which of the peer's handle entries a local device should talk to, of its
 * kind (a TCP device to a TCP device; an RDMA device, set up out of band, to
 * an RDMA device). TCP: one on its own subnet (the usual rail-per-subnet
 * fabric), else the next unused one. Out of band, where addresses say
 * nothing of rails: the peer's device of the same number (the same
 * position on a rail-optimised fabric), else the next unused one. */
static int pair_peer_addr(int dev, const rr_peer_addrs *peer, const int *used) {
  const rr_netif *nif = &rr_core_devices()->nif[dev];
  int own = 0;
  if (!rr_core_setup_addr(dev, &own)) return -1;
  if (!own) {
    for (int j = 1; j < peer->naddrs; j++)
      if (!used[j] && !peer->own_ip[j] && peer->dev[j] == dev) return j;
    for (int j = 1; j < peer->naddrs; j++)
      if (!used[j] && !peer->own_ip[j]) return j;
    return -1;
  }
  for (int j = 1; j < peer->naddrs; j++)
    if (!used[j] && peer->own_ip[j] && rr_sockaddr_same_subnet(&nif->addr, &peer->addrs[j], nif->prefix_len))
      return j;
  for (int j = 1; j < peer->naddrs; j++)
    if (!used[j] && peer->own_ip[j] && peer->addrs[j].ss_family == nif->addr.ss_family &&
        !rr_sockaddr_same_subnet(&nif->addr, &peer->addrs[0], nif->prefix_len))
      return j;
  return -1;
}

/* Room for one more planned rail, its sockets none yet: 0 when out of
 * memory. The plan holds only the rails planned (a send comm keeps it for
 * reconnects, and most connections have one or two): room for every rail a
 * connection may have cost each connection end ~4 KB. */
static int rail_room(connect_state *c) {
  connect_rail *more = realloc(c->rails, (size_t)(c->nrails + 1) * sizeof *c->rails);
  if (!more) return 0;
  c->rails = more;
  connect_rail *cr = &c->rails[c->nrails];
  memset(cr, 0, sizeof *cr);
  for (int i = 0; i < RR_HS_MAX_STREAMS; i++) cr->s[i].fd = -1;
  return 1;
}

static int connect_may_block(int dev) {
  return (rr_core_devices()->rail[dev]->attr.caps & RR_RAIL_CAP_CONNECT_MAY_BLOCK) != 0;
}

/* Plan the next NIC of the chain that can be paired with a peer address;
 * its index, or -1 when none is left. Once the comm went to NCCL ahead of
 * its ACCEPTs (a backup planned after a start over), not a NIC whose
 * endpoint's connect may block: the rails are installed by whichever
 * thread confirms the comm, the monitor's included, which must never
 * wait (handout_early keeps such NICs out of the first plan alike). */
static int plan_next_rail(connect_state *c) {
  while (c->cand_next < c->ncand && c->nrails < RR_MAX_RAILS) {
    int dev = c->cand[c->cand_next++];
    if (c->handed_out && connect_may_block(dev)) continue;
    int j = pair_peer_addr(dev, &c->peer, c->addr_used);
    if (j < 0) continue;
    if (!rail_room(c)) return -1;
    c->addr_used[j] = 1;
    connect_rail *cr = &c->rails[c->nrails];
    cr->dev = dev;
    cr->peer_addr = j;
    return c->nrails++;
  }
  return -1;
}

/* The other NICs in failover-chain order, those known to be down last: a
 * backup is planned on a NIC that works when one does, and on a down one
 * (to be reopened when it heals) rather than none. */
static void plan_candidates(connect_state *c, int dev) {
  const rr_devices *d = rr_core_devices();
  unsigned char healthy[RR_MAX_NETIFS];
  for (int i = 0; i < d->count; i++) healthy[i] = rr_health_nic_get(i) != RR_LINK_DOWN;
  int up[RR_MAX_NETIFS], all[RR_MAX_NETIFS];
  int nup = rr_topo_failover_chain("/sys", d->nif, d->count, dev, healthy, up, RR_MAX_NETIFS);
  int nall = rr_topo_failover_chain("/sys", d->nif, d->count, dev, NULL, all, RR_MAX_NETIFS);
  c->ncand = c->cand_next = 0;
  for (int k = 0; k < nup; k++) c->cand[c->ncand++] = up[k];
  for (int k = 0; k < nall; k++)
    if (!healthy[all[k]]) c->cand[c->ncand++] = all[k];
}

/* Primary rail first (the NIC NCCL named, to the listener's first address,
 * whatever their state), then backups along the failover chain (every other
 * NIC in balance mode), each paired with a peer address it can reach. */
static rr_status plan_rails(connect_state *c, int dev) {
  const rr_params *p = rr_params_get();
  memset(c->addr_used, 0, sizeof c->addr_used);
  c->addr_used[0] = 1;
  if (!rail_room(c)) return RR_ERR_NOMEM;
  c->rails[0].dev = dev;
  c->rails[0].peer_addr = 0;
  c->nrails = 1;
  c->want = p->failover == RR_FAILOVER_BALANCE ? RR_MAX_RAILS - 1 : p->backups;
  plan_candidates(c, dev);
  while (c->nrails <= c->want && plan_next_rail(c) >= 0) {
  }
  for (int r = 0; r < c->nrails; r++) c->rails[r].base = 1;
  return RR_OK;
}

static rr_status rail_open_ep(rr_send_comm *s, connect_rail *cr);

/* connect(): advance rail r. A listener that fails its proof on the primary
 * fails the connection (the handle names a peer that is not there); on a
 * backup it leaves that rail out. Anything else is retried: the NIC, the
 * path or the listener may not be up yet (connect_plan.h). */
static rr_status connect_rail_step(connect_state *c, int r, uint64_t now) {
  connect_rail *cr = &c->rails[r];
  const char *why = "?";
  rr_status st = rr_conn_rail_advance(c, cr, r, now, SETUP_STUCK_NS << cr->unanswered, &why);
  if (st == RR_OK) return RR_OK;
  if (c->early) c->early_broken = 1; /* the listener holds a COMMIT this attempt cannot keep */
  if (st == RR_ERR_PROTOCOL) {
    if (r > 0) {
      rr_conn_rail_give_up(c, cr, why);
      return RR_OK;
    }
    RR_WARN("connect: %s", why);
    return RR_ERR_PEER;
  }
  if (cr->why != why) RR_TRACE("connect: rail %d: %s; trying again", r, why);
  if (why == rr_conn_no_answer && cr->unanswered < SETUP_STUCK_DOUBLINGS) cr->unanswered++;
  cr->failed = 1;
  cr->why = why;
  cr->retry_at_ns = now + RETRY_DELAY_NS;
  return RR_OK;
}

/* The listener has answered the rail's attempt under way: some socket of
 * it got the listener's CHALLENGE (a TCP connect alone says only that the
 * peer's kernel is there; the process may not be listening to it). */
static int rail_answered(const connect_state *c, const connect_rail *cr) {
  for (int i = 0; i < c->nstreams; i++)
    if (cr->s[i].fd >= 0 && cr->s[i].state > SS_CHALLENGE) return 1;
  return 0;
}

static void connect_view(const connect_state *c, rr_connect_rail_view *v) {
  for (int r = 0; r < c->nrails; r++)
    v[r] = (rr_connect_rail_view){.status = (uint8_t)c->rails[r].status, .failed = c->rails[r].failed,
                                  .base = c->rails[r].base, .answered = (uint8_t)rail_answered(c, &c->rails[r])};
}

/* How long connect() waits for a rail whose listener is answering: a quarter
 * of the connect timeout (7.5 s by default), at least the settle time. The
 * connection commits well inside the timeout either way. */
static uint64_t connect_patience_ns(void) {
  const rr_params *p = rr_params_get();
  uint64_t patience = p->connect_timeout_ms * 1000000ull / 4, settle = p->progress_timeout_ms * 1000000ull;
  return patience > settle ? patience : settle;
}

/* Rails up whose sockets ended since their ACCEPT (its listener dropped
 * it, or its path reset it): an end or an error, not bytes (after an early
 * COMMIT the listener may have handed the connection out, and its first
 * frames be on their way). Committing it would put the COMMIT, or the
 * connection's first frames, on a dead socket and leave the listener
 * waiting for them until the connect timeout. Such a rail is failed now: it
 * is retried like any rail that failed, and joins as one to reopen later if
 * the connection goes on without it. 1 when one was. */
static int ready_rails_lost(connect_state *c, uint64_t now) {
  int any = 0;
  for (int r = 0; r < c->nrails; r++) {
    connect_rail *cr = &c->rails[r];
    if (cr->status != RAIL_READY) continue;
    struct pollfd p[RR_HS_MAX_STREAMS];
    for (int i = 0; i < c->nstreams; i++) p[i] = (struct pollfd){.fd = cr->s[i].fd, .events = POLLRDHUP};
    if (poll(p, (nfds_t)c->nstreams, 0) == 0) continue; /* POLLHUP and POLLERR come unasked */
    RR_INFO(RR_SUB_NET, "connect: rail %d closed after the listener accepted it; going on without it", r);
    for (int i = 0; i < c->nstreams; i++) rr_conn_stream_close(&cr->s[i]);
    cr->status = RAIL_PENDING;
    cr->failed = 1;
    cr->why = "its sockets closed after the listener accepted them";
    cr->retry_at_ns = now + RETRY_DELAY_NS;
    any = 1;
  }
  return any;
}

/* Once enough is known (connect_plan.h): the rails up, the rails kept for
 * later (sockets closed, endpoint kept), the others closed; and the COMMIT
 * that tells the listener so. RR_AGAIN while it waits. */
/* The COMMIT to send, on stream 0 of the lowest rail it names. */
static void commit_prepare(const rr_hs_commit *commit, connect_state *c) {
  c->commit_rail = __builtin_ctz(commit->rails);
  c->commit_sent = 0;
  rr_hs_commit_encode(commit, c->commit);
}

static rr_status connect_settle(rr_send_comm *s, uint64_t now) {
  connect_state *c = &s->conn;
  if (c->early) {
    /* The COMMIT went out naming every rail: the connection goes on once
     * each is up (a failure before starts the attempt over, connect_advance).
     * Sockets that end after their ACCEPT say nothing here: the listener
     * may have handed the connection out already, and closed the setup
     * sockets of an RDMA rail, whose data path is its queue pair (a TCP
     * rail's end is the engine's to see, as any rail failing). */
    uint32_t all = (1u << c->nrails) - 1, up = 0;
    for (int r = 0; r < c->nrails; r++) up |= (uint32_t)(c->rails[r].status == RAIL_READY) << r;
    if (up != all) {
      if (up && !c->settle_counted) rr_counter_inc(RR_CTR_CONNECT_SETTLE_WAITS);
      c->settle_counted |= up != 0;
      return RR_AGAIN;
    }
    c->rails_mask = all;
    c->later_mask = 0;
    return RR_OK;
  }
  rr_connect_rail_view v[RR_MAX_RAILS];
  connect_view(c, v);
  if (rr_connect_backups_short(v, c->nrails, c->want) > 0) {
    int r = plan_next_rail(c);
    if (r >= 0 && rail_open_ep(s, &c->rails[r]) != RR_OK) rr_conn_rail_give_up(c, &c->rails[r], "cannot open an endpoint");
    if (r >= 0) return RR_AGAIN; /* its first attempt starts with the next call */
  }
  uint64_t settle = rr_params_get()->progress_timeout_ms * 1000000ull;
  uint32_t later = 0, dropped = 0;
  uint64_t age = now - c->start_ns;
  enum rr_connect_verdict verdict =
      rr_connect_decide(v, c->nrails, age > settle, age > connect_patience_ns(), &later, &dropped);
  if (verdict == RR_CONNECT_WAIT) {
    if (c->first_up_ns && !c->settle_counted) rr_counter_inc(RR_CTR_CONNECT_SETTLE_WAITS);
    c->settle_counted |= c->first_up_ns != 0;
    return RR_AGAIN;
  }
  if (verdict == RR_CONNECT_FAIL) {
    RR_WARN("connect: no rail reaches the peer (%s)", c->rails[0].why ? c->rails[0].why : "?");
    return RR_ERR_PEER;
  }
  if (ready_rails_lost(c, now)) return connect_settle(s, now); /* decided again without them */
  rr_hs_commit commit = {0};
  for (int r = 0; r < c->nrails; r++) {
    connect_rail *cr = &c->rails[r];
    if (dropped & (1u << r)) rr_conn_rail_give_up(c, cr, cr->why ? cr->why : "not up in time");
    if (later & (1u << r)) {
      rr_conn_rail_defer(c, cr);
      commit.later |= 1u << r;
      commit.later_addr[r] = (uint8_t)cr->peer_addr;
    }
    if (cr->status == RAIL_READY) commit.rails |= 1u << r;
  }
  c->rails_mask = commit.rails;
  c->later_mask = commit.later;
  commit_prepare(&commit, c);
  return RR_OK;
}

/* The COMMIT may go out before the ACCEPTs, right behind the PROOFs, when
 * the set of rails can no longer change but by a failure: every rail of the
 * plan has sent the PROOF on every socket (its listener answered, and
 * proved it holds the secret), and no other rail is due. The listener then
 * hands the connection out as soon as it has taken the last PROOF, one pass
 * of its accept() calls earlier than after a COMMIT that waited for the
 * ACCEPTs, and we hand ours out too, reading them behind it (conn_confirm.c:
 * its endpoints, its word that it took every socket). With thousands at once,
 * NCCL calls accept() and connect() for each in turn: each message that
 * waits for the other side's turn costs a pass over all of them
 * (bench/RESULTS.md, "Thousands of connections"). */
static int early_commit_due(const connect_state *c) {
  if (c->early || c->rails_mask) return 0;
  rr_connect_rail_view v[RR_MAX_RAILS];
  connect_view(c, v);
  if (rr_connect_backups_short(v, c->nrails, c->want) > 0 && c->cand_next < c->ncand && c->nrails < RR_MAX_RAILS)
    return 0; /* another NIC may be planned yet */
  for (int r = 0; r < c->nrails; r++) {
    const connect_rail *cr = &c->rails[r];
    if (cr->status != RAIL_PENDING && cr->status != RAIL_READY) return 0;
    for (int i = 0; i < c->nstreams; i++)
      if (cr->s[i].fd < 0 || cr->s[i].state < SS_ACCEPT) return 0;
  }
  return 1;
}

/* A socket failed after an early COMMIT: the listener may hold that
 * COMMIT (or may not: a PROOF it refused took it down unread), so no
 * later message can say which rails the connection has. The attempt starts
 * over as a new connection (a fresh id: the listener drops the old group
 * once it sees its sockets end, or at the connect timeout), every rail
 * with a fresh endpoint. Without the early COMMIT, a failure costs only
 * that socket's retry; it is rare, and the early COMMIT saves a pass on
 * every connection. */
void rr_conn_start_over(rr_send_comm *s, uint64_t now) {
  connect_state *c = &s->conn;
  RR_INFO(RR_SUB_NET, "connect: a setup socket failed after the set of rails was sent; starting over");
  rr_counter_inc(RR_CTR_CONNECT_START_OVERS);
  uint64_t id;
  if (rr_hs_random(&id, sizeof id) == RR_OK) c->conn_id = id;
  for (int r = 0; r < c->nrails; r++) {
    connect_rail *cr = &c->rails[r];
    if (cr->status == RAIL_FAILED) continue;
    rr_conn_rail_close(c, cr);
    cr->status = RAIL_PENDING;
    cr->failed = 1;
    cr->lost = 0;
    cr->retry_at_ns = now + RETRY_DELAY_NS;
    if (rail_open_ep(s, cr) != RR_OK) rr_conn_rail_give_up(c, cr, "cannot open an endpoint");
  }
  c->early = c->early_broken = 0;
  c->commit_sent = 0;
  /* A new attempt: the backups get the settle time and patience afresh
   * (connect_settle), or, its first attempt's clock long run, a backup
   * not answering yet would be left for later at once. */
  c->start_ns = now;
}

/* The comm may go to NCCL before the ACCEPTs when no rail's endpoint may block
 * in its connect: they are read, and the endpoints connected, on any thread. */
static int handout_early(const connect_state *c) {
  for (int r = 0; r < c->nrails; r++)
    if (connect_may_block(c->rails[r].dev)) return 0;
  return 1;
}

/* Send what is left of the COMMIT. */
static rr_status commit_send(connect_state *c) {
  int fd = c->rails[c->commit_rail].s[0].fd;
  while (c->commit_sent < RR_HS_COMMIT_LEN) {
    ssize_t n = send(fd, c->commit + c->commit_sent, RR_HS_COMMIT_LEN - c->commit_sent,
                     MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return RR_AGAIN;
    if (n < 0) {
      RR_WARN("connect: sending the set of rails: %s", strerror(errno));
      return RR_ERR_PEER;
    }
    c->commit_sent += (uint16_t)n;
    c->progress++;
  }
  return RR_OK;
}

/* RR_OK when the connection is ready, RR_AGAIN while it is not. First every
 * rail runs its attempts until the connection can go on (connect_settle);
 * then COMMIT tells the listener the rails up and those for later (or it
 * went out early, above). */
rr_status rr_conn_advance(rr_send_comm *s) {
  connect_state *c = &s->conn;
  uint64_t now = rr_now_ns();
  if (!c->rails_mask) {
    rr_conn_rails_poll(c);
    for (int r = 0; r < c->nrails; r++) {
      if (c->rails[r].status != RAIL_PENDING) continue;
      rr_status st = connect_rail_step(c, r, now);
      if (st != RR_OK) return st;
    }
    for (int r = 0; r < c->nrails && !c->first_up_ns; r++)
      if (c->rails[r].status == RAIL_READY) c->first_up_ns = now;
    if (c->early && !c->early_broken && commit_send(c) == RR_ERR_PEER) c->early_broken = 1;
    if (c->early_broken) {
      rr_conn_start_over(s, now);
      return RR_AGAIN;
    }
    if (early_commit_due(c)) {
      rr_hs_commit commit = {.rails = (1u << c->nrails) - 1};
      commit_prepare(&commit, c);
      c->early = 1;
      if (commit_send(c) == RR_ERR_PEER) c->early_broken = 1; /* found by the next call */
    }
    /* The PROOFs and the COMMIT are out: the comm goes to NCCL now, and
     * the ACCEPTs are read behind it (conn_confirm.c). */
    if (c->early && handout_early(c)) {
      if (c->commit_sent != RR_HS_COMMIT_LEN || c->early_broken) return RR_AGAIN;
      if (!c->decided_ns) c->decided_ns = now;
      return RR_OK;
    }
    rr_status st = connect_settle(s, now);
    if (st != RR_OK) return st;
    if (!c->decided_ns) c->decided_ns = now;
  }
  return commit_send(c);
}

/* A reopened endpoint still connecting, given up on. */
static void job_drop(rr_send_comm *s, int rail) {
  if (!s->conn_job[rail]) return;
  rr_connect_job_abandon(s->conn_job[rail]);
  s->conn_job[rail] = NULL;
  close(s->commit_fd[rail]);
}

void rr_connect_release(rr_send_comm *s) {
  connect_state *c = &s->conn;
  for (int r = 0; r < c->nrails && c->rails; r++) rr_conn_rail_close(c, &c->rails[r]);
  for (int r = 0; r < RR_MAX_RAILS; r++) job_drop(s, r);
  free(c->rails);
  c->rails = NULL;
}

/* A rail's endpoint, opened through the seam before its handshake: its
 * address blob goes to the listener in PROOF. */
static rr_status rail_open_ep(rr_send_comm *s, connect_rail *cr) {
  rr_status st = rr_setup_ep_open(cr->dev, &s->engine, &cr->ep, cr->blob, &cr->blob_len);
  if (st == RR_OK && cr->blob_len > RR_HS_BLOB_MAX) {
    RR_WARN("connect: the rail's endpoint address is %u bytes (at most %d)", cr->blob_len, RR_HS_BLOB_MAX);
    rr_setup_ep_abandon(&cr->ep);
    st = RR_ERR_INTERNAL;
  }
  return st;
}

static void reconnect_abandon(rr_send_comm *s, int rail) {
  rr_conn_rail_close(&s->conn, &s->conn.rails[s->plan_of[rail]]);
  job_drop(s, rail);
  s->reconnecting[rail] = 0;
}

/* An attempt the engine stopped driving (the old endpoint recovered, or the
 * connection went idle) is stale: its sockets may have connected long ago
 * through a path that has failed since. It is never resumed. The engine
 * drives an attempt on every tick, and its ticks come from NCCL's calls and
 * the monitor's sweep over every connection: with hundreds of connections
 * on a loaded host those are tens of milliseconds apart, so a gap counts as
 * a stop only past a quarter of the progress timeout (at least 50 ms). An
 * attempt declared stale while still driven starts over, and under such
 * load would never finish. */
static uint64_t reconnect_stale_ns(void) {
  uint64_t quarter = rr_params_get()->progress_timeout_ms * 1000000ull / 4;
  return quarter > 50000000ull ? quarter : 50000000ull;
}

/* The reopened endpoint's connect (connect_job.c): RR_AGAIN while it runs
 * on its own thread, then the endpoint for the engine, or the failure. */
static rr_status reconnect_finish(rr_send_comm *s, int rail, rr_rail_ep **ep) {
  rr_status st = rr_connect_job_finish(s->conn_job[rail], ep);
  if (st == RR_AGAIN) return RR_AGAIN;
  s->conn_job[rail] = NULL;
  s->reconnecting[rail] = 0;
  if (st == RR_OK) {
    /* COMMIT installs the rail at the listener, which then closes the old
     * sockets: it leaves in the same call that hands the engine the new
     * endpoint, so the engine never sees the old rail close before it has
     * swapped (a fresh socket's send buffer takes the 16 bytes at once). It
     * goes on a duplicate of stream 0: the transport may own the stream by
     * now, and has sent nothing on it (it has not been driven yet). */
    uint8_t commit[RR_HS_COMMIT_LEN];
    rr_hs_commit one = {.rails = 1u << s->plan_of[rail]};
    rr_hs_commit_encode(&one, commit);
    ssize_t n = send(s->commit_fd[rail], commit, sizeof commit, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n != (ssize_t)sizeof commit) {
      (*ep)->ops->destroy(*ep);
      *ep = NULL;
      st = RR_ERR_RAIL;
    }
  }
  close(s->commit_fd[rail]);
  int r = s->plan_of[rail];
  if (st == RR_OK && s->deferred_ns[r]) {
    /* A rail the connection went out without is in: how long it ran without. */
    rr_counter_inc(RR_CTR_CONNECT_DEFERRED_UP);
    rr_counter_add(RR_CTR_CONNECT_DEFERRED_MS, (rr_now_ns() - s->deferred_ns[r]) / 1000000u);
    s->deferred_ns[r] = 0;
  }
  return st;
}

/* The engine's reconnect callback (under the engine's lock): reopen one
 * rail's endpoint and sockets to the same peer address, announced as a
 * reconnect numbered with the rail's next generation, which the peer's
 * listener routes to the live connection. */
static rr_status send_comm_reconnect(void *arg, int rail, rr_rail_ep **ep) {
  rr_send_comm *s = arg;
  connect_state *c = &s->conn;
  int r = s->plan_of[rail];
  connect_rail *cr = &c->rails[r];
  uint64_t now = rr_now_ns();
  if (s->reconnecting[rail] && now - s->attempt_seen_ns[rail] > reconnect_stale_ns())
    reconnect_abandon(s, rail);
  s->attempt_seen_ns[rail] = now;
  if (!s->reconnecting[rail]) {
    /* Normally the next generation; after a listener said ours was out of
     * its window, the one just past its floor. */
    uint32_t gen = cr->resync ? cr->resync_floor + 1 : s->generation[r] + 1;
    if (gen == 0) gen = 1; /* 0 names a first connection */
    cr->resync = 0;
    s->generation[r] = gen;
    cr->generation = gen;
    for (int i = 0; i < c->nstreams; i++) cr->s[i].fd = -1, cr->s[i].state = SS_CONNECTING;
    cr->status = RAIL_PENDING;
    cr->polled = 0; /* ready flags a poll during setup left are not this attempt's sockets' */
    cr->retry_at_ns = 0;
    rr_status st = rail_open_ep(s, cr);
    if (st != RR_OK) return st == RR_ERR_NOMEM ? st : RR_ERR_RAIL;
    s->attempt_start_ns[rail] = now;
    s->reconnecting[rail] = 1;
    RR_TRACE("send rail %d: reconnect attempt %u", rail, gen);
  }
  rr_status st = RR_OK;
  if (s->conn_job[rail]) return reconnect_finish(s, rail, ep);
  if (cr->status == RAIL_PENDING) {
    const char *why = "?";
    if (rr_conn_rail_advance(c, cr, r, now, 0, &why) != RR_OK) rr_conn_rail_give_up(c, cr, why); /* the next attempt starts afresh */
  }
  if (st == RR_OK && cr->status == RAIL_READY) {
    int commit_fd = fcntl(cr->s[0].fd, F_DUPFD_CLOEXEC, 0);
    if (commit_fd < 0) {
      reconnect_abandon(s, rail);
      return RR_ERR_RAIL;
    }
    int fds[RR_HS_MAX_STREAMS];
    for (int i = 0; i < c->nstreams; i++) fds[i] = cr->s[i].fd, cr->s[i].fd = -1;
    rr_rail_ep *opened = cr->ep;
    cr->ep = NULL; /* the job's now */
    st = rr_connect_job_start(opened, cr->dev, cr->peer_blob, cr->peer_blob_len, fds, c->nstreams,
                              &s->conn_job[rail]);
    if (st != RR_OK) {
      close(commit_fd);
      s->reconnecting[rail] = 0;
      return st;
    }
    s->commit_fd[rail] = commit_fd;
    return reconnect_finish(s, rail, ep); /* done at once unless it may block */
  }
  /* A SYN lost to a port that was down is retried by the kernel only after
   * a second: a fresh attempt soon after is faster than waiting for it. Once
   * every socket is connected the path works, and the handshake's round
   * trips (each answered when the peer's listener is next serviced) get the
   * progress timeout: restarting them would only start the wait over. Once
   * the listener has answered, it is alive and working through its sockets
   * (slowly, when it serves hundreds of connections): the attempt gets
   * connect()'s patience for a backup that is answered. */
  uint64_t limit = rr_params_get()->progress_timeout_ms * 1000000ull;
  int connected = 1;
  for (int i = 0; i < c->nstreams; i++) connected &= cr->s[i].fd >= 0 && cr->s[i].state != SS_CONNECTING;
  if (!connected && limit > 100000000ull) limit = 100000000ull;
  if (rail_answered(c, cr)) limit = connect_patience_ns();
  if (st == RR_OK && cr->status != RAIL_FAILED && now - s->attempt_start_ns[rail] > limit)
    rr_conn_rail_give_up(c, cr, "timed out");
  if (st == RR_OK && cr->status != RAIL_FAILED) return RR_AGAIN;
  reconnect_abandon(s, rail);
  return st == RR_OK ? RR_ERR_RAIL : st;
}

static void send_comm_free(rr_send_comm *s) {
  rr_connect_release(s);
  rr_engine_fini(&s->engine);
  free(s);
}

/* A send comm under construction: its engine (the endpoints report to it),
 * its plan, and each rail's endpoint opened. */
/* Setup sockets per rail: RERAIL_TCP_STREAMS where a rail may be TCP, whose
 * setup sockets become its data streams; one where every pooled device sets
 * up out of band (RDMA: the sockets carry the handshake, then close). The
 * HELLO says how many, so the listener needs no agreement on it. Each
 * socket more is a TCP connect, an accept and a handshake of four messages
 * at both ends, in turn with every other connection's: with thousands of
 * connections, what setting them up costs (bench/RESULTS.md §11, addendum
 * "vsetup"); NCCL's IB transport uses one socket a connection. */
static int setup_streams(void) {
  const rr_devices *d = rr_core_devices();
  for (int i = 0; i < d->count; i++)
    if (d->rail[i]->attr.caps & RR_RAIL_CAP_SETUP_IS_DATA) return rr_params_get()->tcp_streams;
  return 1;
}

static rr_send_comm *send_comm_new(const void *handle, int dev, const rr_peer_addrs *peer,
                                   rr_profiler_fn profiler, int traffic_class) {
  const rr_params *p = rr_params_get();
  rr_send_comm *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  connect_state *c = &s->conn;
  c->handle = handle;
  memcpy(c->secret, peer->secret, RR_HS_SECRET_LEN);
  c->peer = *peer;
  c->nstreams = setup_streams();
  c->chunk_size = (uint32_t)p->chunk_size;
  c->start_ns = c->began_ns = rr_now_ns();
  c->peer_slot = -1;
  rr_setup_clock_start(&c->deadline, c->progress, c->start_ns);
  if (rr_hs_random(&c->conn_id, sizeof c->conn_id) != RR_OK || plan_rails(c, dev) != RR_OK) {
    free(c->rails);
    free(s);
    return NULL;
  }
  s->dev = dev;
  rr_engine_config cfg;
  rr_core_engine_config(RR_ENGINE_SEND, c->chunk_size, (const struct sockaddr *)&c->peer.addrs[0],
                        profiler, &cfg);
  cfg.reconnect = send_comm_reconnect;
  cfg.reconnect_arg = s;
  cfg.reopens = 1;
  cfg.traffic_class = traffic_class;
  if (rr_engine_init(&s->engine, &cfg) != RR_OK) {
    free(c->rails);
    free(s);
    return NULL;
  }
  for (int r = 0; r < c->nrails; r++) {
    rr_status st = rail_open_ep(s, &c->rails[r]);
    if (st == RR_OK) continue;
    if (r == 0) {
      RR_WARN("connect: cannot open an endpoint on %s: %s", rr_core_devices()->nif[dev].name,
              rr_status_str(st));
      send_comm_free(s);
      return NULL;
    }
    rr_conn_rail_give_up(c, &c->rails[r], "cannot open an endpoint");
  }
  return s;
}

/* Hand rail r to the engine: connected when it came up, as a rail to
 * reopen when it did not (its endpoint, never connected, stands for it). */
static rr_status send_comm_add(rr_send_comm *s, int r) {
  connect_state *c = &s->conn;
  connect_rail *cr = &c->rails[r];
  const rr_netif *nif = &rr_core_devices()->nif[cr->dev];
  rr_status st = RR_OK;
  if (cr->status == RAIL_READY) {
    int fds[RR_HS_MAX_STREAMS];
    for (int i = 0; i < c->nstreams; i++) fds[i] = cr->s[i].fd, cr->s[i].fd = -1;
    st = rr_setup_ep_connect(&cr->ep, cr->dev, &s->engine, cr->peer_blob, cr->peer_blob_len, fds, c->nstreams);
    /* The COMMIT named it, and the listener holds it: a rail whose
     * endpoint does not connect now joins as one to reopen (the listener
     * sees its sockets end, and installs the reopened rail), not as the
     * end of a connection whose other rails work. */
    if (st != RR_OK && st != RR_ERR_NOMEM && rail_open_ep(s, cr) == RR_OK) {
      cr->status = RAIL_LATER;
      cr->why = "its endpoint did not connect";
      st = RR_OK;
    }
  }
  rr_rail_ep *ep = cr->ep;
  cr->ep = NULL;
  if (st != RR_OK) return st;
  char abuf[64];
  rr_sockaddr_str((struct sockaddr *)&c->peer.addrs[cr->peer_addr], abuf, sizeof abuf);
  int weight = nif->speed_mbps > 0 ? nif->speed_mbps : 10000;
  s->plan_of[s->engine.nrails] = r;
  s->rails_mask |= 1u << r;
  st = cr->status == RAIL_READY ? rr_engine_add_rail(&s->engine, ep, weight, nif->name, abuf)
                                : rr_engine_add_rail_later(&s->engine, ep, weight, nif->name, abuf, cr->why);
  if (st != RR_OK) ep->ops->destroy(ep);
  return st;
}

/* Connect the endpoints of the rails that came up and hand them, and the
 * rails kept for later, to the engine, in plan order (the listener numbers
 * them alike). */
rr_status rr_conn_install(rr_send_comm *s) {
  connect_state *c = &s->conn;
  rr_status st = RR_OK;
  for (int r = 0; r < c->nrails; r++) {
    connect_rail *cr = &c->rails[r];
    if ((cr->status == RAIL_READY || cr->status == RAIL_LATER) && st == RR_OK) st = send_comm_add(s, r);
    rr_conn_rail_close(c, cr); /* what is left: sockets of rails left out, or of a failed connect */
  }
  c->handle = NULL;
  int up = 0;
  for (int r = 0; r < c->nrails; r++) up |= c->rails[r].status == RAIL_READY;
  if (st == RR_OK && !up) {
    RR_WARN("connect: no rail's endpoint connected");
    st = RR_ERR_PEER;
  }
  if (st != RR_OK) return st;
  uint64_t now = rr_now_ns();
  for (int r = 0; r < c->nrails; r++)
    if (c->rails[r].status == RAIL_LATER && (s->rails_mask & (1u << r))) s->deferred_ns[r] = now;
  s->magic = RR_MAGIC_SEND;
  RR_INFO(RR_SUB_NET, "connected to %s over %d rail(s), %d more to reopen once reachable", s->engine.cfg.peer,
          __builtin_popcount(c->rails_mask), __builtin_popcount(c->later_mask));
  return RR_OK;
}

/* connect() is through: the comm goes to NCCL with its rails, or before
 * the listener's ACCEPTs came (an early COMMIT), to be confirmed behind. */
static rr_status send_comm_finish(rr_send_comm *s) {
  if (s->conn.early && !s->conn.rails_mask) return rr_conn_confirm_start(s);
  rr_status st = rr_conn_install(s);
  if (st == RR_OK) rr_monitor_add(&s->engine);
  return st;
}

/* NCCL calls connect() for a handle until it gets a comm or gives up; one it
 * stopped calling for longer than RR_SETUP_CAP_TIMEOUTS connect timeouts was
 * abandoned (an aborted communicator): its sockets and endpoints go
 * (connect_lock held). Not after one timeout: NCCL's turn over hundreds of
 * connections may outlast that, and the attempt it comes back to must be
 * there (connect_plan.h). */
static void connecting_sweep(uint64_t now) {
  uint64_t limit = RR_SETUP_CAP_TIMEOUTS * rr_params_get()->connect_timeout_ms * 1000000ull;
  /* Every attempt is looked at: not on every call (that cost grows with the
   * attempts under way), but a few times per timeout, so an abandoned one
   * goes at most a quarter of the timeout (or 100 ms) late. */
  if (now < next_sweep_ns) return;
  next_sweep_ns = now + (limit / 4 < 100000000ull ? limit / 4 : 100000000ull);
  for (int b = 0; b < CONNECTING_BUCKETS; b++) {
    for (rr_send_comm **p = &connecting[b]; *p;) {
      rr_send_comm *s = *p;
      if (now - s->conn.last_call_ns > limit) {
        *p = s->next_connecting;
        RR_INFO(RR_SUB_NET, "connect: dropping an attempt NCCL stopped calling for");
        connect_peer_release(&s->conn);
        send_comm_free(s);
      } else {
        p = &s->next_connecting;
      }
    }
  }
}

/* The connect timeout passed with no rail up: say what each rail met. */
static void connect_timed_out(const connect_state *c) {
  const rr_devices *d = rr_core_devices();
  char list[400] = "";
  size_t off = 0;
  for (int r = 0; r < c->nrails && off < sizeof list; r++) {
    char abuf[64];
    const connect_rail *cr = &c->rails[r];
    rr_sockaddr_str((const struct sockaddr *)&c->peer.addrs[cr->peer_addr], abuf, sizeof abuf);
    off += (size_t)snprintf(list + off, sizeof list - off, "%s%s -> %s: %s", r ? "; " : "", d->nif[cr->dev].name,
                            abuf, cr->why ? cr->why : "no answer");
  }
  const struct sockaddr_storage *a = &c->peer.addrs[0];
  RR_WARN("connect: no rail reached the peer (port %u): no progress for RERAIL_CONNECT_TIMEOUT=%llu ms: %s",
          ntohs(a->ss_family == AF_INET ? ((const struct sockaddr_in *)a)->sin_port
                                        : ((const struct sockaddr_in6 *)a)->sin6_port),
          (unsigned long long)rr_params_get()->connect_timeout_ms, list);
}

/* Where this connect()'s time went (rr_counters.h): first call to a rail
 * up, then to the set of rails decided, then to the comm handed out. A comm
 * handed out ahead of its ACCEPTs (conn_confirm.c) has no rail up yet: its
 * whole wait is the first phase. */
static void connect_count_handout(const connect_state *c, uint64_t now) {
  uint64_t decided = c->decided_ns ? c->decided_ns : now;
  uint64_t up = c->first_up_ns && c->first_up_ns < decided ? c->first_up_ns : decided;
  rr_counter_inc(RR_CTR_CONNECTS);
  rr_counter_add(RR_CTR_CONNECT_MS_FIRST_RAIL, (up - c->began_ns) / 1000000u);
  rr_counter_add(RR_CTR_CONNECT_MS_OTHER_RAILS, (decided - up) / 1000000u);
  rr_counter_add(RR_CTR_CONNECT_MS_INSTALL, (now - decided) / 1000000u);
}

static rr_status connect_call(rr_net_ctx *ctx, int dev, const void *handle, rr_send_comm **out);

rr_status rr_net_connect(rr_net_ctx *ctx, int dev, const void *handle, rr_send_comm **out) {
  uint64_t t0 = rr_now_ns();
  rr_status st = connect_call(ctx, dev, handle, out);
  rr_counter_add(RR_CTR_SETUP_CALL_US_CONNECT, (rr_now_ns() - t0) / 1000u);
  rr_counter_inc(RR_CTR_SETUP_CALLS_CONNECT);
  return st;
}

static rr_status connect_call(rr_net_ctx *ctx, int dev, const void *handle, rr_send_comm **out) {
  if (!out) return RR_ERR_INVALID;
  *out = NULL;
  const rr_devices *d = rr_core_devices();
  if (dev < 0 || dev >= d->count) {
    RR_WARN("connect: device %d does not exist (%d devices)", dev, d->count);
    return RR_ERR_INVALID;
  }
  rr_peer_addrs peer;
  rr_status st = rr_handle_decode(handle, &peer);
  if (st != RR_OK) return st;

  pthread_mutex_lock(&connect_lock);
  uint64_t now = rr_now_ns();
  connecting_sweep(now);
  rr_send_comm **bucket = connecting_bucket(handle);
  rr_send_comm *s = *bucket;
  while (s && !(s->conn.handle == handle && !memcmp(s->conn.secret, peer.secret, RR_HS_SECRET_LEN)))
    s = s->next_connecting;
  if (!s) {
    s = send_comm_new(handle, dev, &peer, ctx ? ctx->profiler : NULL, ctx ? ctx->traffic_class : -1);
    if (!s) {
      pthread_mutex_unlock(&connect_lock);
      return RR_ERR_NOMEM;
    }
    s->next_connecting = *bucket;
    *bucket = s;
    /* Answers from the peer process to any of its connections count as
     * this one's progress too (peer_progress.h). */
    s->conn.peer_slot = rr_peer_table_ref(&peer_table, peer.process);
    rr_setup_clock_start(&s->conn.deadline, rr_peer_table_progress(&peer_table, s->conn.peer_slot, s->conn.progress),
                         now);
  }
  s->conn.last_call_ns = now;
  st = rr_conn_advance(s);
  if (st == RR_AGAIN) {
    /* The timeout counts from the connection's latest progress, not from
     * its first call: NCCL drives every connection under way in turn, and
     * one turn over hundreds can outlast the timeout while the peer answers
     * each message (connect_plan.h, rr_setup_clock); and an answer from
     * the peer process to another connection counts (peer_progress.h). */
    uint64_t limit = rr_params_get()->connect_timeout_ms * 1000000ull;
    uint64_t progress = rr_peer_table_progress(&peer_table, s->conn.peer_slot, s->conn.progress);
    if (!rr_setup_clock_expired(&s->conn.deadline, progress, rr_now_ns(), limit)) {
      pthread_mutex_unlock(&connect_lock);
      return RR_OK; /* NCCL calls again */
    }
    connect_timed_out(&s->conn);
    st = RR_ERR_PEER;
  }
  connecting_unlink(s);
  s->next_connecting = NULL;
  connect_peer_release(&s->conn);
  pthread_mutex_unlock(&connect_lock);
  if (st == RR_OK) st = send_comm_finish(s);
  if (st != RR_OK) {
    send_comm_free(s);
    return st;
  }
  connect_count_handout(&s->conn, rr_now_ns());
  *out = s;
  return RR_OK;
}

/* Connects NCCL gave up on (it never calls again for that handle) would hold
 * their sockets until the process ends: release them when the plugin goes. */
__attribute__((destructor)) static void connect_unload(void) {
  pthread_mutex_lock(&connect_lock);
  for (int b = 0; b < CONNECTING_BUCKETS; b++) {
    while (connecting[b]) {
      rr_send_comm *s = connecting[b];
      connecting[b] = s->next_connecting;
      connect_peer_release(&s->conn);
      send_comm_free(s);
    }
  }
  pthread_mutex_unlock(&connect_lock);
}
