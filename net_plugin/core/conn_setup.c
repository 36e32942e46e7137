/* Connection establishment: listen, connect and accept, all non-blocking.
 *
 * A connection is a group of TCP sockets (one per stream of the rail). Each
 * socket opens with a hello carrying the listener's token and a random
 * connection id; the listener groups sockets by id and hands a complete group
 * to the engine. A socket with a wrong token is refused and logged, never
 * trusted. NCCL calls connect() and accept() again and again until they
 * return a comm, so the state in between lives here, keyed by the caller's
 * handle (connect) or the listen comm (accept). */
#include "core_internal.h"
#include "rail_tcp.h"
#include "rr_clock.h"
#include "rr_health.h"
#include "rr_topo.h"
#include "rr_log.h"
#include "rr_params.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define RETRY_DELAY_NS (20ull * 1000 * 1000)

static uint64_t random_u64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
    /* getrandom cannot fail for 8 bytes once the pool is seeded; still, never
     * hand out a predictable zero token. */
    v = rr_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&v;
  }
  return v;
}

rr_status rr_sock_tune(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) return RR_ERR_SYSTEM;
  /* RERAIL_TCP_CONGESTION: e.g. BBR paces on a host whose qdisc does not, and
   * on a fast local link that can halve a rail's throughput (bench/RESULTS.md):
   * an operator may pick another algorithm for the rails alone. One that the
   * kernel lacks or does not allow is reported once; the socket keeps the
   * system's. */
  const char *cc = rr_params_get()->tcp_congestion;
  if (cc[0] && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) != 0) {
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&warned))
      RR_WARN("RERAIL_TCP_CONGESTION=%s: the kernel refuses it (%s); the rails keep the system's congestion "
              "control (see net.ipv4.tcp_available_congestion_control and tcp_allowed_congestion_control)",
              cc, strerror(errno));
  }
  return RR_OK;
}

/* ------------------------------------------------------------------ listen */

rr_status rr_net_listen(rr_net_ctx *ctx, int dev, void *handle, rr_listen_comm **out) {
  const rr_devices *d = rr_core_devices();
  if (!handle || !out) return RR_ERR_INVALID;
  if (dev < 0 || dev >= d->count) {
    RR_WARN("listen: device %d does not exist (%d devices)", dev, d->count);
    return RR_ERR_INVALID;
  }
  const rr_netif *nif = &d->nif[dev];
  rr_listen_comm *l = calloc(1, sizeof *l);
  if (!l) return RR_ERR_NOMEM;
  int fd = socket(nif->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    RR_WARN("listen: socket: %s", strerror(errno));
    free(l);
    return RR_ERR_SYSTEM;
  }
  /* Listen on every address of the host: backup rails reach us through the
   * other NICs' addresses, all carried in the handle. */
  struct sockaddr_storage any;
  memset(&any, 0, sizeof any);
  any.ss_family = nif->addr.ss_family;
  socklen_t alen = nif->addr.ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                                  : sizeof(struct sockaddr_in6);
  struct sockaddr_storage bound;
  socklen_t blen = sizeof bound;
  if (bind(fd, (struct sockaddr *)&any, alen) != 0 || listen(fd, 512) != 0 ||
      getsockname(fd, (struct sockaddr *)&bound, &blen) != 0) {
    RR_WARN("listen: bind/listen on %s: %s", nif->name, strerror(errno));
    close(fd);
    free(l);
    return RR_ERR_SYSTEM;
  }
  uint16_t port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                                   : ((struct sockaddr_in6 *)&bound)->sin6_port);
  /* The listening device first, then the others of the same family. */
  struct sockaddr_storage addrs[RR_HANDLE_MAX_ADDRS];
  int naddrs = 0;
  addrs[naddrs++] = nif->addr;
  for (int i = 0; i < d->count && naddrs < RR_HANDLE_MAX_ADDRS; i++)
    if (i != dev && d->nif[i].addr.ss_family == nif->addr.ss_family) addrs[naddrs++] = d->nif[i].addr;
  l->magic = RR_MAGIC_LISTEN;
  l->profiler = ctx ? ctx->profiler : NULL;
  l->dev = dev;
  l->fd = fd;
  l->token = random_u64();
  pthread_mutex_init(&l->lock, NULL);
  rr_status st = rr_handle_encode(addrs, naddrs, port, l->token, handle);
  if (st != RR_OK) {
    rr_net_close_listen(l);
    return st;
  }
  char abuf[64];
  RR_INFO(RR_SUB_NET | RR_SUB_INIT, "listening on %s (%s) port %u", nif->name,
          rr_sockaddr_str((const struct sockaddr *)&nif->addr, abuf, sizeof abuf), port);
  *out = l;
  return RR_OK;
}

