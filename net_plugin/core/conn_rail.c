/* A connector's rail: its setup sockets (one per stream) opened from the
 * rail's setup address, their handshakes stepped (setup_wire.h: HELLO,
 * CHALLENGE, PROOF, ACCEPT), and closed when the rail gives up or waits for
 * its NIC. What connect() and the reconnects decide with the outcome:
 * conn_connect.c. Callers hold the lock that guards the comm's setup state
 * (connect_lock while connect() builds it, the confirm lock after). */
#include "conn_rail.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_log.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char rr_conn_no_answer[] = "no answer from the peer";

void rr_conn_stream_close(setup_stream *st) {
  if (st->fd >= 0) close(st->fd);
  st->fd = -1;
  st->state = SS_CONNECTING;
  free(st->hs);
  st->hs = NULL;
}

void rr_conn_rail_close(const connect_state *c, connect_rail *cr) {
  for (int i = 0; i < c->nstreams; i++) rr_conn_stream_close(&cr->s[i]);
  rr_setup_ep_abandon(&cr->ep);
}

void rr_conn_rail_give_up(connect_state *c, connect_rail *cr, const char *why) {
  char abuf[64];
  RR_INFO(RR_SUB_NET, "rail %s -> %s not connected: %s", rr_core_devices()->nif[cr->dev].name,
          rr_sockaddr_str((struct sockaddr *)&c->peer.addrs[cr->peer_addr], abuf, sizeof abuf), why);
  rr_conn_rail_close(c, cr);
  cr->status = RAIL_FAILED;
  cr->why = why;
}

/* A rail that belongs to the connection although it could not be reached:
 * its sockets go, its endpoint stays (never connected, it stands for the
 * rail in the engine until the rail is reopened). */
void rr_conn_rail_defer(connect_state *c, connect_rail *cr) {
  char abuf[64];
  RR_INFO(RR_SUB_NET, "rail %s -> %s left down for now, reopened when it works: %s",
          rr_core_devices()->nif[cr->dev].name,
          rr_sockaddr_str((struct sockaddr *)&c->peer.addrs[cr->peer_addr], abuf, sizeof abuf),
          cr->why ? cr->why : "not up in time");
  for (int i = 0; i < c->nstreams; i++) rr_conn_stream_close(&cr->s[i]);
  cr->status = RAIL_LATER;
  rr_counter_inc(RR_CTR_CONNECT_RAILS_DEFERRED);
}

/* Open one stream's socket from the rail's setup address (its device's
 * own, or the out-of-band one) towards its peer entry's. */
