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
#include "rr_log.h"
#include "rr_params.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
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
  return RR_OK;
}

/* ------------------------------------------------------------------ listen */

rr_status rr_net_listen(rr_net_ctx *ctx, int dev, void *handle, rr_listen_comm **out) {
  (void)ctx;
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

rr_status rr_net_close_listen(rr_listen_comm *l) {
  if (!l) return RR_OK;
  if (l->magic != RR_MAGIC_LISTEN) {
    RR_WARN("closeListen: not a rerail listen comm");
    return RR_ERR_INVALID;
  }
  close(l->fd);
  for (int i = 0; i < l->nsocks; i++) close(l->socks[i].fd);
  for (int g = 0; g < l->ngroups; g++)
    for (int i = 0; i < 8; i++)
      if (l->groups[g].fds[i] >= 0) close(l->groups[g].fds[i]);
  pthread_mutex_destroy(&l->lock);
  l->magic = RR_MAGIC_DEAD;
  free(l);
  return RR_OK;
}

/* ----------------------------------------------------------------- connect */

typedef struct connect_state {
  struct connect_state *next;
  const void *handle;        /* NCCL's handle buffer: our key between calls */
  uint64_t token;
  int dev;
  int nstreams;
  uint64_t conn_id;
  uint64_t start_ns, retry_at_ns;
  rr_peer_addrs peer;
  int fds[RR_TCP_MAX_STREAMS];
  uint8_t connected[RR_TCP_MAX_STREAMS];
  uint32_t hello_sent[RR_TCP_MAX_STREAMS];
  rr_hello hello[RR_TCP_MAX_STREAMS];
} connect_state;

static pthread_mutex_t connect_lock = PTHREAD_MUTEX_INITIALIZER;
static connect_state *connects;

static void connect_state_free(connect_state *c) {
  for (int i = 0; i < c->nstreams; i++)
    if (c->fds[i] >= 0) close(c->fds[i]);
  free(c);
}

static void connect_state_unlink(connect_state *c) {
  for (connect_state **p = &connects; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      return;
    }
}

/* Open one stream's socket from the local device towards the peer. */
static rr_status stream_open(connect_state *c, int i) {
  const rr_netif *nif = &rr_core_devices()->nif[c->dev];
  const struct sockaddr_storage *dst = &c->peer.addrs[0];
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
  if (connect(fd, (const struct sockaddr *)dst, c->peer.addrlens[0]) != 0 && errno != EINPROGRESS)
    goto fail;
  c->fds[i] = fd;
  c->connected[i] = 0;
  c->hello_sent[i] = 0;
  return RR_OK;
fail:
  close(fd);
  return RR_ERR_SYSTEM;
}

/* Advance every stream; RR_OK when all are connected and said hello. */
static rr_status connect_advance(connect_state *c) {
  int done = 0;
  uint64_t now = rr_now_ns();
  for (int i = 0; i < c->nstreams; i++) {
    if (c->fds[i] < 0) {
      if (now < c->retry_at_ns) continue;
      if (stream_open(c, i) != RR_OK) {
        RR_WARN("connect: cannot open a socket to the peer: %s", strerror(errno));
        return RR_ERR_SYSTEM;
      }
    }
    if (!c->connected[i]) {
      struct pollfd p = {.fd = c->fds[i], .events = POLLOUT};
      if (poll(&p, 1, 0) <= 0) continue;
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(c->fds[i], SOL_SOCKET, SO_ERROR, &err, &len);
      if (err) {
        /* The listener may not be up yet or its backlog is full: retry. */
        if (err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH) {
          close(c->fds[i]);
          c->fds[i] = -1;
          c->retry_at_ns = now + RETRY_DELAY_NS;
          continue;
        }
        RR_WARN("connect: %s", strerror(err));
        return RR_ERR_SYSTEM;
      }
      c->connected[i] = 1;
    }
    while (c->hello_sent[i] < sizeof(rr_hello)) {
      ssize_t n = send(c->fds[i], (char *)&c->hello[i] + c->hello_sent[i],
                       sizeof(rr_hello) - c->hello_sent[i], MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0) {
        RR_WARN("connect: sending hello: %s", strerror(errno));
        return RR_ERR_PEER;
      }
      c->hello_sent[i] += (uint32_t)n;
    }
    if (c->hello_sent[i] == sizeof(rr_hello)) done++;
  }
  return done == c->nstreams ? RR_OK : RR_AGAIN;
}

rr_status rr_net_connect(rr_net_ctx *ctx, int dev, const void *handle, rr_send_comm **out) {
  (void)ctx;
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
    const rr_params *p = rr_params_get();
    c = calloc(1, sizeof *c);
    if (!c) {
      pthread_mutex_unlock(&connect_lock);
      return RR_ERR_NOMEM;
    }
    c->handle = handle;
    c->token = peer.token;
    c->dev = dev;
    c->peer = peer;
    c->nstreams = p->tcp_streams;
    c->conn_id = random_u64();
    c->start_ns = rr_now_ns();
    for (int i = 0; i < c->nstreams; i++) {
      c->fds[i] = -1;
      c->hello[i] = (rr_hello){.magic = RR_HELLO_MAGIC, .version = RR_HELLO_VERSION,
                               .endian = RR_HELLO_ENDIAN, .token = peer.token,
                               .conn_id = c->conn_id, .stream = (uint16_t)i,
                               .nstreams = (uint16_t)c->nstreams,
                               .chunk_size = (uint32_t)p->chunk_size};
    }
    c->next = connects;
    connects = c;
  }
  st = connect_advance(c);
  if (st == RR_AGAIN) {
    uint64_t limit = rr_params_get()->connect_timeout_ms * 1000000ull;
    if (rr_now_ns() - c->start_ns > limit) {
      char abuf[64];
      RR_WARN("connect: no connection to %s port %u within %llu ms",
              rr_sockaddr_str((struct sockaddr *)&c->peer.addrs[0], abuf, sizeof abuf),
              ntohs(((struct sockaddr_in *)&c->peer.addrs[0])->sin_port),
              (unsigned long long)rr_params_get()->connect_timeout_ms);
      st = RR_ERR_PEER;
    } else {
      pthread_mutex_unlock(&connect_lock);
      return RR_OK; /* NCCL calls again */
    }
  }
  connect_state_unlink(c);
  pthread_mutex_unlock(&connect_lock);
  if (st != RR_OK) {
    connect_state_free(c);
    return st;
  }
  rr_send_comm *s = calloc(1, sizeof *s);
  if (!s) {
    connect_state_free(c);
    return RR_ERR_NOMEM;
  }
  s->magic = RR_MAGIC_SEND;
  s->dev = dev;
  st = rr_engine_init(&s->engine, RR_ENGINE_SEND, c->hello[0].chunk_size);
  rr_rail_ep *ep = NULL;
  if (st == RR_OK) {
    st = rr_tcp_ep_create(dev, c->fds, c->nstreams, &rr_engine_rail_events, &s->engine, &ep);
    for (int i = 0; i < c->nstreams; i++) c->fds[i] = -1; /* owned by the endpoint now */
  }
  connect_state_free(c);
  if (st != RR_OK) {
    free(s);
    return st;
  }
  rr_engine_attach_rail(&s->engine, ep);
  *out = s;
  return RR_OK;
}