static void group_close(pending_group *g);

static void listen_free(rr_listen_comm *l) {
  close(l->fd);
  for (int i = 0; i < l->nsocks; i++)
    if (l->socks[i].fd >= 0) close(l->socks[i].fd);
  for (int g = 0; g < l->ngroups; g++) group_close(&l->groups[g]);
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
  int last = l->ncomms == 0;
  int gone = last && l->nccl_closed;
  pthread_mutex_unlock(&l->lock);
  if (last) rr_monitor_remove_listener(l);
  if (gone) listen_free(l);
}

/* ----------------------------------------------------------------- connect */

static pthread_mutex_t connect_lock = PTHREAD_MUTEX_INITIALIZER;
static connect_state *connects;

static void connect_state_free(connect_state *c) {
  for (int r = 0; r < c->nrails; r++)
    for (int i = 0; i < c->nstreams; i++)
      if (c->rails[r].fds[i] >= 0) close(c->rails[r].fds[i]);
  free(c);
}

static void connect_state_unlink(connect_state *c) {
  for (connect_state **p = &connects; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      return;
    }
}

/* Which of the peer's addresses a local NIC should talk to: one on its own
 * subnet (the usual rail-per-subnet fabric), else the next unused one. */
static int pair_peer_addr(const rr_netif *nif, const rr_peer_addrs *peer, const int *used) {
  for (int j = 1; j < peer->naddrs; j++)
    if (!used[j] && rr_sockaddr_same_subnet(&nif->addr, &peer->addrs[j], nif->prefix_len)) return j;
  for (int j = 1; j < peer->naddrs; j++)
    if (!used[j] && peer->addrs[j].ss_family == nif->addr.ss_family &&
        !rr_sockaddr_same_subnet(&nif->addr, &peer->addrs[0], nif->prefix_len))
      return j;
  return -1;
}

/* Primary rail first, then backups along the failover chain (every other
 * NIC in balance mode), each paired with a peer address it can reach. */
static void plan_rails(connect_state *c, int dev) {
  const rr_devices *d = rr_core_devices();
  const rr_params *p = rr_params_get();
  int used[RR_HANDLE_MAX_ADDRS] = {1};
  c->rails[0].dev = dev;
  c->rails[0].peer_addr = 0;
  c->nrails = 1;
  unsigned char healthy[RR_MAX_NETIFS];
  for (int i = 0; i < d->count; i++) healthy[i] = rr_health_nic_get(i) != RR_LINK_DOWN;
  int chain[RR_MAX_NETIFS];
  int n = rr_topo_failover_chain("/sys", d->nif, d->count, dev, healthy, chain, RR_MAX_NETIFS);
  int want = p->failover == RR_FAILOVER_BALANCE ? RR_MAX_RAILS - 1 : p->backups;
  for (int k = 0; k < n && c->nrails <= want && c->nrails < RR_MAX_RAILS; k++) {
    int j = pair_peer_addr(&d->nif[chain[k]], &c->peer, used);
    if (j < 0) continue;
    used[j] = 1;
    c->rails[c->nrails].dev = chain[k];
    c->rails[c->nrails].peer_addr = j;
    c->nrails++;
  }
}

