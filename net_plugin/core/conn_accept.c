/* Connection establishment, listener side: accept(), and the reconnected
 * rails of live connections, all non-blocking (listen() is conn_listen.c's).
 *
 * The listener trusts nothing before a socket has proved it holds the
 * handle's secret (setup_wire.h). Until then a socket is a small pending slot:
 * at most RR_LISTEN_PER_SOURCE per source address and RR_LISTEN_PENDING in
 * all, each held until a newcomer needs its slot (listen_admit.c, "How long
 * a stranger is held"), so idle clients cannot keep a failover's reconnect
 * out, nor a slow connector's turn come too late.
 * Authenticated sockets are grouped by connection id; a complete group
 * becomes a receive comm, or replaces a failed rail of a live one. Refusals
 * are logged once a minute per reason and source address, so a flood cannot
 * flood the log too. */
#include "core_internal.h"
#include "listen_admit.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_log.h"
#include "rr_params.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* Everything a group holds: sockets, endpoints, and the comm it was building. */
static void group_close(pending_group *g) {
  rr_connect_job_abandon(g->install);
  g->install = NULL;
  for (int r = 0; r < RR_MAX_RAILS; r++) {
    for (int i = 0; i < RR_HS_MAX_STREAMS; i++)
      if (g->fds[r][i] >= 0) close(g->fds[r][i]), g->fds[r][i] = -1;
    rr_setup_ep_abandon(&g->ep[r]);
  }
  if (g->rc) {
    rr_engine_fini(&g->rc->engine);
    free(g->rc);
    g->rc = NULL;
  }
}

static void group_remove(rr_listen_comm *l, int i) {
  group_close(&l->groups[i]);
  l->groups[i] = l->groups[--l->ngroups];
}

/* The connector still holds the group's sockets: some are here and none of
 * them seen to end (a rail seen to end is closed here, rail_lost). */
static int group_open(const pending_group *g) {
  for (int r = 0; r < RR_MAX_RAILS; r++)
    for (int i = 0; i < RR_HS_MAX_STREAMS; i++)
      if (g->fds[r][i] >= 0) return 1;
  return 0;
}

/* The table of groups is full: the one idle longest makes room, if it has
 * been idle past the connect timeout (the groups a deadline from their
 * first socket dropped; kept since only while nothing needed the slot, so
 * a slow connector's group still outlives a sweep: connect_plan.h). A full
 * table of groups that progress refuses the newcomer, as before. 1 when
 * one went. */
static int evict_idle_group(rr_listen_comm *l, uint64_t now) {
  int oldest = -1;
  for (int i = 0; i < l->ngroups; i++)
    if (oldest < 0 || l->groups[i].progress_ns < l->groups[oldest].progress_ns) oldest = i;
  if (oldest < 0 || now - l->groups[oldest].progress_ns <= rr_connect_timeout_ns()) return 0;
  RR_INFO(RR_SUB_NET, "accept: a connection idle past the connect timeout makes room for a new one");
  group_remove(l, oldest);
  return 1;
}

static void listen_free(rr_listen_comm *l) {
  for (int i = 0; i < l->nfds; i++) close(l->fds[i]);
  for (int i = 0; i < l->nsocks; i++)
    if (l->socks[i].fd >= 0) close(l->socks[i].fd);
  while (l->ngroups) group_remove(l, 0);
  free(l->socks);
  free(l->groups);
  free(l->comms);
  pthread_mutex_destroy(&l->lock);
  l->magic = RR_MAGIC_DEAD;
  free(l);
}

rr_status rr_net_close_listen(rr_listen_comm *l) {
  if (!l) return RR_OK;
  if (l->magic != RR_MAGIC_LISTEN) {
    RR_WARN("closeListen: not a rerail listen comm");
    return RR_ERR_INVALID;
  }
  pthread_mutex_lock(&l->lock);
  l->nccl_closed = 1;
  int keep = l->ncomms > 0; /* its connections may still reconnect rails through it */
  pthread_mutex_unlock(&l->lock);
  if (!keep) listen_free(l);
  return RR_OK;
}

void rr_listen_release(rr_recv_comm *rc) {
  rr_listen_comm *l = rc->listen;
  if (!l) return;
  rc->listen = NULL;
  pthread_mutex_lock(&l->lock);
  for (int i = 0; i < l->ncomms; i++)
    if (l->comms[i] == rc) {
      l->comms[i] = l->comms[--l->ncomms];
      break;
    }
  /* A reconnect under way for it holds endpoints that report to its engine. */
  for (int i = 0; i < l->ngroups;)
    if (l->groups[i].reconnect_rail >= 0 && l->groups[i].conn_id == rc->conn_id) group_remove(l, i);
    else i++;
  int last = l->ncomms == 0;
  int gone = last && l->nccl_closed;
  pthread_mutex_unlock(&l->lock);
  if (last) rr_monitor_remove_listener(l);
  if (gone) listen_free(l);
}

/* ------------------------------------------------------------------ accept */