/* ------------------------------------------------------------------ accept */

static void refuse(pending_sock *ps, const char *why) {
  char abuf[64];
  RR_WARN("refused a connection from %s: %s",
          rr_sockaddr_str((struct sockaddr *)&ps->peer, abuf, sizeof abuf), why);
  close(ps->fd);
  ps->fd = -1;
}

/* Validate a complete hello and file the socket into its group. */
static void file_socket(rr_listen_comm *l, pending_sock *ps) {
  rr_hello h;
  memcpy(&h, ps->hello, sizeof h);
  if (h.magic != RR_HELLO_MAGIC || h.endian != RR_HELLO_ENDIAN) { refuse(ps, "not a rerail peer"); return; }
  if (h.version != RR_HELLO_VERSION) { refuse(ps, "another rerail protocol version"); return; }
  if (h.token != l->token) { refuse(ps, "wrong token (not the handle of this listener)"); return; }
  if (h.nstreams < 1 || h.nstreams > RR_TCP_MAX_STREAMS || h.stream >= h.nstreams ||
      h.chunk_size < 4096 || h.chunk_size > (64u << 20))
    { refuse(ps, "malformed hello"); return; }
  pending_group *g = NULL;
  for (int i = 0; i < l->ngroups; i++)
    if (l->groups[i].conn_id == h.conn_id) g = &l->groups[i];
  if (!g) {
    if (l->ngroups == RR_LISTEN_PENDING) { refuse(ps, "too many connections in progress"); return; }
    g = &l->groups[l->ngroups++];
    memset(g, 0, sizeof *g);
    g->conn_id = h.conn_id;
    g->nstreams = h.nstreams;
    g->chunk_size = h.chunk_size;
    g->since_ns = rr_now_ns();
    for (int i = 0; i < 8; i++) g->fds[i] = -1;
  }
  if (g->nstreams != h.nstreams || g->chunk_size != h.chunk_size || g->fds[h.stream] >= 0)
    { refuse(ps, "hello inconsistent with its connection"); return; }
  g->fds[h.stream] = ps->fd;
  g->have++;
  ps->fd = -1;
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
      RR_WARN("accept: dropping a connection that opened %d of %d streams", g->have, g->nstreams);
      for (int k = 0; k < 8; k++)
        if (g->fds[k] >= 0) close(g->fds[k]);
      l->groups[i] = l->groups[--l->ngroups];
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
  /* Hand out one complete connection. */
  for (int i = 0; i < l->ngroups; i++) {
    pending_group *g = &l->groups[i];
    if (g->have != g->nstreams) continue;
    pending_group done = *g;
    l->groups[i] = l->groups[--l->ngroups];
    rr_recv_comm *r = calloc(1, sizeof *r);
    rr_status st = r ? rr_engine_init(&r->engine, RR_ENGINE_RECV, done.chunk_size) : RR_ERR_NOMEM;
    rr_rail_ep *ep = NULL;
    if (st == RR_OK)
      st = rr_tcp_ep_create(l->dev, done.fds, done.nstreams, &rr_engine_rail_events, &r->engine, &ep);
    else
      for (int k = 0; k < done.nstreams; k++) close(done.fds[k]);
    if (st != RR_OK) {
      free(r);
      return st;
    }
    r->magic = RR_MAGIC_RECV;
    r->dev = l->dev;
    rr_engine_attach_rail(&r->engine, ep);
    *out = r;
    return RR_OK;
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