static rr_status stream_open(connect_state *c, connect_rail *cr, setup_stream *st) {
  const rr_devices *d = rr_core_devices();
  int own = 0;
  const struct sockaddr_storage *from = rr_core_setup_addr(cr->dev, &own);
  int loop = own ? d->nif[cr->dev].is_loopback : d->oob.is_loopback;
  const struct sockaddr_storage *dst = &c->peer.addrs[cr->peer_addr];
  if (!from) {
    errno = EADDRNOTAVAIL;
    return RR_ERR_SYSTEM;
  }
  int fd = socket(dst->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return RR_ERR_SYSTEM;
  if (rr_sock_tune(fd) != RR_OK) goto fail;
  /* Leave through that interface: bind its address when the families agree. */
  if (from->ss_family == dst->ss_family && !loop) {
    struct sockaddr_storage src = *from;
    socklen_t slen = src.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (src.ss_family == AF_INET) ((struct sockaddr_in *)&src)->sin_port = 0;
    else ((struct sockaddr_in6 *)&src)->sin6_port = 0;
    if (bind(fd, (struct sockaddr *)&src, slen) != 0) goto fail;
  }
  if (connect(fd, (const struct sockaddr *)dst, c->peer.addrlens[cr->peer_addr]) != 0 &&
      errno != EINPROGRESS)
    goto fail;
  free(st->hs);
  st->hs = calloc(1, sizeof *st->hs);
  if (!st->hs) goto fail;
  st->fd = fd;
  st->state = SS_CONNECTING;
  st->opened_ns = rr_now_ns();
  return RR_OK;
fail: {
  int err = errno;
  close(fd);
  errno = err; /* the caller names it */
  return RR_ERR_SYSTEM;
}
}

/* Send what is left of st->out. RR_OK once all of it left. */
static rr_status send_out(setup_stream *st, const char **why) {
  setup_hs *hs = st->hs;
  while (hs->out_sent < hs->out_len) {
    ssize_t n = send(st->fd, hs->out + hs->out_sent, hs->out_len - hs->out_sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return RR_AGAIN;
    if (n < 0) {
      *why = strerror(errno);
      return RR_ERR_PEER;
    }
    hs->out_sent += (uint16_t)n;
  }
  return RR_OK;
}

static void set_out(setup_hs *hs, size_t len) {
  hs->out_len = (uint16_t)len;
  hs->out_sent = 0;
  hs->in_got = 0;
}

/* Advance one setup socket's handshake. RR_OK: progressed (or waiting);
 * RR_ERR_RAIL: the TCP connect failed (err in *why); RR_ERR_PEER: the
 * listener went away; RR_ERR_PROTOCOL: it is not the listener of our handle. */
static rr_status stream_step(connect_state *c, connect_rail *cr, int r, int i, const char **why) {
  setup_stream *st = &cr->s[i];
  setup_hs *hs = st->hs;
  rr_status rs;
  switch (st->state) {
  case SS_CONNECTING: {
    struct pollfd p = {.fd = st->fd, .events = POLLOUT};
    if (poll(&p, 1, 0) <= 0) return RR_OK;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(st->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
      errno = err;
      *why = strerror(err);
      return RR_ERR_RAIL;
    }
    rr_hs_hello h = {.conn_id = c->conn_id, .rail = (uint8_t)r, .stream = (uint8_t)i,
                     .nstreams = (uint8_t)c->nstreams, .chunk_size = c->chunk_size,
                     .flags = cr->generation ? RR_HS_FLAG_RECONNECT : 0, .generation = cr->generation,
                     .dev = c->peer.dev[cr->peer_addr]};
    if (rr_hs_random(h.nonce, sizeof h.nonce) != RR_OK) {
      *why = "no random numbers";
      return RR_ERR_PROTOCOL;
    }
    rr_hs_hello_encode(&h, hs->hello);
    memcpy(hs->out, hs->hello, RR_HS_HELLO_LEN);
    set_out(hs, RR_HS_HELLO_LEN);
    st->state = SS_HELLO;
  } /* fall through */
  case SS_HELLO:
    if ((rs = send_out(st, why)) != RR_OK) return rs == RR_AGAIN ? RR_OK : rs;
    st->state = SS_CHALLENGE;
    /* fall through */
  case SS_CHALLENGE: {
    rr_hs_challenge ch;
    rs = RR_SETUP_RECV_MSG(st->fd, hs->in, hs->in_got, rr_hs_challenge_decode(hs->in, hs->in_got, &ch, &need, why),
                           "the listener closed the socket (it refused us, or was busy)", why);
    if (rs == RR_AGAIN) return RR_OK;
    if (rs != RR_OK) return rs == RR_ERR_PEER ? rs : RR_ERR_PROTOCOL;
    uint8_t mac[RR_HS_MAC_LEN];
    rr_hs_mac_challenge(c->secret, hs->hello, ch.nonce, ch.gen_floor, mac);
    if (!rr_hs_mac_equal(mac, ch.mac)) {
      *why = "the listener did not prove it holds the handle's secret: not the peer the handle names";
      return RR_ERR_PROTOCOL;
    }
    rr_conn_peer_answered(c); /* authenticated: its process is alive */
    /* A reconnect outside the listener's window would be refused: start the
     * next attempt just past the floor the listener (authentically) gave. */
    if (cr->generation && !rr_hs_reconnect_in_window(cr->generation, ch.gen_floor)) {
      cr->resync = 1;
      cr->resync_floor = ch.gen_floor;
      *why = "the reconnect's generation is outside the listener's window: resynchronised";
      return RR_ERR_PEER;
    }
    memcpy(hs->snonce, ch.nonce, RR_HS_NONCE_LEN);
    rr_hs_proof pr = {.blob_len = cr->blob_len};
    memcpy(pr.blob, cr->blob, cr->blob_len);
    rr_hs_mac_blob(RR_HS_PROOF, c->secret, hs->hello, hs->snonce, pr.blob, pr.blob_len, pr.mac);
    set_out(hs, rr_hs_proof_encode(RR_HS_PROOF, &pr, hs->out));
    st->state = SS_PROOF;
  } /* fall through */
  case SS_PROOF:
    if ((rs = send_out(st, why)) != RR_OK) return rs == RR_AGAIN ? RR_OK : rs;
    st->state = SS_ACCEPT;
    /* fall through */
  case SS_ACCEPT: {
    rr_hs_proof acc;
    rs = RR_SETUP_RECV_MSG(st->fd, hs->in, hs->in_got,
                           rr_hs_proof_decode(RR_HS_ACCEPT, hs->in, hs->in_got, &acc, &need, why), "the listener closed the socket (it refused us, or was busy)", why);
    if (rs == RR_AGAIN) return RR_OK;
    if (rs != RR_OK) return rs == RR_ERR_PEER ? rs : RR_ERR_PROTOCOL;
    uint8_t mac[RR_HS_MAC_LEN];
    rr_hs_mac_blob(RR_HS_ACCEPT, c->secret, hs->hello, hs->snonce, acc.blob, acc.blob_len, mac);
    if (!rr_hs_mac_equal(mac, acc.mac)) {
      *why = "the listener's accept does not carry its proof";
      return RR_ERR_PROTOCOL;
    }
    rr_conn_peer_answered(c);
    int first = 1;
    for (int k = 0; k < c->nstreams; k++) first &= k == i || cr->s[k].state != SS_DONE;
    if (first) {
      cr->peer_blob_len = acc.blob_len;
      memcpy(cr->peer_blob, acc.blob, acc.blob_len);
    } else if (acc.blob_len != cr->peer_blob_len || memcmp(acc.blob, cr->peer_blob, acc.blob_len)) {
      *why = "the listener named two endpoints for one rail";
      return RR_ERR_PROTOCOL;
    }
    st->state = SS_DONE;
    free(st->hs);
    st->hs = NULL;
    return RR_OK;
  }
  default:
    return RR_OK;
  }
}

/* Which setup sockets of the pending rails can move: one poll(2) for all
 * of them. connect() is called again and again for every connection under
 * way, and most calls find nothing new: a failing recv(2) per socket and
 * call was most of what a connector spent setting up thousands of
 * connections, and then a poll(2) per rail (bench/RESULTS.md §11, addendum
 * "vsetup": at 2,048 connections with a backup, 638,259 connect() calls,
 * 54 µs each on the emulated lab host). A socket waits to send (connecting,
 * or a message not all sent) or to receive (the listener's next message).
 * only < 0: every pending rail; else that one. Each rail polled here is
 * marked, and its next rr_conn_rail_advance takes the answer instead of
 * asking again. */
static int stream_watched(const setup_stream *st) { return st->fd >= 0 && st->state != SS_DONE; }

static void rails_poll(connect_state *c, int only) {
  struct pollfd p[RR_MAX_RAILS * RR_HS_MAX_STREAMS];
  int n = 0;
  for (int r = 0; r < c->nrails; r++) {
    connect_rail *cr = &c->rails[r];
    if ((only >= 0 && r != only) || cr->status != RAIL_PENDING) continue;
    for (int i = 0; i < c->nstreams; i++) {
      const setup_stream *st = &cr->s[i];
      if (!stream_watched(st)) continue;
      int out = st->state == SS_CONNECTING || st->state == SS_HELLO || st->state == SS_PROOF;
      p[n++] = (struct pollfd){.fd = st->fd, .events = out ? POLLOUT : POLLIN};
    }
  }
  int ready = n ? poll(p, (nfds_t)n, 0) : 0;
  n = 0;
  for (int r = 0; r < c->nrails; r++) {
    connect_rail *cr = &c->rails[r];
    if ((only >= 0 && r != only) || cr->status != RAIL_PENDING) continue;
    cr->polled = 1;
    for (int i = 0; i < c->nstreams; i++) {
      setup_stream *st = &cr->s[i];
      if (stream_watched(st)) st->ready = ready < 0 || p[n++].revents != 0; /* a poll that failed tells nothing: try */
    }
  }
}

void rr_conn_rails_poll(connect_state *c) { rails_poll(c, -1); }

/* How far a setup socket got: its state, then the bytes of its current
 * message sent or received. Progress for the connect deadline
 * (rr_setup_clock) is a socket getting further than it ever did: connected,
 * a message sent, the listener's answer received. Only further than ever:
 * a listener that closes every attempt (busy, or full) would otherwise
 * look like progress on each retry, and keep the connector trying for
 * good; a peer that is merely slow moves on each time. */
static uint32_t stream_reach(const setup_stream *st) {
  uint32_t bytes = st->hs ? (uint32_t)st->hs->out_sent + st->hs->in_got : 0;
  return (uint32_t)st->state << 16 | bytes;
}

/* Advance one rail's attempt: open its sockets (once its retry time has
 * come), run their handshakes. RAIL_READY once every socket is authenticated
 * and the listener's endpoint is known. A socket that fails is closed and
 * the failure returned with *why: RR_ERR_PROTOCOL when the listener is not
 * the peer the handle names (no retry changes that), RR_ERR_RAIL otherwise
 * (this NIC, the path or the listener is not there now). stuck_ns (0: none)
 * bounds a TCP connect that gets no answer. */
rr_status rr_conn_rail_advance(connect_state *c, connect_rail *cr, int r, uint64_t now, uint64_t stuck_ns,
                               const char **why) {
  int done = 0;
  if (!cr->polled) rails_poll(c, r);
  cr->polled = 0;
  for (int i = 0; i < c->nstreams && cr->status == RAIL_PENDING; i++) {
    setup_stream *st = &cr->s[i];
    if (st->fd < 0) {
      if (now < cr->retry_at_ns) continue;
      if (stream_open(c, cr, st) != RR_OK) {
        *why = strerror(errno);
        return RR_ERR_RAIL;
      }
      st->ready = 1; /* on loopback it is connected already */
    }
    rr_status rs = st->ready ? stream_step(c, cr, r, i, why) : RR_OK;
    st->ready = 0;
    if (rs == RR_OK && stream_reach(st) > st->furthest) {
      st->furthest = stream_reach(st);
      c->progress++;
    }
    if (rs == RR_OK && st->state == SS_CONNECTING && stuck_ns && now > st->opened_ns + stuck_ns) {
      rs = RR_ERR_RAIL;
      *why = rr_conn_no_answer;
    }
    if (rs != RR_OK) {
      rr_conn_stream_close(st);
      return rs == RR_ERR_PROTOCOL ? rs : RR_ERR_RAIL;
    }
    done += st->state == SS_DONE;
  }
  if (cr->status == RAIL_PENDING && done == c->nstreams) cr->status = RAIL_READY;
  return RR_OK;
}