static rr_recv_comm *listen_comm_by_id(rr_listen_comm *l, uint64_t conn_id) {
  for (int i = 0; i < l->ncomms; i++)
    if (l->comms[i]->conn_id == conn_id) return l->comms[i];
  return NULL;
}

/* The newest generation the listener holds for a rail of a live connection:
 * a reconnect must be newer, and at most RR_HS_GEN_WINDOW newer. */
static uint32_t gen_floor(const rr_recv_comm *rc, int rail) {
  return rc->gen_seen[rail] > rc->generation[rail] ? rc->gen_seen[rail] : rc->generation[rail];
}

static rr_status send_all(int fd, const uint8_t *buf, size_t len) {
  /* A fresh socket's send buffer takes these few bytes at once; one that
   * does not is broken, and the peer starts over. */
  ssize_t n;
  do n = send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n == (ssize_t)len ? RR_OK : RR_ERR_PEER;
}

/* HELLO in: answer with a CHALLENGE (our proof, a fresh nonce). */
static void on_hello(rr_listen_comm *l, pending_sock *ps) {
  const char *why = NULL;
  rr_status st = RR_SETUP_RECV_MSG(ps->fd, ps->in, ps->got, rr_hs_hello_decode(ps->in, ps->got, &ps->h, &need, &why),
                                   "closed before completing the handshake", &why);
  if (st == RR_AGAIN) {
    rr_listen_note_partial(ps);
    return;
  }
  if (st != RR_OK) {
    rr_listen_refuse(l, ps, rr_listen_recv_refusal(st, why), why);
    return;
  }
  /* The device the hello names is the peer's word: it must be one this
   * listener offers, at the address the socket reached. */
  struct sockaddr_storage local;
  socklen_t llen = sizeof local;
  int offered = 0;
  if (getsockname(ps->fd, (struct sockaddr *)&local, &llen) == 0)
    for (int i = 0; i < l->naddrs; i++)
      offered |= l->addr_dev[i] == ps->h.dev && rr_same_ip(&l->entry_addr[i], &local);
  if (!offered) {
    rr_listen_refuse(l, ps, RR_CTR_REFUSED_OTHER, "hello names a device this listener does not offer at that address");
    return;
  }
  memcpy(ps->hello, ps->in, RR_HS_HELLO_LEN);
  ps->gen_floor = 0;
  if (ps->h.flags & RR_HS_FLAG_RECONNECT) {
    rr_recv_comm *rc = listen_comm_by_id(l, ps->h.conn_id);
    if (rc) ps->gen_floor = gen_floor(rc, ps->h.rail);
  }
  rr_hs_challenge ch = {.gen_floor = ps->gen_floor};
  if (rr_hs_random(ch.nonce, sizeof ch.nonce) != RR_OK) {
    rr_listen_refuse(l, ps, RR_CTR_REFUSED_OTHER, "no random numbers for a challenge");
    return;
  }
  memcpy(ps->snonce, ch.nonce, RR_HS_NONCE_LEN);
  rr_hs_mac_challenge(l->secret, ps->hello, ps->snonce, ps->gen_floor, ch.mac);
  uint8_t out[RR_HS_CHALLENGE_LEN];
  rr_hs_challenge_encode(&ch, out);
  if (send_all(ps->fd, out, sizeof out) != RR_OK) {
    rr_listen_refuse(l, ps, RR_CTR_REFUSED_OTHER, "cannot send the challenge");
    return;
  }
  ps->state = PS_PROOF;
  ps->got = 0;
  ps->partial_ns = 0;
  ps->waiting_ns = rr_now_ns();
}

/* The group an authenticated socket belongs to, made if needed; NULL with
 * *why when the socket does not fit any. */
static pending_group *group_for(rr_listen_comm *l, pending_sock *ps, rr_recv_comm *live, const char **why) {
  const rr_hs_hello *h = &ps->h;
  int recon = live ? h->rail : -1;
  pending_group *g = NULL;
  for (int i = 0; i < l->ngroups && !g; i++)
    if (l->groups[i].conn_id == h->conn_id && l->groups[i].reconnect_rail == recon) {
      g = &l->groups[i];
      if (recon < 0) continue;
      if (h->generation < g->generation) {
        *why = "a reconnect older than one under way";
        return NULL;
      }
      if (h->generation > g->generation) {
        /* A new attempt to reopen the rail: the sender gave up on the last one. */
        group_remove(l, (int)(g - l->groups));
        g = NULL;
      }
    }
  if (g) return g;
  if (l->ngroups == RR_LISTEN_GROUPS && !evict_idle_group(l, rr_now_ns())) {
    *why = "too many connections in progress";
    return NULL;
  }
  if (!rr_slots_room((void **)&l->groups, &l->groups_cap, l->ngroups, RR_LISTEN_GROUPS, sizeof *l->groups)) {
    *why = "out of memory";
    return NULL;
  }
  pending_group tmp;
  memset(&tmp, 0, sizeof tmp);
  tmp.conn_id = h->conn_id;
  tmp.reconnect_rail = recon;
  tmp.generation = h->generation;
  tmp.nstreams = h->nstreams;
  tmp.chunk_size = h->chunk_size;
  tmp.since_ns = tmp.progress_ns = rr_now_ns();
  for (int r = 0; r < RR_MAX_RAILS; r++)
    for (int i = 0; i < RR_HS_MAX_STREAMS; i++) tmp.fds[r][i] = -1;
  if (live) {
    tmp.engine = &live->engine; /* rails_mask: from the connector's COMMIT */
  } else {
    /* The comm this group becomes: endpoints are opened on its engine. */
    tmp.rc = calloc(1, sizeof *tmp.rc);
    rr_engine_config cfg;
    rr_core_engine_config(RR_ENGINE_RECV, h->chunk_size, (struct sockaddr *)&ps->peer, l->profiler, &cfg);
    cfg.reopens = 1; /* the sender reopens failed rails through this listener */
    cfg.traffic_class = l->traffic_class;
    if (!tmp.rc || rr_engine_init(&tmp.rc->engine, &cfg) != RR_OK) {
      free(tmp.rc);
      *why = "out of memory";
      return NULL;
    }
    tmp.engine = &tmp.rc->engine;
  }
  g = &l->groups[l->ngroups++];
  *g = tmp;
  return g;
}

