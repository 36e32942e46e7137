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

/* How long a stranger is held. A legitimate connector may be slow between
 * two handshake messages: NCCL's proxy (and the harness) drive every
 * connection under way from one thread, round-robin, so a connector sends
 * its HELLO, then its PROOF, only when its turn comes again; with hundreds
 * of connections being set up, or a slow host, a turn takes seconds
 * (bench/RESULTS.md, "Verbs connections per process": 128 connections in the
 * lab). A flat 1 s limit refused those connectors. What defends the listener
 * is the caps, not the clock: a stranger who reopens its sockets every
 * second holds as many slots under a 1 s limit as under any other. So:
 *  - a listener nobody crowds gives a socket the connect timeout
 *    (RERAIL_CONNECT_TIMEOUT, the connector's own bound) between messages;
 *  - a message is never left half-sent by a rerail peer (each is one short
 *    write): once its first byte came, the rest must come within
 *    RR_SETUP_AUTH_NS (a truncated hello is dropped in a second);
 *  - a listener whose caps refused or evicted a socket within the connect
 *    timeout is crowded: every unauthenticated socket gets RR_SETUP_AUTH_NS
 *    from accept, as before, and a new socket that finds the table full
 *    takes the slot of the oldest (refusing the newcomer instead would let
 *    a flood that filled the table keep every reconnect out).
 * The per-source cap holds a lone stranger to RR_LISTEN_PER_SOURCE slots;
 * crowding the table needs several sources. */
uint64_t rr_connect_timeout_ns(void) { return rr_params_get()->connect_timeout_ms * 1000000ull; }

static int listen_crowded(const rr_listen_comm *l, uint64_t now) {
  return l->crowded_ns && now - l->crowded_ns < rr_connect_timeout_ns();
}

rr_counter rr_listen_recv_refusal(rr_status st, const char *why) {
  if (st == RR_ERR_UNSUPPORTED) return RR_CTR_REFUSED_SETUP_VERSION;
  if (why == rr_hs_why_not_rerail) return RR_CTR_REFUSED_NOT_RERAIL;
  if (st == RR_ERR_PROTOCOL) return RR_CTR_REFUSED_MALFORMED;
  return RR_CTR_REFUSED_CLOSED; /* the connector closed, or its socket failed */
}

/* Why a pending socket is dropped now, or NULL while it may wait. */
static const char *pending_expired(const rr_listen_comm *l, const pending_sock *ps, uint64_t now) {
  if (ps->partial_ns && now - ps->partial_ns > RR_SETUP_AUTH_NS)
    return "no handshake within 1 s (half a message, then silence)";
  if (listen_crowded(l, now) && now - ps->since_ns > RR_SETUP_AUTH_NS)
    return "no handshake within 1 s (while the listener is crowded)";
  /* Between messages, not from accept: the PROOF comes a whole sweep of
   * the connector after our CHALLENGE, and that alone may take most of the
   * timeout (connect_plan.h, rr_setup_clock). A stranger gains a timeout
   * at most (its PROOF is checked when it comes); the caps bound it. */
  if (now - ps->waiting_ns > rr_connect_timeout_ns()) return "no handshake within the connect timeout";
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
    const char *why = ps->fd >= 0 ? pending_expired(l, ps, now) : NULL;
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

/* Take every new socket the kernel has: a pending slot each, or closed at
 * once when its source (or everyone) has too many unauthenticated ones. */
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
          /* Out of descriptors: what is pending times out and frees them. */
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
      pending_sock tmp = {.fd = fd, .peer = peer};
      uint64_t now = rr_now_ns();
      if (same >= RR_LISTEN_PER_SOURCE) {
        l->crowded_ns = now;
        rr_listen_refuse(l, &tmp, RR_CTR_REFUSED_PER_SOURCE, "too many unauthenticated connections from this address");
        continue;
      }
      pending_sock *ps = NULL;
      if (l->nsocks == RR_LISTEN_PENDING) {
        /* Full: the oldest stranger makes room (a slot already let go of
         * first; none is, between two calls). */
        l->crowded_ns = now;
        ps = &l->socks[0];
        for (int i = 1; i < l->nsocks && ps->fd >= 0; i++)
          if (l->socks[i].fd < 0 || l->socks[i].since_ns < ps->since_ns) ps = &l->socks[i];
        if (ps->fd >= 0) rr_listen_refuse(l, ps, RR_CTR_REFUSED_CROWDED_OUT, "no handshake yet, and a newer connection needed the slot "
                                       "(too many unauthenticated connections)");
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
      ps->since_ns = ps->waiting_ns = now;
      ps->readable = 1; /* its HELLO may be there already */
    }
  }
  return RR_OK;
}
