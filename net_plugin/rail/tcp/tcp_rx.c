/* TCP rail, receive side: frames parsed out of a stream's staging buffer,
 * bulk payloads read straight into the buffer the engine names, discarded
 * payloads read into a sink, and a closing peer's last bytes delivered
 * before the endpoint is reported closed. The transmit side and the rail's
 * ops are in rail_tcp.c; the endpoint's state is in tcp_ep.h. Whatever
 * arrives is checked here before it touches memory (rail_tcp.c, top). */
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_telemetry.h"
#include "tcp_ep.h"
#include "tcp_frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SINK_SIZE 65536       /* discarded payloads are read this much at a time */
/* Discarded payloads (an invalidated epoch's, and what a closing socket still
 * holds) are read into this and never looked at. One per thread rather than
 * per endpoint: 64 KiB each was a fifth of a connection's memory, and a
 * thread reads one socket at a time. */
static _Thread_local char discard_sink[SINK_SIZE];

/* A frame from the peer that breaks the framing: counted by kind (tests
 * and dashboards ask what a hostile or broken peer sent), then the rail fails. */
static rr_status refuse_frame(tcp_ep *ep, rr_counter kind, const char *what) {
  rr_counter_inc(kind);
  return tcp_ep_fail(ep, RR_ERR_PROTOCOL, what, 0);
}

/* Telemetry's receive times are those of the recv() calls (ep->last_rx_ns,
 * read anyway for liveness): the write began with the call that brought its
 * header and completed with the one that brought its last byte. */
static rr_status deliver_write(tcp_ep *ep, const rr_write_hdr *h, uint64_t start_ns) {
  if (ep->base.tel_rx) rr_tel_record(ep->base.tel_rx, start_ns, ep->last_rx_ns, h->len);
  rr_status st = ep->base.events->on_write_recv(&ep->base, h);
  return st == RR_OK ? RR_OK : tcp_ep_fail(ep, st, "write rejected by the engine", 0);
}

/* A drain marker on stream s: delivered once every stream carried it. */
static rr_status stream_drain(tcp_ep *ep, tcp_stream *s, uint32_t epoch) {
  s->drain_seen = 1;
  s->drain_epoch = epoch;
  for (int i = 0; i < ep->nstreams; i++)
    if (!ep->streams[i]->drain_seen || ep->streams[i]->drain_epoch != epoch) return RR_OK;
  rr_status st = ep->base.events->on_drain(&ep->base, epoch);
  return st == RR_OK ? RR_OK : tcp_ep_fail(ep, st, "drain rejected by the engine", 0);
}

/* Parse complete frames out of the staging buffer. Returns RR_AGAIN when
 * more bytes are needed, RR_OK when a payload is now being read directly. */