/* RERAIL_TEST_REFUSE_PROOF=N (tests only): is this the Nth new connection's
 * commit socket (rail 0, stream 0: an early COMMIT rides on it) this
 * process's listeners have taken a PROOF of? Refused, it is what a full
 * listener does to a connector that may have handed its comm out. */
static int test_refusal_due(void) {
  static _Atomic uint64_t seen;
  uint64_t n = rr_params_get()->test_refuse_proof;
  return n && atomic_fetch_add_explicit(&seen, 1, memory_order_relaxed) + 1 == n;
}

/* PROOF in: the socket proves it holds the secret. Then it is checked
 * against the connection it names, joins its group, and gets our ACCEPT. */
static void on_proof(rr_listen_comm *l, pending_sock *ps) {
  const char *why = NULL;
  rr_hs_proof pr;
  rr_status st = RR_SETUP_RECV_MSG(ps->fd, ps->in, ps->got, rr_hs_proof_decode(RR_HS_PROOF, ps->in, ps->got, &pr, &need, &why),
                                   "closed before completing the handshake", &why);
  if (st == RR_AGAIN) {
    rr_listen_note_partial(ps);
    return;
  }
  if (st != RR_OK) {
    rr_listen_refuse(l, ps, rr_listen_recv_refusal(st, why), why);
    return;
  }
  uint8_t mac[RR_HS_MAC_LEN];
  rr_hs_mac_blob(RR_HS_PROOF, l->secret, ps->hello, ps->snonce, pr.blob, pr.blob_len, mac);
  if (!rr_hs_mac_equal(mac, pr.mac)) {
    rr_listen_refuse(l, ps, RR_CTR_REFUSED_WRONG_SECRET, "wrong secret (the peer does not hold this listener's handle)");
    return;
  }
  /* Authenticated: what it names is now worth checking. */
  const rr_hs_hello *h = &ps->h;
  if (!(h->flags & RR_HS_FLAG_RECONNECT) && h->rail == 0 && h->stream == 0 && test_refusal_due()) {
    rr_listen_refuse(l, ps, RR_CTR_REFUSED_CROWDED_OUT, "crowded out (RERAIL_TEST_REFUSE_PROOF)");
    return;
  }
  rr_recv_comm *live = NULL;
  if (h->flags & RR_HS_FLAG_RECONNECT) {
    live = listen_comm_by_id(l, h->conn_id);
    if (!live) { rr_listen_refuse(l, ps, RR_CTR_REFUSED_STALE_RECONNECT, "a reconnect for no live connection"); return; }
    if (!(live->rails_mask & (1u << h->rail))) { rr_listen_refuse(l, ps, RR_CTR_REFUSED_STALE_RECONNECT, "a reconnect for a rail the connection does not have"); return; }
    if (h->generation <= live->generation[h->rail]) { rr_listen_refuse(l, ps, RR_CTR_REFUSED_STALE_RECONNECT, "a reconnect older than the rail's sockets"); return; }
    if (h->generation - gen_floor(live, h->rail) > RR_HS_GEN_WINDOW && h->generation > gen_floor(live, h->rail)) {
      rr_listen_refuse(l, ps, RR_CTR_REFUSED_RUNAWAY, "a runaway reconnect generation (beyond the rail's window)");
      return;
    }
    if (h->generation > live->gen_seen[h->rail]) live->gen_seen[h->rail] = h->generation;
  } else if (l->nccl_closed) {
    rr_listen_refuse(l, ps, RR_CTR_REFUSED_OTHER, "a new connection after NCCL closed this listener");
    return;
  }
  pending_group *g = group_for(l, ps, live, &why);
  if (!g) { rr_listen_refuse(l, ps, RR_CTR_REFUSED_OTHER, why); return; }
  int r = h->rail;
  int first = 1;
  for (int i = 0; i < g->nstreams; i++) first &= g->fds[r][i] < 0;
  if (g->nstreams != h->nstreams || g->chunk_size != h->chunk_size || g->fds[r][h->stream] >= 0 ||
      (!first && g->dev[r] != h->dev)) {
    rr_listen_refuse(l, ps, RR_CTR_REFUSED_MALFORMED, "hello inconsistent with its connection");
    return;
  }
  if (first) {
    /* Our endpoint of this rail, on the device the hello names (checked:
     * one of ours, reached at the address its entry gives). */
    g->dev[r] = h->dev;
    rr_setup_ep_abandon(&g->ep[r]);
    uint8_t blob[RR_HS_BLOB_MAX];
    uint16_t blen = 0;
    if (rr_setup_ep_open(g->dev[r], g->engine, &g->ep[r], blob, &blen) != RR_OK) {
      rr_listen_refuse(l, ps, RR_CTR_REFUSED_OTHER, "cannot open an endpoint for the rail");
      return;
    }
    g->peer_blob_len[r] = pr.blob_len;
    memcpy(g->peer_blob[r], pr.blob, pr.blob_len);
  } else if (pr.blob_len != g->peer_blob_len[r] || memcmp(pr.blob, g->peer_blob[r], pr.blob_len)) {
    rr_listen_refuse(l, ps, RR_CTR_REFUSED_MALFORMED, "two endpoint addresses for one rail");
    return;
  }
  rr_hs_proof acc;
  memset(&acc, 0, sizeof acc);
  if (rr_setup_ep_addr(g->ep[r], acc.blob, &acc.blob_len) != RR_OK || acc.blob_len > RR_HS_BLOB_MAX) {
    rr_listen_refuse(l, ps, RR_CTR_REFUSED_OTHER, "our endpoint has no address");
    return;
  }
  rr_hs_mac_blob(RR_HS_ACCEPT, l->secret, ps->hello, ps->snonce, acc.blob, acc.blob_len, acc.mac);
  uint8_t out[RR_HS_MAX_LEN];
  size_t n = rr_hs_proof_encode(RR_HS_ACCEPT, &acc, out);
  if (send_all(ps->fd, out, n) != RR_OK) {
    rr_listen_refuse(l, ps, RR_CTR_REFUSED_OTHER, "cannot send the accept");
    return;
  }
  g->fds[r][h->stream] = ps->fd;
  g->progress_ns = rr_now_ns();
  if (h->stream == 0) g->readable |= 1u << r; /* its COMMIT may be there already */
  ps->fd = -1;
}