/* Open one stream's socket from the rail's local device towards its peer address. */
static rr_status stream_open(connect_state *c, connect_rail *cr, int i) {
  const rr_netif *nif = &rr_core_devices()->nif[cr->dev];
  const struct sockaddr_storage *dst = &c->peer.addrs[cr->peer_addr];
  int fd = socket(dst->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return RR_ERR_SYSTEM;
  if (rr_sock_tune(fd) != RR_OK) goto fail;
  /* Leave through our device: bind its address when the families agree. */
  if (nif->addr.ss_family == dst->ss_family && !nif->is_loopback) {
    struct sockaddr_storage src = nif->addr;
    if (src.ss_family == AF_INET) ((struct sockaddr_in *)&src)->sin_port = 0;
    else ((struct sockaddr_in6 *)&src)->sin6_port = 0;
    if (bind(fd, (struct sockaddr *)&src, nif->addrlen) != 0) goto fail;
  }
  if (connect(fd, (const struct sockaddr *)dst, c->peer.addrlens[cr->peer_addr]) != 0 &&
      errno != EINPROGRESS)
    goto fail;
  cr->fds[i] = fd;
  cr->connected[i] = 0;
  cr->hello_sent[i] = 0;
  return RR_OK;
fail:
  close(fd);
  return RR_ERR_SYSTEM;
}

static void rail_close_fds(const connect_state *c, connect_rail *cr) {
  for (int i = 0; i < c->nstreams; i++)
    if (cr->fds[i] >= 0) close(cr->fds[i]), cr->fds[i] = -1;
}

static void rail_give_up(connect_state *c, connect_rail *cr, const char *why) {
  char abuf[64];
  RR_INFO(RR_SUB_NET, "rail %s -> %s not connected: %s", rr_core_devices()->nif[cr->dev].name,
          rr_sockaddr_str((struct sockaddr *)&c->peer.addrs[cr->peer_addr], abuf, sizeof abuf), why);
  rail_close_fds(c, cr);
  cr->status = RAIL_FAILED;
}

/* Advance one rail's connects. The primary retries what a listener that is
 * not ready yet would cause, unless a backup already stands (then a primary
 * that cannot reach the peer is left out); a backup gives up at once. */
static rr_status rail_connect(connect_state *c, connect_rail *cr, int primary, int have_backup,
                              uint64_t now) {
  int connected = 0;
  for (int i = 0; i < c->nstreams && cr->status == RAIL_PENDING; i++) {
    if (cr->fds[i] < 0) {
      if (now < cr->retry_at_ns) continue;
      if (stream_open(c, cr, i) != RR_OK) {
        if (!primary || have_backup) return rail_give_up(c, cr, strerror(errno)), RR_OK;
        RR_WARN("connect: cannot open a socket to the peer: %s", strerror(errno));
        return RR_ERR_SYSTEM;
      }
    }
    if (!cr->connected[i]) {
      struct pollfd p = {.fd = cr->fds[i], .events = POLLOUT};
      if (poll(&p, 1, 0) <= 0) continue;
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(cr->fds[i], SOL_SOCKET, SO_ERROR, &err, &len);
      if (err) {
        if (!primary || have_backup) return rail_give_up(c, cr, strerror(err)), RR_OK;
        /* The listener may not be up yet or its backlog is full: retry. */
        if (err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH) {
          close(cr->fds[i]);
          cr->fds[i] = -1;
          cr->retry_at_ns = now + RETRY_DELAY_NS;
          continue;
        }
        RR_WARN("connect: %s", strerror(err));
        return RR_ERR_SYSTEM;
      }
      cr->connected[i] = 1;
    }
    connected++;
  }
  if (cr->status == RAIL_PENDING && connected == c->nstreams) cr->status = RAIL_CONNECTED;
  return RR_OK;
}

/* Send a connected rail's hellos; RAIL_READY once all have left. */
static rr_status rail_hello(connect_state *c, connect_rail *cr) {
  int done = 0;
  for (int i = 0; i < c->nstreams; i++) {
    while (cr->hello_sent[i] < sizeof(rr_hello)) {
      ssize_t n = send(cr->fds[i], (char *)&cr->hello[i] + cr->hello_sent[i],
                       sizeof(rr_hello) - cr->hello_sent[i], MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0) {
        RR_WARN("connect: sending hello: %s", strerror(errno));
        return RR_ERR_PEER;
      }
      cr->hello_sent[i] += (uint32_t)n;
    }
    if (cr->hello_sent[i] == sizeof(rr_hello)) done++;
  }
  if (done == c->nstreams) cr->status = RAIL_READY;
  return RR_OK;
}

/* RR_OK when the connection is ready, RR_AGAIN while it is not.
 * First every rail connects or is left out (a backup that is not up within
 * the progress timeout, or a primary that cannot reach the peer while a
 * backup can: the connection must not wait on, or die of, a NIC that is
 * down); then every hello leaves carrying the final set of rails. */
static rr_status connect_advance(connect_state *c) {
  uint64_t now = rr_now_ns();
  uint64_t limit = rr_params_get()->progress_timeout_ms * 1000000ull;
  int pending = 0, have_backup = 0;
  for (int r = 1; r < c->nrails; r++) have_backup |= c->rails[r].status == RAIL_CONNECTED;
  for (int r = 0; r < c->nrails; r++) {
    connect_rail *cr = &c->rails[r];
    if (cr->status != RAIL_PENDING) continue;
    rr_status st = rail_connect(c, cr, r == 0, have_backup, now);
    if (st != RR_OK) return st;
    if (cr->status == RAIL_PENDING && now - c->start_ns > limit && (r > 0 || have_backup))
      rail_give_up(c, cr, "timed out");
    if (cr->status == RAIL_CONNECTED && r > 0) have_backup = 1;
    pending |= cr->status == RAIL_PENDING;
  }
  if (pending) return RR_AGAIN;
  uint32_t mask = 0;
  for (int r = 0; r < c->nrails; r++)
    if (c->rails[r].status != RAIL_FAILED) mask |= 1u << r;
  if (!mask) {
    RR_WARN("connect: no rail reaches the peer");
    return RR_ERR_PEER;
  }
  int ready = 0;
  for (int r = 0; r < c->nrails; r++) {
    connect_rail *cr = &c->rails[r];
    if (cr->status == RAIL_CONNECTED) {
      for (int i = 0; i < c->nstreams; i++) cr->hello[i].rails_mask = mask;
      rr_status st = rail_hello(c, cr);
      if (st != RR_OK) return st;
    }
    ready += cr->status == RAIL_READY;
  }
  return ready == __builtin_popcount(mask) ? RR_OK : RR_AGAIN;
}

static connect_state *connect_state_new(const void *handle, int dev, const rr_peer_addrs *peer) {
  const rr_params *p = rr_params_get();
  connect_state *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->handle = handle;
  c->token = peer->token;
  c->peer = *peer;
  c->nstreams = p->tcp_streams;
  c->start_ns = rr_now_ns();
  plan_rails(c, dev);
  uint64_t conn_id = random_u64();
  for (int r = 0; r < c->nrails; r++)
    for (int i = 0; i < c->nstreams; i++) {
      c->rails[r].fds[i] = -1;
      c->rails[r].hello[i] = (rr_hello){.magic = RR_HELLO_MAGIC, .version = RR_HELLO_VERSION,
                                        .endian = RR_HELLO_ENDIAN, .token = peer->token,
                                        .conn_id = conn_id, .rail = (uint8_t)r,
                                        .stream = (uint8_t)i, .nstreams = (uint8_t)c->nstreams,
                                        .chunk_size = (uint32_t)p->chunk_size};
    }
  return c;
}

static void reconnect_abandon(rr_send_comm *s, int rail) {
  rail_close_fds(&s->conn, &s->conn.rails[s->plan_of[rail]]);
  s->reconnecting[rail] = 0;
}

/* An attempt the engine stopped driving (the old endpoint recovered, or the
 * connection went idle) is stale: its sockets may have connected long ago
 * through a path that has failed since. It is never resumed. */
#define RECONNECT_STALE_NS 50000000ull

/* The engine's reconnect callback (under the engine's lock): reopen one
 * rail's sockets to the same peer address, announcing them with a
 * RECONNECT hello, numbered with the rail's next generation, that the
 * peer's listener routes to the live connection. */
static rr_status send_comm_reconnect(void *arg, int rail, rr_rail_ep **ep) {
  rr_send_comm *s = arg;
  connect_state *c = &s->conn;
  int r = s->plan_of[rail];
  connect_rail *cr = &c->rails[r];
  uint64_t now = rr_now_ns();
  if (s->reconnecting[rail] && now - s->attempt_seen_ns[rail] > RECONNECT_STALE_NS)
    reconnect_abandon(s, rail);
  s->attempt_seen_ns[rail] = now;
  if (!s->reconnecting[rail]) {
    uint32_t gen = ++s->generation[r];
    for (int i = 0; i < c->nstreams; i++) {
      cr->fds[i] = -1;
      cr->connected[i] = 0;
      cr->hello_sent[i] = 0;
      cr->hello[i].flags = RR_HELLO_RECONNECT;
      cr->hello[i].rails_mask = 1u << r;
      cr->hello[i].generation = gen;
    }
    cr->status = RAIL_PENDING;
    cr->retry_at_ns = 0;
    s->attempt_start_ns[rail] = now;
    s->reconnecting[rail] = 1;
    RR_TRACE("send rail %d: reconnect attempt %u", rail, gen);
  }
  rr_status st = RR_OK;
  if (cr->status == RAIL_PENDING) st = rail_connect(c, cr, 0, 1, now);
  if (st == RR_OK && cr->status == RAIL_CONNECTED) st = rail_hello(c, cr);
  if (st == RR_OK && cr->status == RAIL_READY) {
    st = rr_core_ep_create(cr->dev, cr->fds, c->nstreams, NULL, 0, &s->engine, ep);
    s->reconnecting[rail] = 0;
    return st;
  }
  /* A SYN lost to a port that was down is retried by the kernel only after
   * a second: a fresh attempt soon after is faster than waiting for it. */
  uint64_t limit = rr_params_get()->progress_timeout_ms * 1000000ull;
  if (limit > 100000000ull) limit = 100000000ull;
  if (st == RR_OK && cr->status != RAIL_FAILED && now - s->attempt_start_ns[rail] > limit)
    rail_give_up(c, cr, "timed out");
  if (st == RR_OK && cr->status != RAIL_FAILED) return RR_AGAIN;
  reconnect_abandon(s, rail);
  return st == RR_OK ? RR_ERR_RAIL : st;
}

/* Build the send comm from the rails that came up. */
static rr_status make_send_comm(connect_state *c, int dev, rr_profiler_fn profiler,
                                rr_send_comm **out) {
  rr_send_comm *s = calloc(1, sizeof *s);
  if (!s) return RR_ERR_NOMEM;
  s->magic = RR_MAGIC_SEND;
  s->dev = dev;
  rr_engine_config cfg;
  rr_core_engine_config(RR_ENGINE_SEND, c->rails[0].hello[0].chunk_size,
                        (const struct sockaddr *)&c->peer.addrs[0], profiler, &cfg);
  cfg.reconnect = send_comm_reconnect;
  cfg.reconnect_arg = s;
  cfg.reopens = 1;
  rr_status st = rr_engine_init(&s->engine, &cfg);
  if (st != RR_OK) {
    free(s);
    return st;
  }
  const rr_devices *d = rr_core_devices();
  for (int r = 0; r < c->nrails && st == RR_OK; r++) {
    connect_rail *cr = &c->rails[r];
    if (cr->status != RAIL_READY) continue;
    rr_rail_ep *ep = NULL;
    st = rr_core_ep_create(cr->dev, cr->fds, c->nstreams, NULL, 0, &s->engine, &ep);
    char abuf[64];
    rr_sockaddr_str((struct sockaddr *)&c->peer.addrs[cr->peer_addr], abuf, sizeof abuf);
    if (st == RR_OK) {
      const rr_netif *nif = &d->nif[cr->dev];
      s->plan_of[s->engine.nrails] = r;
      s->rails_mask |= 1u << r;
      st = rr_engine_add_rail(&s->engine, ep, nif->speed_mbps > 0 ? nif->speed_mbps : 10000,
                              nif->name, abuf);
      if (st != RR_OK) ep->ops->destroy(ep);
    }
  }
  s->conn = *c;
  s->conn.next = NULL;
  s->conn.handle = NULL;
  if (st != RR_OK) {
    rr_engine_fini(&s->engine);
    free(s);
    return st;
  }
  RR_INFO(RR_SUB_NET, "connected to %s over %d rail(s)", s->engine.cfg.peer, s->engine.nrails);
  rr_monitor_add(&s->engine);
  *out = s;
  return RR_OK;
}

rr_status rr_net_connect(rr_net_ctx *ctx, int dev, const void *handle, rr_send_comm **out) {
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
  connect_state *c = connects;
  while (c && !(c->handle == handle && c->token == peer.token)) c = c->next;
  if (!c) {
    c = connect_state_new(handle, dev, &peer);
    if (!c) {
      pthread_mutex_unlock(&connect_lock);
      return RR_ERR_NOMEM;
    }
    c->next = connects;
    connects = c;
  }
  st = connect_advance(c);
  if (st == RR_AGAIN) {
    uint64_t limit = rr_params_get()->connect_timeout_ms * 1000000ull;
    if (rr_now_ns() - c->start_ns <= limit) {
      pthread_mutex_unlock(&connect_lock);
      return RR_OK; /* NCCL calls again */
    }
    char abuf[64];
    RR_WARN("connect: no connection to %s port %u within %llu ms",
            rr_sockaddr_str((struct sockaddr *)&c->peer.addrs[0], abuf, sizeof abuf),
            ntohs(((struct sockaddr_in *)&c->peer.addrs[0])->sin_port),
            (unsigned long long)rr_params_get()->connect_timeout_ms);
    st = RR_ERR_PEER;
  }
  connect_state_unlink(c);
  pthread_mutex_unlock(&connect_lock);
  if (st == RR_OK) st = make_send_comm(c, dev, ctx ? ctx->profiler : NULL, out);
  connect_state_free(c);
  return st;
}

/* ------------------------------------------------------------------ accept */

static void refuse(pending_sock *ps, const char *why) {
  char abuf[64];
  RR_WARN("refused a connection from %s: %s",
          rr_sockaddr_str((struct sockaddr *)&ps->peer, abuf, sizeof abuf), why);
  close(ps->fd);
  ps->fd = -1;
}

static void group_close(pending_group *g) {
  for (int r = 0; r < RR_MAX_RAILS; r++)
    for (int i = 0; i < RR_TCP_MAX_STREAMS; i++)
      if (g->fds[r][i] >= 0) close(g->fds[r][i]), g->fds[r][i] = -1;
}

static rr_recv_comm *listen_comm_by_id(rr_listen_comm *l, uint64_t conn_id) {
  for (int i = 0; i < l->ncomms; i++)
    if (l->comms[i]->conn_id == conn_id) return l->comms[i];
  return NULL;
}

/* Validate a complete hello and file the socket into its group. */
static void file_socket(rr_listen_comm *l, pending_sock *ps) {
  rr_hello h;
  memcpy(&h, ps->hello, sizeof h);
  if (h.magic != RR_HELLO_MAGIC || h.endian != RR_HELLO_ENDIAN) { refuse(ps, "not a rerail peer"); return; }
  if (h.version != RR_HELLO_VERSION) { refuse(ps, "another rerail protocol version"); return; }
  if (h.token != l->token) { refuse(ps, "wrong token (not the handle of this listener)"); return; }
  if (h.nstreams < 1 || h.nstreams > RR_TCP_MAX_STREAMS || h.stream >= h.nstreams ||
      h.rail >= RR_MAX_RAILS || h.chunk_size < 4096 || h.chunk_size > (64u << 20) ||
      !(h.rails_mask & (1u << h.rail)) || (h.rails_mask >> RR_MAX_RAILS)) {
    refuse(ps, "malformed hello");
    return;
  }
  int recon = h.flags & RR_HELLO_RECONNECT ? h.rail : -1;
  if (recon < 0 && l->nccl_closed) { refuse(ps, "a new connection after NCCL closed this listener"); return; }
  if (recon >= 0) {
    rr_recv_comm *rc = listen_comm_by_id(l, h.conn_id);
    if (!rc) { refuse(ps, "a reconnect for no live connection"); return; }
    if (h.generation <= rc->generation[h.rail]) { refuse(ps, "a reconnect older than the rail's sockets"); return; }
  }
  pending_group *g = NULL;
  for (int i = 0; i < l->ngroups; i++)
    if (l->groups[i].conn_id == h.conn_id && l->groups[i].reconnect_rail == recon) g = &l->groups[i];
  if (g && recon >= 0 && h.generation < g->generation) { refuse(ps, "a reconnect older than one under way"); return; }
  if (g && recon >= 0 && h.generation > g->generation) {
    /* A new attempt to reopen the rail: the sender gave up on the last one. */
    group_close(g);
    *g = l->groups[--l->ngroups];
    g = NULL;
  }
  if (!g) {
    if (l->ngroups == RR_LISTEN_GROUPS) { refuse(ps, "too many connections in progress"); return; }
    g = &l->groups[l->ngroups++];
    memset(g, 0, sizeof *g);
    g->conn_id = h.conn_id;
    g->reconnect_rail = recon;
    g->generation = h.generation;
    g->nstreams = h.nstreams;
    g->chunk_size = h.chunk_size;
    g->since_ns = rr_now_ns();
    for (int r = 0; r < RR_MAX_RAILS; r++)
      for (int i = 0; i < RR_TCP_MAX_STREAMS; i++) g->fds[r][i] = -1;
  }
  if (g->nstreams != h.nstreams || g->chunk_size != h.chunk_size || g->fds[h.rail][h.stream] >= 0 ||
      (g->rails_mask && g->rails_mask != h.rails_mask)) {
    refuse(ps, "hello inconsistent with its connection");
    return;
  }
  g->rails_mask = h.rails_mask;
  g->fds[h.rail][h.stream] = ps->fd;
  ps->fd = -1;
}

static int group_complete(const pending_group *g) {
  if (!g->rails_mask) return 0;
  for (int r = 0; r < RR_MAX_RAILS; r++)
    if (g->rails_mask & (1u << r))
      for (int i = 0; i < g->nstreams; i++)
        if (g->fds[r][i] < 0) return 0;
  return 1;
}

static void drop_stale(rr_listen_comm *l, uint64_t now, uint64_t limit) {
  for (int i = 0; i < l->nsocks;) {
    pending_sock *ps = &l->socks[i];
    if (ps->fd >= 0 && now - ps->since_ns > limit) refuse(ps, "no hello in time");
    if (ps->fd < 0) l->socks[i] = l->socks[--l->nsocks];
    else i++;
  }
  for (int i = 0; i < l->ngroups;) {
    pending_group *g = &l->groups[i];
    if (now - g->since_ns > limit) {
      RR_WARN("accept: dropping a connection whose sockets did not all arrive in time");
      group_close(g);
      l->groups[i] = l->groups[--l->ngroups];
    } else {
      i++;
    }
  }
}

/* Build the receive comm from a complete group (which this consumes). */
static rr_status make_recv_comm(rr_listen_comm *l, pending_group *g, rr_recv_comm **out) {
  rr_recv_comm *rc = calloc(1, sizeof *rc);
  if (!rc) {
    group_close(g);
    return RR_ERR_NOMEM;
  }
  /* The peer as its first rail reaches us. */
  int first = __builtin_ctz(g->rails_mask);
  struct sockaddr_storage peer;
  socklen_t plen = sizeof peer;
  getpeername(g->fds[first][0], (struct sockaddr *)&peer, &plen);
  rr_engine_config cfg;
  rr_core_engine_config(RR_ENGINE_RECV, g->chunk_size, (struct sockaddr *)&peer, l->profiler, &cfg);
  /* The sender reopens failed rails through this listener while it holds it. */
  cfg.reopens = l->ncomms < RR_LISTEN_GROUPS;
  rr_status st = rr_engine_init(&rc->engine, &cfg);
  const rr_devices *d = rr_core_devices();
  for (int r = 0; r < RR_MAX_RAILS && st == RR_OK; r++) {
    if (!(g->rails_mask & (1u << r))) continue;
    /* Which of our NICs this rail arrived on. */
    struct sockaddr_storage local, remote;
    socklen_t len = sizeof local, rlen = sizeof remote;
    getsockname(g->fds[r][0], (struct sockaddr *)&local, &len);
    getpeername(g->fds[r][0], (struct sockaddr *)&remote, &rlen);
    int dev = rr_core_dev_by_addr(&local);
    if (dev < 0) dev = l->dev;
    rr_rail_ep *ep = NULL;
    st = rr_core_ep_create(dev, g->fds[r], g->nstreams, NULL, 0, &rc->engine, &ep);
    if (st == RR_OK) {
      char abuf[64];
      rr_sockaddr_str((struct sockaddr *)&remote, abuf, sizeof abuf);
      st = rr_engine_add_rail(&rc->engine, ep, d->nif[dev].speed_mbps > 0 ? d->nif[dev].speed_mbps : 10000,
                              d->nif[dev].name, abuf);
      if (st != RR_OK) ep->ops->destroy(ep);
    }
  }
  group_close(g); /* sockets of rails the connector left out */
  if (st != RR_OK) {
    if (rc->engine.nrails || st != RR_ERR_SYSTEM) rr_engine_fini(&rc->engine);
    free(rc);
    return st;
  }
  rc->magic = RR_MAGIC_RECV;
  rc->dev = l->dev;
  rc->conn_id = g->conn_id;
  rc->rails_mask = g->rails_mask;
  if (l->ncomms < RR_LISTEN_GROUPS) {
    rc->listen = l;
    l->comms[l->ncomms++] = rc;
    if (l->ncomms == 1) rr_monitor_add_listener(l);
  }
  RR_INFO(RR_SUB_NET, "accepted a connection from %s over %d rail(s)", rc->engine.cfg.peer,
          rc->engine.nrails);
  rr_monitor_add(&rc->engine);
  *out = rc;
  return RR_OK;
}

/* A reconnected rail is complete: give its sockets to the live connection. */
static void route_reconnect(rr_listen_comm *l, pending_group *g) {
  rr_recv_comm *rc = listen_comm_by_id(l, g->conn_id);
  int r = g->reconnect_rail;
  if (!rc || !(rc->rails_mask & (1u << r))) {
    RR_WARN("accept: dropping a reconnect for a rail the connection does not have");
    group_close(g);
    return;
  }
  if (g->generation <= rc->generation[r]) { /* a newer attempt got here first */
    group_close(g);
    return;
  }
  rc->generation[r] = g->generation;
  struct sockaddr_storage local;
  socklen_t len = sizeof local;
  getsockname(g->fds[r][0], (struct sockaddr *)&local, &len);
  int dev = rr_core_dev_by_addr(&local);
  if (dev < 0) dev = l->dev;
  rr_rail_ep *ep = NULL;
  rr_status st = rr_core_ep_create(dev, g->fds[r], g->nstreams, NULL, 0, &rc->engine, &ep);
  group_close(g);
  if (st != RR_OK) return;
  /* The engine's rails are the connection's rails in order. */
  rr_engine_rail_replace(&rc->engine, __builtin_popcount(rc->rails_mask & ((1u << r) - 1)), ep);
}

static void route_reconnects(rr_listen_comm *l) {
  for (int i = 0; i < l->ngroups;) {
    if (l->groups[i].reconnect_rail >= 0 && group_complete(&l->groups[i])) {
      pending_group g = l->groups[i];
      l->groups[i] = l->groups[--l->ngroups];
      route_reconnect(l, &g);
    } else {
      i++;
    }
  }
}

static rr_status accept_locked(rr_listen_comm *l, rr_recv_comm **out) {
  /* Take every new socket the kernel has. */
  while (l->nsocks < RR_LISTEN_PENDING) {
    pending_sock *ps = &l->socks[l->nsocks];
    socklen_t alen = sizeof ps->peer;
    int fd = accept4(l->fd, (struct sockaddr *)&ps->peer, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      RR_WARN("accept: %s", strerror(errno));
      return RR_ERR_SYSTEM;
    }
    rr_sock_tune(fd);
    ps->fd = fd;
    ps->got = 0;
    ps->since_ns = rr_now_ns();
    l->nsocks++;
  }
  /* Read hellos. */
  for (int i = 0; i < l->nsocks; i++) {
    pending_sock *ps = &l->socks[i];
    while (ps->fd >= 0 && ps->got < sizeof(rr_hello)) {
      ssize_t n = recv(ps->fd, ps->hello + ps->got, sizeof(rr_hello) - ps->got, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        refuse(ps, "closed before its hello");
        break;
      }
      ps->got += (uint32_t)n;
    }
    if (ps->fd >= 0 && ps->got == sizeof(rr_hello)) file_socket(l, ps);
  }
  drop_stale(l, rr_now_ns(), rr_params_get()->connect_timeout_ms * 1000000ull);
  route_reconnects(l);
  /* Hand out one complete connection (only NCCL's accept() asks). */
  for (int i = 0; i < l->ngroups && out; i++) {
    if (l->groups[i].reconnect_rail >= 0 || !group_complete(&l->groups[i])) continue;
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
  pthread_mutex_lock(&l->lock);
  rr_status st = accept_locked(l, out);
  pthread_mutex_unlock(&l->lock);
  return st;
}

void rr_listen_service(rr_listen_comm *l) {
  /* The monitor calls this holding its registry lock, and NCCL's accept()
   * takes the registry lock under this one: never wait here. */
  if (pthread_mutex_trylock(&l->lock) != 0) return;
  accept_locked(l, NULL);
  pthread_mutex_unlock(&l->lock);
}