static rr_status parse_staging(tcp_ep *ep, tcp_stream *s) {
  for (;;) {
    uint32_t avail = s->stage_len - s->stage_off;
    if (avail < TCP_FRAME_BYTES) return RR_AGAIN;
    tcp_frame_hdr h;
    tcp_frame_decode((const uint8_t *)s->staging + s->stage_off, &h);
    const char *body = s->staging + s->stage_off + TCP_FRAME_BYTES;
    uint32_t body_avail = avail - TCP_FRAME_BYTES;
    if (h.flags & ~(h.type == TCP_FRAME_WRITE ? TCP_FRAME_F_EAGER | TCP_FRAME_F_PROBE : 0u))
      return refuse_frame(ep, RR_CTR_TCP_BAD_FLAGS, "a frame with unknown flags");
    if (h.type == TCP_FRAME_CTRL) {
      if (h.len > RR_RAIL_CTRL_MAX)
        return refuse_frame(ep, RR_CTR_TCP_BAD_CONTROL_SIZE, "an oversized control frame");
      if (body_avail < h.len) return RR_AGAIN;
      s->stage_off += TCP_FRAME_BYTES + h.len;
      rr_status st = ep->base.events->on_ctrl(&ep->base, body, h.len);
      if (st != RR_OK) return tcp_ep_fail(ep, st, "control message rejected by the engine", 0);
      continue;
    }
    if (h.type == TCP_FRAME_DRAIN) {
      if (h.len) return refuse_frame(ep, RR_CTR_TCP_BAD_DRAIN, "a drain marker with a payload");
      s->stage_off += TCP_FRAME_BYTES;
      rr_status st = stream_drain(ep, s, h.imm);
      if (st != RR_OK) return st;
      continue;
    }
    if (h.type != TCP_FRAME_WRITE)
      return refuse_frame(ep, RR_CTR_TCP_BAD_TYPE, "an unknown frame type");
    /* The engine says where the payload goes: nowhere (an invalidated epoch: read
     * and forget it), or exactly one place inside the posted receive (or its
     * early buffer, for an eager write ahead of its receive). A write it
     * refuses fails the rail before a byte is written. It may rewrite wh (an
     * eager write resolved): what it hands back is what is delivered. */
    rr_write_hdr wh = {.imm = h.imm, .len = h.len, .rkey = h.rkey, .raddr = h.raddr, .epoch_tag = h.epoch_tag,
                       .flags = (uint8_t)((h.flags & TCP_FRAME_F_PROBE) ? RR_WRITE_PROBE : 0)};
    if (h.flags & TCP_FRAME_F_EAGER)
      wh = (rr_write_hdr){.imm = h.imm, .len = h.len, .epoch_tag = h.epoch_tag, .flags = RR_WRITE_EAGER,
                          .eager = {.seq = (uint32_t)h.raddr, .known = (uint32_t)(h.raddr >> 32), .tag = (int32_t)h.rkey}};
    void *dstp = NULL;
    rr_status st = ep->base.events->on_write_begin(&ep->base, &wh, &dstp);
    if (st != RR_OK) return tcp_ep_fail(ep, st, "write refused by the engine", 0);
    uint32_t now = body_avail < h.len ? body_avail : h.len;
    if (!dstp) {
      s->stage_off += TCP_FRAME_BYTES + now;
      if (now == h.len) continue;
      s->rx = RX_SINK;
      s->direct_left = h.len - now;
      return RR_OK;
    }
    char *dst = dstp;
    if (now) memcpy(dst, body, now);
    s->stage_off += TCP_FRAME_BYTES + now;
    uint64_t start = ep->last_rx_ns;
    if (now == h.len) {
      st = deliver_write(ep, &wh, start);
      if (st != RR_OK) return st;
      continue;
    }
    s->rx = RX_DIRECT;
    s->direct_dst = dst + now;
    s->direct_left = h.len - now;
    s->direct_hdr = wh;
    s->direct_start_ns = start;
    return RR_OK;
  }
}

/* One non-blocking read (into staging, NCCL's buffer or the sink).
 * RR_OK with *n > 0: bytes arrived; RR_AGAIN: nothing now; else the failure.
 * The peer closing the stream (end of file, or a reset once its bytes were
 * read) marks it eof and returns RR_ERR_PEER without failing the endpoint:
 * tcp_progress first reads what the other streams still hold. */
static rr_status stream_recv(tcp_ep *ep, tcp_stream *s, void *dst, size_t len, ssize_t *n, int flags) {
  for (;;) {
    *n = recv(s->fd, dst, len, MSG_DONTWAIT | flags);
    if (*n > 0) {
      ep->last_rx_ns = rr_now_ns();
      s->idle_polls = 0;
      return RR_OK;
    }
    if (*n == 0 || (errno == ECONNRESET && s->rx == RX_HEADER)) {
      s->eof = 1;
      return RR_ERR_PEER;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      s->idle_polls++;
      return RR_AGAIN;
    }
    if (errno != EINTR) return tcp_ep_fail(ep, tcp_classify_errno(errno), "receive failed", errno);
  }
}

/* A stream without staging yet: RR_OK once bytes wait and staging is
 * there, RR_AGAIN while nothing arrived (a one-byte peek costs what the
 * read it stands in for would), else the stream's failure or close. */
static rr_status staging_alloc(tcp_ep *ep, tcp_stream *s) {
  char byte;
  ssize_t n;
  rr_status st = stream_recv(ep, s, &byte, 1, &n, MSG_PEEK);
  if (st != RR_OK) return st;
  s->staging = malloc(STAGING_MIN);
  s->stage_cap = STAGING_MIN;
  return s->staging ? RR_OK : tcp_ep_fail(ep, RR_ERR_NOMEM, "no memory for a receive buffer", 0);
}