/* What a COMMIT may name beyond its format: a reconnect, its one rail and no
 * rails for later; a first connection, rails for later only at addresses
 * this listener gave out. */
static rr_status commit_check(const rr_listen_comm *l, const pending_group *g, const rr_hs_commit *cm,
                              const char **why) {
  if (g->reconnect_rail >= 0 && (cm->rails != 1u << g->reconnect_rail || cm->later)) {
    *why = "a reconnect's COMMIT names other rails";
    return RR_ERR_PROTOCOL;
  }
  for (int r = 0; r < RR_MAX_RAILS; r++)
    if ((cm->later & (1u << r)) && cm->later_addr[r] >= l->naddrs) {
      *why = "a rail to reopen later names an address this listener does not have";
      return RR_ERR_PROTOCOL;
    }
  return RR_OK;
}

/* The rails whose every socket the group holds. */
static uint32_t group_whole(const pending_group *g) {
  uint32_t whole = 0;
  for (int r = 0; r < RR_MAX_RAILS; r++) {
    int all = 1;
    for (int i = 0; i < g->nstreams; i++) all &= g->fds[r][i] >= 0;
    if (all) whole |= 1u << r;
  }
  return whole;
}

/* The sockets of a group worth watching (poll_listener), or -1: before its
 * COMMIT, each rail's stream 0 (the COMMIT comes on one of them; another
 * ending means the connector left that rail out); after an early COMMIT,
 * while a rail it names still waits for a PROOF, that rail's sockets here
 * (one ending means the rail is lost: rr_commit_resolve). */
static int watched_fd(const pending_group *g, int r, int i, uint32_t whole) {
  int fd = g->fds[r][i];
  uint32_t bit = 1u << r;
  if (fd < 0) return -1;
  if (!g->rails_mask) return i == 0 && !(g->frames_first & bit) ? fd : -1;
  if (g->reconnect_rail >= 0 || !(g->rails_mask & bit) || (whole & bit) || (g->lost_seen & bit)) return -1;
  return fd;
}

/* A rail's sockets at the listener end: closed, its endpoint gone. */
static void rail_lost(pending_group *g, int r) {
  for (int i = 0; i < RR_HS_MAX_STREAMS; i++)
    if (g->fds[r][i] >= 0) close(g->fds[r][i]), g->fds[r][i] = -1;
  rr_setup_ep_abandon(&g->ep[r]);
  g->lost_seen |= 1u << r;
  g->progress_ns = rr_now_ns();
}

