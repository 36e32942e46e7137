/* The listener's admission of sockets that have not proved the handle's
 * secret: new sockets taken from the kernel into pending slots under the
 * per-source and per-listener caps, how long each is held, and refusals,
 * counted by reason and logged at a bounded rate. The handshake itself
 * (HELLO, PROOF, groups, COMMIT) is conn_accept.c's. */
#include "listen_admit.h"

#include "rr_clock.h"
#include "rr_log.h"
#include "rr_params.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define WARN_EVERY_NS (60ull * 1000000000ull)
#define ACCEPTS_PER_CALL 1024 /* new sockets taken per listening socket and call */

/* The address part of a socket address (no port), for per-source counting. */
static void source_key(const struct sockaddr_storage *a, uint8_t out[16]) {
  memset(out, 0, 16);
  if (a->ss_family == AF_INET) memcpy(out, &((const struct sockaddr_in *)a)->sin_addr, 4);
  else if (a->ss_family == AF_INET6) memcpy(out, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
}

/* Log a refusal once a minute per (reason, source). */
static void listen_warn(rr_listen_comm *l, const struct sockaddr_storage *peer, const char *why) {
  uint8_t key[16];
  source_key(peer, key);
  uint64_t now = rr_now_ns();
  listen_warned *w = NULL, *oldest = &l->warned[0];
  for (int i = 0; i < RR_LISTEN_WARN_SLOTS && !w; i++) {
    listen_warned *x = &l->warned[i];
    if (x->why == why && !memcmp(x->addr, key, 16)) w = x;
    else if (x->at_ns < oldest->at_ns) oldest = x;
  }
  if (w && now - w->at_ns < WARN_EVERY_NS) {
    w->suppressed++;
    return;
  }
  uint32_t more = w ? w->suppressed : 0;
  if (!w) w = oldest;
  char abuf[64];
  if (more)
    RR_WARN("refused a connection from %s: %s (and %u more like it in the last minute)",
            rr_sockaddr_str((const struct sockaddr *)peer, abuf, sizeof abuf), why, more);
  else
    RR_WARN("refused a connection from %s: %s",
            rr_sockaddr_str((const struct sockaddr *)peer, abuf, sizeof abuf), why);
  w->why = why;
  memcpy(w->addr, key, 16);
  w->at_ns = now;
  w->suppressed = 0;
}

/* Counted by reason (rr_counters.h: tests and dashboards ask how many and
 * why), logged once a minute per reason and source (listen_warn). */
void rr_listen_refuse(rr_listen_comm *l, pending_sock *ps, rr_counter reason, const char *why) {
  rr_counter_inc(reason);
  listen_warn(l, &ps->peer, why);
  close(ps->fd);
  ps->fd = -1;
}

/* How long a stranger is held: until a newcomer needs its slot, not by a
 * clock. A legitimate connector may be slow between two handshake
 * messages: NCCL's proxy (and the harness) drive every connection under way
 * from one thread, round-robin, so a connector sends its HELLO, then its
 * PROOF, only when its turn comes again, and one turn over 2,048 connections
 * in the Soft-RoCE lab takes minutes (bench/RESULTS.md §11, §20). Any clock
 * a listener keeps for that gap is one sweep too short at some scale (1 s
 * refused 128 connections, the connect timeout refused 2,048). So:
 *  - under its caps a listener holds an unauthenticated socket for as long
 *    as it stays open, between messages and from accept alike;
 *  - a new socket that finds its source at RR_LISTEN_PER_SOURCE takes the
 *    slot of that source's socket idle longest, and one that finds the
 *    table at RR_LISTEN_PENDING takes the slot of the socket idle longest
 *    of all ("idle": since accept, or since its HELLO was answered);
 *    refusing the newcomer instead would let whoever filled the slots keep
 *    every later connection (a failover's reconnect among them) out;
 *  - a message is never left half-sent by a rerail peer (each is one short
 *    write): once its first byte came, the rest must come within
 *    RR_SETUP_AUTH_NS (a truncated hello is dropped in a second).
 * What a hostile peer can do with that: hold up to RR_LISTEN_PER_SOURCE
 * slots (RR_LISTEN_PENDING with several sources), each a descriptor and a
 * fixed ~0.5 KiB, for as long as it likes, and no more: each newcomer it
 * sends evicts its own oldest first, or once the table is full the oldest
 * of anyone's. So it cannot keep an honest connector out, only race it: an
 * honest socket survives as long as the stranger takes to open a table's
 * worth (RR_LISTEN_PENDING) of new ones after it; no clock does better
 * against a stranger who reopens its sockets, who holds as many slots
 * under a 1 s limit as under none. Nothing it sends before PROOF allocates
 * beyond its slot. */
uint64_t rr_connect_timeout_ns(void) { return rr_params_get()->connect_timeout_ms * 1000000ull; }

rr_counter rr_listen_recv_refusal(rr_status st, const char *why) {
  if (st == RR_ERR_UNSUPPORTED) return RR_CTR_REFUSED_SETUP_VERSION;
  if (why == rr_hs_why_not_rerail) return RR_CTR_REFUSED_NOT_RERAIL;
  if (st == RR_ERR_PROTOCOL) return RR_CTR_REFUSED_MALFORMED;
  return RR_CTR_REFUSED_CLOSED; /* the connector closed, or its socket failed */
}

/* Why a pending socket is dropped now, or NULL while it may wait (above). */
static const char *pending_expired(const pending_sock *ps, uint64_t now) {
  if (ps->partial_ns && now - ps->partial_ns > RR_SETUP_AUTH_NS)
    return "no handshake within 1 s (half a message, then silence)";
  return NULL;
}

void rr_listen_note_partial(pending_sock *ps) {
  if (ps->got && !ps->partial_ns) ps->partial_ns = rr_now_ns();
}

/* Room for slot n of an array of pending sockets or groups, grown by
 * doubling up to max: a listener usually holds one connection's few
 * sockets at a time, and allocating room for the most it may hold each time
 * one arrived cost every accept a 55 KB clear (bench/RESULTS.md, "Thousands
 * of connections"). 0 when out of memory. */
int rr_slots_room(void **arr, int *cap, int n, int max, size_t size) {
  if (n < *cap) return 1;
  int c = *cap ? 2 * *cap : 4;
  if (c > max) c = max;
  void *p = realloc(*arr, (size_t)c * size);
  if (!p) return 0;
  *arr = p;
  *cap = c;
  return 1;
}

/* Drop the pending sockets whose time is up (pending_expired), and let go of
 * the slots of those closed. */
void rr_listen_drop_expired(rr_listen_comm *l, uint64_t now) {
  for (int i = 0; i < l->nsocks;) {
    pending_sock *ps = &l->socks[i];
    const char *why = ps->fd >= 0 ? pending_expired(ps, now) : NULL;
    if (why) rr_listen_refuse(l, ps, RR_CTR_REFUSED_NO_HANDSHAKE, why);
    if (ps->fd < 0) l->socks[i] = l->socks[--l->nsocks];
    else i++;
  }
}

/* An error a connection met before we took it (accept(2): Linux hands a
 * pending network error of the new socket to accept, which drops that one
 * socket): a NIC going down under a connection being set up, not a broken
 * listener. The connector tries again. */
static int net_error_pending(int err) {
  return err == ENETDOWN || err == ENETUNREACH || err == EHOSTDOWN || err == EHOSTUNREACH || err == ENONET ||
         err == EPROTO || err == ENOPROTOOPT || err == EOPNOTSUPP;
}

/* The slot a newcomer takes when a cap is reached. The table's (key NULL):
 * one already let go of (a socket refused earlier in this call), else the
 * open socket idle longest. A source's (key: one that holds open slots):
 * its open socket idle longest. */
static pending_sock *idle_longest(rr_listen_comm *l, const uint8_t *key) {
  pending_sock *best = NULL;
  for (int i = 0; i < l->nsocks; i++) {
    pending_sock *ps = &l->socks[i];
    uint8_t other[16];
    source_key(&ps->peer, other);
    if (key && (ps->fd < 0 || memcmp(key, other, 16))) continue;
    if (ps->fd < 0) return ps;
    if (!best || ps->waiting_ns < best->waiting_ns) best = ps;
  }
  return best;
}

/* Take every new socket the kernel has: a pending slot each, taken from the
 * socket idle longest when its source (or everyone) is at its cap. */
rr_status rr_listen_take_new(rr_listen_comm *l, const struct pollfd *pfd) {
  for (int k = 0; k < l->nfds; k++) {
    if (!pfd[k].revents) continue;
    for (int n = 0; n < ACCEPTS_PER_CALL; n++) {
      struct sockaddr_storage peer;
      socklen_t alen = sizeof peer;
      int fd = accept4(l->fds[k], (struct sockaddr *)&peer, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED || net_error_pending(errno)) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          /* Out of descriptors: the newcomers wait in the kernel's queue
           * until sockets close (pending ones prove, fail or close). */
          RR_TRACE("accept: %s", strerror(errno));
          break;
        }
        RR_WARN("accept: %s", strerror(errno));
        return RR_ERR_SYSTEM;
      }
      uint8_t key[16], other[16];
      source_key(&peer, key);
      int same = 0;
      for (int i = 0; i < l->nsocks; i++) {
        source_key(&l->socks[i].peer, other);
        same += l->socks[i].fd >= 0 && !memcmp(key, other, 16);
      }
      uint64_t now = rr_now_ns();
      pending_sock *ps = NULL;
      if (same >= RR_LISTEN_PER_SOURCE) {
        ps = idle_longest(l, key);
        rr_listen_refuse(l, ps, RR_CTR_REFUSED_PER_SOURCE, "no handshake yet, and a newer connection from this "
                         "address needed the slot (too many unauthenticated connections from this address)");
      } else if (l->nsocks == RR_LISTEN_PENDING) {
        ps = idle_longest(l, NULL);
        if (ps->fd >= 0) rr_listen_refuse(l, ps, RR_CTR_REFUSED_CROWDED_OUT, "no handshake yet, and a newer "
                                          "connection needed the slot (too many unauthenticated connections)");
      } else if (!rr_slots_room((void **)&l->socks, &l->socks_cap, l->nsocks, RR_LISTEN_PENDING, sizeof *l->socks)) {
        close(fd);
        break;
      } else {
        ps = &l->socks[l->nsocks++];
      }
      rr_sock_tune(fd);
      memset(ps, 0, sizeof *ps);
      ps->fd = fd;
      ps->peer = peer;
      ps->state = PS_HELLO;
      ps->waiting_ns = now;
      ps->readable = 1; /* its HELLO may be there already */
    }
  }
  return RR_OK;
}