rr_status tcp_stream_receive(tcp_ep *ep, tcp_stream *s) {
  size_t moved = 0;
  for (int rounds = 0; rounds < 64 && moved < PROGRESS_BUDGET; rounds++) {
    ssize_t n;
    if (s->rx == RX_SINK) {
      size_t want = s->direct_left < SINK_SIZE ? s->direct_left : SINK_SIZE;
      rr_status st = stream_recv(ep, s, discard_sink, want, &n, 0);
      if (st != RR_OK) return st == RR_AGAIN ? RR_OK : st;
      s->direct_left -= (uint32_t)n;
      if (s->direct_left == 0) s->rx = RX_HEADER;
      continue;
    }
    if (s->rx == RX_DIRECT) {
      rr_status st = stream_recv(ep, s, s->direct_dst, s->direct_left, &n, 0);
      if (st != RR_OK) return st == RR_AGAIN ? RR_OK : st;
      moved += (size_t)n;
      s->direct_dst += n;
      s->direct_left -= (uint32_t)n;
      if (s->direct_left) return RR_OK; /* the socket is drained for now */
      s->rx = RX_HEADER;
      st = deliver_write(ep, &s->direct_hdr, s->direct_start_ns);
      if (st != RR_OK) return st;
      continue;
    }
    /* RX_HEADER: frames may already wait in staging. */
    if (!s->staging) {
      rr_status st = staging_alloc(ep, s);
      if (st != RR_OK) return st == RR_AGAIN ? RR_OK : st;
    }
    rr_status st = parse_staging(ep, s);
    if (st == RR_OK) continue;            /* switched to direct payload */
    if (st != RR_AGAIN) return st;
    /* Keep the partial frame at the front and read more behind it. */
    if (s->stage_off) {
      memmove(s->staging, s->staging + s->stage_off, s->stage_len - s->stage_off);
      s->stage_len -= s->stage_off;
      s->stage_off = 0;
    }
    size_t room = s->stage_cap - s->stage_len;
    st = stream_recv(ep, s, s->staging + s->stage_len, room, &n, 0);
    if (st != RR_OK) return st == RR_AGAIN ? RR_OK : st;
    s->stage_len += (uint32_t)n;
    if ((size_t)n == room && s->stage_cap < STAGING_MAX) {
      /* More may wait: read more at a time from now on. (No memory: the
       * staging as it is still works.) */
      char *bigger = realloc(s->staging, 2 * s->stage_cap);
      if (bigger) s->staging = bigger, s->stage_cap *= 2;
    }
    /* A short read emptied the socket: parse what came and stop, rather
     * than ask again and find nothing (a system call on the path of every
     * small message). */
    if ((size_t)n < room) {
      st = parse_staging(ep, s);
      return st == RR_AGAIN ? RR_OK : st;
    }
  }
  return RR_OK;
}

/* The peer closed stream `closed`. A peer closing in order flushed every
 * stream into our kernel before it closed any (rr_rail_ops.flushed), so
 * what the other streams still hold is all there: it is delivered before
 * the endpoint is reported closed, since the peer's last acknowledgements
 * or messages may be among it. Bounded: a stream is read until it is empty
 * or closed, and a peer still sending is cut off after a few rounds. */
rr_status tcp_drain_after_eof(tcp_ep *ep, const tcp_stream *closed) {
  int midway = closed->rx != RX_HEADER;
  for (int i = 0; i < ep->nstreams && !ep->failed; i++) {
    tcp_stream *s = ep->streams[i];
    for (int round = 0; round < 16 && !s->eof && !ep->failed; round++) {
      uint32_t idle = s->idle_polls;
      rr_status st = tcp_stream_receive(ep, s);
      if (st != RR_OK && st != RR_ERR_PEER) return st;
      if (s->idle_polls != idle) break; /* read it empty */
    }
    midway |= s->eof && s->rx != RX_HEADER;
  }
  return tcp_ep_fail(ep, RR_ERR_PEER, midway ? "peer closed the connection mid-message" : "peer closed the connection", 0);
}

/* Close a stream's socket without a reset: close() on a socket with unread
 * bytes resets the connection, and a reset throws away what the kernel has
 * not yet delivered to the peer (an orderly close's last acknowledgements
 * and its BYE). What the peer sent and we never read is of no use now. */
void tcp_close_quietly(int fd) {
  for (int i = 0; i < 64; i++) {
    ssize_t n = recv(fd, discard_sink, sizeof discard_sink, MSG_DONTWAIT);
    if (n > 0 || (n < 0 && errno == EINTR)) continue;
    break;
  }
  close(fd);
}