/* After an early COMMIT: a rail it names that waits for a PROOF, and one of
 * whose sockets here ended (a byte there is the connection's first frames,
 * left for the transport). */
static void watch_committed(pending_group *g) {
  for (int r = 0; r < RR_MAX_RAILS; r++) {
    if (!(g->readable & (1u << r))) continue;
    g->readable &= ~(1u << r);
    int ended = 0;
    for (int i = 0; i < RR_HS_MAX_STREAMS; i++) {
      if (g->fds[r][i] < 0) continue;
      uint8_t b;
      ssize_t n;
      do n = recv(g->fds[r][i], &b, 1, MSG_PEEK | MSG_DONTWAIT);
      while (n < 0 && errno == EINTR);
      ended |= n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    }
    if (ended) rail_lost(g, r);
  }
}

/* What stream 0 of a rail starts with, looked at without taking a byte:
 * RR_OK with *cm when a whole COMMIT (taken by commit_take); RR_AGAIN while
 * too little is there to tell; RR_ERR_PEER when the socket closed or failed;
 * RR_ERR_PROTOCOL (or RR_ERR_UNSUPPORTED) with *why otherwise, *why being
 * rr_hs_why_not_rerail when the bytes are not a setup message at all. */
static rr_status commit_peek(int fd, rr_hs_commit *cm, const char **why) {
  uint8_t buf[RR_HS_COMMIT_LEN];
  ssize_t n;
  do n = recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return RR_AGAIN;
  if (n <= 0) return RR_ERR_PEER;
  size_t need = 0;
  return rr_hs_commit_decode(buf, (size_t)n, cm, &need, why);
}

/* Take the COMMIT commit_peek saw: exactly its bytes, never one of what
 * follows (the data path's). They are queued, so one read takes them all. */
static rr_status commit_take(int fd) {
  uint8_t buf[RR_HS_COMMIT_LEN];
  ssize_t n;
  do n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  return n == (ssize_t)sizeof buf ? RR_OK : RR_ERR_PEER;
}

/* The connector's COMMIT names the final set of rails, and those it reopens
 * later; a reconnect's names its rail, once the connector has swapped to the
 * new endpoint.
 *
 * A first connection's COMMIT comes on stream 0 of the lowest rail that came
 * up at the connector, which the listener cannot name: it may hold every
 * socket of a lower rail the connector gave up on, whose close a failed path
 * never delivers, so it looks at every rail's stream 0. The others carry the
 * connection's frames as soon as the connector has gone on (a control
 * message once the commit rail failed under it, an eager message in balance
 * mode), and on another path those may come before the COMMIT: so each
 * stream 0 is peeked at, and bytes that are not a setup message mark a rail
 * that is not the commit rail, left as they are for its transport (a data
 * frame never starts with RR_HS_MAGIC: TCP's first byte is its frame type).
 * A reconnect has one rail, on which COMMIT comes first. */
static void read_commits(rr_listen_comm *l) {
  for (int gi = 0; gi < l->ngroups;) {
    pending_group *g = &l->groups[gi];
    int drop = 0;
    if (g->rails_mask && g->reconnect_rail < 0) watch_committed(g);
    for (int r = 0; r < RR_MAX_RAILS && !g->rails_mask && !drop; r++) {
      int fd = g->fds[r][0];
      if (fd < 0 || (g->frames_first & (1u << r)) || !(g->readable & (1u << r))) continue;
      g->readable &= ~(1u << r);
      const char *why = NULL;
      rr_hs_commit cm;
      rr_status st = commit_peek(fd, &cm, &why);
      if (st == RR_AGAIN) continue;
      if (st == RR_ERR_PEER && g->reconnect_rail < 0) {
        /* The connector left this rail out (it closes sockets of rails it
         * gave up on), or it was lost; COMMIT comes on another. */
        rail_lost(g, r);
        continue;
      }
      if (st == RR_ERR_PEER) {
        drop = 1; /* the connector gave this attempt up */
        break;
      }
      if (st == RR_ERR_PROTOCOL && why == rr_hs_why_not_rerail && g->reconnect_rail < 0) {
        g->frames_first |= 1u << r;
        continue;
      }
      if (st == RR_OK) st = commit_check(l, g, &cm, &why);
      if (st == RR_OK && commit_take(fd) != RR_OK) st = RR_ERR_PEER, why = "the COMMIT could not be read";
      if (st != RR_OK) {
        RR_WARN("accept: dropping a connection whose set of rails is garbled: %s", why);
        drop = 1;
        break;
      }
      g->rails_mask = cm.rails;
      g->later_mask = cm.later;
      g->progress_ns = rr_now_ns();
      memcpy(g->later_addr, cm.later_addr, sizeof g->later_addr);
    }
    if (drop) group_remove(l, gi);
    else gi++;
  }
}

static int group_complete(const pending_group *g) {
  return g->rails_mask && (g->rails_mask & ~group_whole(g)) == 0;
}

/* A first connection's COMMIT is in: the rails it names still waiting for
 * a PROOF are waited for; those lost (read_commits saw their sockets end)
 * join as failed rails, and the connection goes on over the others
 * (connect_plan.h, rr_commit_resolve). */
static enum rr_commit_verdict group_settle_commit(pending_group *g) {
  uint32_t up, lost;
  enum rr_commit_verdict v = rr_commit_resolve(g->rails_mask, group_whole(g), g->lost_seen, &up, &lost);
  if (v != RR_COMMIT_GO) return v;
  if (lost)
    RR_INFO(RR_SUB_NET, "accept: connection %016llx: rail(s) 0x%x closed after they were accepted: "
            "held down until the connector reopens them", (unsigned long long)g->conn_id, lost);
  g->rails_mask = up;
  g->later_mask |= lost;
  g->lost_mask = lost;
  return RR_COMMIT_GO;
}

static void drop_stale(rr_listen_comm *l, uint64_t now) {
  rr_listen_drop_expired(l, now);
  uint64_t limit = rr_connect_timeout_ns();
  for (int i = 0; i < l->ngroups;) {
    const pending_group *g = &l->groups[i];
    if (rr_group_stale(now - g->since_ns, now - g->progress_ns, group_open(g), limit)) {
      RR_WARN("accept: dropping a connection whose sockets did not all arrive in time");
      group_remove(l, i);
    } else {
      i++;
    }
  }
}

/* Connect a group's endpoints: the rails of the set, in order. */
static rr_status connect_rail_ep(pending_group *g, int r, rr_rail_ep **ep) {
  rr_status st = rr_setup_ep_connect(&g->ep[r], g->dev[r], g->engine, g->peer_blob[r], g->peer_blob_len[r],
                                     g->fds[r], g->nstreams);
  for (int i = 0; i < RR_HS_MAX_STREAMS; i++)
    if (g->fds[r][i] >= 0) close(g->fds[r][i]), g->fds[r][i] = -1;
  *ep = g->ep[r];
  g->ep[r] = NULL;
  return st;
}

static rr_status comms_add(rr_listen_comm *l, rr_recv_comm *rc) {
  if (l->ncomms == l->comms_cap) {
    int cap = l->comms_cap ? 2 * l->comms_cap : 16;
    rr_recv_comm **c = realloc(l->comms, (size_t)cap * sizeof *c);
    if (!c) return RR_ERR_NOMEM;
    l->comms = c;
    l->comms_cap = cap;
  }
  l->comms[l->ncomms++] = rc;
  return RR_OK;
}

static unsigned listen_port(const rr_listen_comm *l) {
  struct sockaddr_storage a;
  socklen_t len = sizeof a;
  if (l->nfds < 1 || getsockname(l->fds[0], (struct sockaddr *)&a, &len) != 0) return 0;
  return ntohs(a.ss_family == AF_INET ? ((struct sockaddr_in *)&a)->sin_port : ((struct sockaddr_in6 *)&a)->sin6_port);
}

/* Rail r of a group, connected, to the engine. */
static rr_status add_rail_up(pending_group *g, int r, rr_engine *e) {
  const rr_devices *d = rr_core_devices();
  struct sockaddr_storage remote;
  socklen_t rlen = sizeof remote;
  getpeername(g->fds[r][0], (struct sockaddr *)&remote, &rlen);
  rr_rail_ep *ep = NULL;
  rr_status st = connect_rail_ep(g, r, &ep);
  if (st != RR_OK) return st;
  char abuf[64];
  int dev = g->dev[r];
  rr_sockaddr_str((struct sockaddr *)&remote, abuf, sizeof abuf);
  st = rr_engine_add_rail(e, ep, d->nif[dev].speed_mbps > 0 ? d->nif[dev].speed_mbps : 10000, d->nif[dev].name, abuf);
  if (st != RR_OK) ep->ops->destroy(ep);
  return st;
}

/* Rail r of a group that the connector reopens once it works: an endpoint,
 * never connected, on the device behind the address that rail will reach
 * (the engine names the buffers' keys on that device in clear-to-sends, and
 * the reopened rail arrives there). Its peer address is not known yet: the
 * rail is named after the peer host. */
static rr_status add_rail_later(const rr_listen_comm *l, const pending_group *g, int r, rr_engine *e) {
  const rr_devices *d = rr_core_devices();
  /* A rail lost after it arrived comes back where it came. */
  int dev = (g->lost_mask & (1u << r)) ? g->dev[r] : l->addr_dev[g->later_addr[r]];
  rr_rail_ep *ep = NULL;
  uint8_t blob[RR_HS_BLOB_MAX];
  uint16_t blen = 0;
  rr_status st = rr_setup_ep_open(dev, e, &ep, blob, &blen);
  if (st != RR_OK) return st;
  st = rr_engine_add_rail_later(e, ep, d->nif[dev].speed_mbps > 0 ? d->nif[dev].speed_mbps : 10000,
                                d->nif[dev].name, e->cfg.peer, "the connector could not reach it");
  if (st != RR_OK) ep->ops->destroy(ep);
  return st;
}

/* Build the receive comm from a complete group (which this consumes): its
 * rails in order, those up connected, those for later held down. */
static rr_status make_recv_comm(rr_listen_comm *l, pending_group *g, rr_recv_comm **out) {
  rr_recv_comm *rc = g->rc;
  g->rc = NULL;
  rr_status st = RR_OK;
  for (int r = 0; r < RR_MAX_RAILS && st == RR_OK; r++) {
    if (g->rails_mask & (1u << r)) st = add_rail_up(g, r, &rc->engine);
    else if (g->later_mask & (1u << r)) st = add_rail_later(l, g, r, &rc->engine);
  }
  group_close(g); /* sockets and endpoints of rails the connector left out */
  rc->magic = RR_MAGIC_RECV;
  rc->dev = l->dev;
  rc->conn_id = g->conn_id;
  rc->rails_mask = g->rails_mask | g->later_mask;
  if (st == RR_OK) st = comms_add(l, rc);
  if (st != RR_OK) {
    rr_engine_fini(&rc->engine);
    free(rc);
    return st;
  }
  rc->listen = l;
  if (l->ncomms == 1) rr_monitor_add_listener(l);
  /* The id names the connection in reconnect refusals and diagnostics. */
  RR_INFO(RR_SUB_NET, "accepted connection %016llx from %s over %d rail(s) (listener port %u)",
          (unsigned long long)rc->conn_id, rc->engine.cfg.peer, rc->engine.nrails, listen_port(l));
  rr_monitor_add(&rc->engine);
  *out = rc;
  return RR_OK;
}

/* A reconnected rail is complete: its endpoint connects (on a thread of its
 * own where that may block, connect_job.c), then goes to the live
 * connection. 0: nothing to connect (the connection is gone, or a newer
 * attempt got here first), the group is over. */
static int reconnect_start(rr_listen_comm *l, pending_group *g) {
  rr_recv_comm *rc = listen_comm_by_id(l, g->conn_id);
  int r = g->reconnect_rail;
  if (!rc || !(rc->rails_mask & (1u << r)) || g->generation <= rc->generation[r]) return 0;
  rc->generation[r] = g->generation;
  /* Where the reopened rail comes from: a rail added for later knew only
   * the peer host, and its link (link_life.h) is keyed by the address. */
  struct sockaddr_storage remote;
  socklen_t rlen = sizeof remote;
  if (getpeername(g->fds[r][0], (struct sockaddr *)&remote, &rlen) == 0)
    rr_sockaddr_str((struct sockaddr *)&remote, g->install_peer, sizeof g->install_peer);
  else
    g->install_peer[0] = 0;
  rr_rail_ep *ep = g->ep[r];
  g->ep[r] = NULL; /* the job's now */
  return rr_connect_job_start(ep, g->dev[r], g->peer_blob[r], g->peer_blob_len[r], g->fds[r], g->nstreams,
                              &g->install) == RR_OK;
}

/* 0 while the endpoint connects; 1 when the group is over (the endpoint
 * installed, or gone: a connect that failed, a connection closed or
 * reopened again meanwhile). */
static int reconnect_install(rr_listen_comm *l, pending_group *g) {
  rr_rail_ep *ep = NULL;
  rr_status st = rr_connect_job_finish(g->install, &ep);
  if (st == RR_AGAIN) return 0;
  g->install = NULL;
  if (st != RR_OK) return 1;
  rr_recv_comm *rc = listen_comm_by_id(l, g->conn_id);
  int r = g->reconnect_rail;
  if (!rc || !(rc->rails_mask & (1u << r)) || rc->generation[r] != g->generation) {
    ep->ops->destroy(ep);
    return 1;
  }
  /* The engine's rails are the connection's rails in order. */
  rr_engine_rail_replace(&rc->engine, __builtin_popcount(rc->rails_mask & ((1u << r) - 1)), ep,
                         g->install_peer[0] ? g->install_peer : NULL);
  return 1;
}


static rr_status advance_locked(rr_listen_comm *l, rr_recv_comm **out);

/* Idle again: give the slots' memory back. */
static void release_idle(rr_listen_comm *l) {
  if (!l->nsocks) free(l->socks), l->socks = NULL, l->socks_cap = 0;
  if (!l->ngroups) free(l->groups), l->groups = NULL, l->groups_cap = 0;
}

/* Which of the listener's sockets have something for us: one poll(2) over
 * the listening sockets, the pending ones and each group's streams 0 that
 * may still carry a COMMIT. Most calls find nothing: NCCL calls accept() on
 * every pending connection in turn, and the monitor services every live
 * listener, so a failing accept(2), recv(2) or peek per socket and call was
 * most of what setting up thousands of connections cost a listener (and an
 * accept(2) that fails costs more: the kernel makes and drops a socket
 * file). pfd[0..nfds-1] are the listening sockets. */
static void poll_listener(rr_listen_comm *l, struct pollfd *pfd) {
  struct pollfd all[RR_LISTEN_FDS + RR_LISTEN_PENDING + RR_LISTEN_GROUPS * RR_MAX_RAILS * RR_HS_MAX_STREAMS];
  int n = 0;
  for (int k = 0; k < l->nfds; k++) all[n++] = (struct pollfd){.fd = l->fds[k], .events = POLLIN};
  for (int i = 0; i < l->nsocks; i++)
    if (l->socks[i].fd >= 0) all[n++] = (struct pollfd){.fd = l->socks[i].fd, .events = POLLIN};
  for (int gi = 0; gi < l->ngroups; gi++) {
    const pending_group *g = &l->groups[gi];
    uint32_t whole = group_whole(g);
    for (int r = 0; r < RR_MAX_RAILS; r++)
      for (int i = 0; i < RR_HS_MAX_STREAMS; i++)
        if (watched_fd(g, r, i, whole) >= 0) all[n++] = (struct pollfd){.fd = g->fds[r][i], .events = POLLIN};
  }
  int ready = n ? poll(all, (nfds_t)n, 0) : 0;
  /* A poll that fails (EINTR, ENOMEM) tells nothing: look at everything. */
  if (ready < 0)
    for (int k = 0; k < n; k++) all[k].revents = POLLIN;
  n = 0;
  for (int k = 0; k < l->nfds; k++) pfd[k] = all[n++];
  for (int i = 0; i < l->nsocks; i++)
    if (l->socks[i].fd >= 0) l->socks[i].readable = all[n++].revents != 0;
  for (int gi = 0; gi < l->ngroups; gi++) {
    pending_group *g = &l->groups[gi];
    uint32_t whole = group_whole(g);
    for (int r = 0; r < RR_MAX_RAILS; r++)
      for (int i = 0; i < RR_HS_MAX_STREAMS; i++)
        if (watched_fd(g, r, i, whole) >= 0 && all[n++].revents) g->readable |= 1u << r;
  }
}

static rr_status accept_locked(rr_listen_comm *l, rr_recv_comm **out) {
  struct pollfd pfd[RR_LISTEN_FDS];
  poll_listener(l, pfd);
  rr_status st = rr_listen_take_new(l, pfd);
  if (st == RR_OK) st = advance_locked(l, out);
  release_idle(l);
  return st;
}

static rr_status advance_locked(rr_listen_comm *l, rr_recv_comm **out) {
  for (int i = 0; i < l->nsocks; i++) {
    pending_sock *ps = &l->socks[i];
    if (!ps->readable) continue;
    ps->readable = 0;
    /* One message a call: a PROOF cannot be there before our CHALLENGE
     * went out. */
    if (ps->fd >= 0 && ps->state == PS_HELLO) on_hello(l, ps);
    else if (ps->fd >= 0 && ps->state == PS_PROOF) on_proof(l, ps);
  }
  read_commits(l);
  drop_stale(l, rr_now_ns());
  for (int i = 0; i < l->ngroups;) {
    pending_group *g = &l->groups[i];
    int over = 0;
    if (g->install) over = reconnect_install(l, g);
    else if (g->reconnect_rail >= 0 && group_complete(g)) over = !reconnect_start(l, g) || reconnect_install(l, g);
    if (over) group_remove(l, i);
    else i++;
  }
  /* Hand out one complete connection (only NCCL's accept() asks). */
  for (int i = 0; i < l->ngroups && out; i++) {
    if (l->groups[i].reconnect_rail >= 0 || !l->groups[i].rails_mask) continue;
    enum rr_commit_verdict v = group_settle_commit(&l->groups[i]);
    if (v == RR_COMMIT_WAIT) continue;
    if (v == RR_COMMIT_DROP) {
      RR_INFO(RR_SUB_NET, "accept: dropping a connection whose every rail closed before it was handed out");
      group_remove(l, i--);
      continue;
    }
    pending_group g = l->groups[i];
    l->groups[i] = l->groups[--l->ngroups];
    return make_recv_comm(l, &g, out);
  }
  return RR_OK;
}

rr_status rr_net_accept(rr_listen_comm *l, rr_recv_comm **out) {
  if (!out) return RR_ERR_INVALID;
  *out = NULL;
  if (!l || l->magic != RR_MAGIC_LISTEN) {
    RR_WARN("accept: not a rerail listen comm");
    return RR_ERR_INVALID;
  }
  uint64_t t0 = rr_now_ns();
  pthread_mutex_lock(&l->lock);
  rr_status st = accept_locked(l, out);
  pthread_mutex_unlock(&l->lock);
  rr_counter_add(RR_CTR_SETUP_CALL_US_ACCEPT, (rr_now_ns() - t0) / 1000u);
  rr_counter_inc(RR_CTR_SETUP_CALLS_ACCEPT);
  return st;
}

void rr_listen_service(rr_listen_comm *l) {
  /* The monitor calls this holding its registry lock, and NCCL's accept()
   * takes the registry lock under this one: never wait here. */
  if (pthread_mutex_trylock(&l->lock) != 0) return;
  accept_locked(l, NULL);
  pthread_mutex_unlock(&l->lock);
}
