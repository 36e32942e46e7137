/* TCP rail: framed one-sided writes over a set of non-blocking sockets.
 *
 * Transmit: each stream has a FIFO of frames (header + payload pointer);
 * progress() gathers as many queued frames as fit into one sendmsg(), so a
 * clear-to-send, an acknowledgement and small data leave in one system call.
 * Receive (tcp_rx.c): headers (and small payloads behind them) are read
 * into a small staging buffer; a bulk payload is read straight into the
 * registered buffer the frame names, so bulk data is copied once per side,
 * by the kernel.
 *
 * Control messages use stream 0. Frames of one stream arrive in order; the
 * engine relies on no order across streams. A drain barrier is a marker
 * frame on every stream; it is delivered once every stream has carried it.
 *
 * Whatever arrives is untrusted: a frame the rail cannot parse, or a write
 * the engine refuses, fails this endpoint with RR_ERR_PROTOCOL and writes
 * nothing; the engine fails the rail over, never the job. */
#include "rail_tcp.h"
#include "rr_clock.h"
#include "rr_log.h"
#include "rr_telemetry.h"
#include "tcp_ep.h"
#include "tcp_frame.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <linux/sockios.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* Frames queued per stream, at most. A stream's queue starts at TX_INITIAL
 * entries and doubles when full: most connections never queue more than a
 * few frames, and a job may hold thousands of them (bench/RESULTS.md,
 * "Thousands of connections"). Both powers of two, so the free-running
 * indices stay valid across the growth. */
#define TX_DEPTH 256
#define TX_INITIAL 8
#define CTRL_SLOTS 96         /* control messages queued per stream (engine needs <= 2*32) */
#define WRITE_DEPTH (TX_DEPTH - CTRL_SLOTS)
#define IOV_BATCH 32          /* iovecs per sendmsg */
/* Writes this small go on stream 0, behind the control messages: a small
 * message gains nothing from another stream, and keeping the others idle
 * lets progress() skip them. */
#define SMALL_WRITE 65536
/* Larger writes also go on stream 0 while it has less than this waiting
 * for the kernel: the other streams take chunks only when stream 0 backs up
 * (its socket buffer is full, as with messages of a few MiB). Spreading
 * every message over the streams cost 30-40 % at 256 KiB on loopback
 * (bench/RESULTS.md 8.3; likely because each message's second chunk went
 * to a stream the receiver polls only every 8th call once it is quiet). */
#define SPILL_BYTES (512u << 10)
#define QUIET_POLLS 16

/* Control messages wait here (stream 0 alone carries them). Slots 0..fresh-1
 * have been used and have their buffer; those free again are on a stack, so
 * only as many buffers exist as were ever queued at once (a handful), and
 * only as much of this as was used is ever written. */
typedef struct tcp_ctrl {
  int16_t fresh;
  int16_t nfree;
  int16_t free_slot[CTRL_SLOTS];
  char *buf[CTRL_SLOTS];
} tcp_ctrl;

static tcp_ep *to_tcp(rr_rail_ep *ep) { return rr_container_of(ep, tcp_ep, base); }

/* Classify a socket error: a reset or a closed pipe means the peer process
 * (or its socket) is gone; anything else is taken as the path failing. */
rr_status tcp_classify_errno(int err) {
  switch (err) {
  case ECONNRESET:
  case EPIPE:
    return RR_ERR_PEER;
  default:
    return RR_ERR_RAIL;
  }
}

/* The engine decides whether a broken endpoint is an error worth a warning
 * (the peer closing an idle connection is how connections end): here it is
 * only information. */
rr_status tcp_ep_fail(tcp_ep *ep, rr_status st, const char *what, int err) {
  if (ep->failed == RR_OK) {
    ep->failed = st;
    /* A broken endpoint is never used again: its sockets go now, so a peer
     * that broke the protocol holds nothing of ours until the rail is
     * replaced. */
    for (int i = 0; i < ep->nstreams; i++)
      if (ep->streams[i]->fd >= 0) close(ep->streams[i]->fd), ep->streams[i]->fd = -1;
    if (err)
      RR_INFO(RR_SUB_NET, "TCP rail dev %d: %s: %s (%s)", ep->base.dev->index, what, strerror(err),
              rr_status_str(st));
    else
      RR_INFO(RR_SUB_NET, "TCP rail dev %d: %s (%s)", ep->base.dev->index, what, rr_status_str(st));
  }
  return ep->failed;
}

/* Double a full queue (up to TX_DEPTH): RR_OK when there is room now. The
 * queued entries keep their free-running indices (entry j lives at
 * j % tx_cap, before and after). */
static rr_status tx_room(tcp_stream *s) {
  if (s->tx_tail - s->tx_head < s->tx_cap) return RR_OK;
  if (s->tx_cap >= TX_DEPTH) return RR_AGAIN;
  uint32_t cap = s->tx_cap ? 2 * s->tx_cap : TX_INITIAL;
  tcp_tx *tx = malloc((size_t)cap * sizeof *tx);
  if (!tx) return RR_AGAIN; /* the queue as it is still works: posting waits */
  for (uint32_t j = s->tx_head; j != s->tx_tail; j++) tx[j % cap] = s->tx[j % s->tx_cap];
  free(s->tx);
  s->tx = tx;
  s->tx_cap = cap;
  return RR_OK;
}

static tcp_tx *tx_push(tcp_stream *s) {
  if (tx_room(s) != RR_OK) return NULL;
  return &s->tx[s->tx_tail++ % s->tx_cap];
}

/* Queue a write frame (header h, h->len payload bytes from payload). */
static rr_status queue_write_frame(tcp_ep *ep, const tcp_frame_hdr *h, const void *payload, uint64_t wr_id,
                                   uint64_t post_ns) {
  if (ep->failed) return ep->failed;
  if (!ep->connected) return RR_ERR_INVALID;
  /* Stream 0 while it keeps up (above); else the least loaded stream,
   * starting after the last one used so equal loads rotate. */
  tcp_stream *s = NULL, *s0 = ep->streams[0];
  if (s0->writes_queued < WRITE_DEPTH && (h->len <= SMALL_WRITE || s0->queued_bytes < SPILL_BYTES)) s = s0;
  for (int i = 0; i < ep->nstreams && !s; i++) {
    tcp_stream *c = ep->streams[(ep->next_stream + i) % ep->nstreams];
    if (c->writes_queued < WRITE_DEPTH && (!s || c->writes_queued < s->writes_queued)) s = c;
  }
  if (!s) return RR_AGAIN;
  ep->next_stream++;
  tcp_tx *t = tx_push(s);
  if (!t) return RR_AGAIN;
  tcp_frame_encode(h, t->wire);
  t->len = h->len;
  t->payload = payload;
  t->sent = 0;
  t->ctrl_slot = -1;
  t->wr_id = wr_id;
  t->post_ns = post_ns;
  s->writes_queued++;
  s->queued_bytes += TCP_FRAME_BYTES + h->len;
  return RR_OK;
}

static rr_status tcp_post_write(rr_rail_ep *rep, const rr_write_wr *wr) {
  if (wr->len > UINT32_MAX) return RR_ERR_INVALID;
  tcp_frame_hdr h = {.type = TCP_FRAME_WRITE,
                     .flags = (uint8_t)((wr->flags & RR_WRITE_PROBE) ? TCP_FRAME_F_PROBE : 0),
                     .epoch_tag = wr->epoch_tag,
                     .len = (uint32_t)wr->len,
                     .imm = wr->imm,
                     .rkey = wr->rkey,
                     .raddr = wr->remote_addr};
  return queue_write_frame(to_tcp(rep), &h, wr->local, wr->wr_id, wr->post_ns);
}

/* An eager write is a write frame whose key and address fields carry what it
 * names (tcp_frame.h). */
static rr_status tcp_post_eager(rr_rail_ep *rep, const rr_eager_wr *wr) {
  if (wr->len > UINT32_MAX) return RR_ERR_INVALID;
  tcp_frame_hdr h = {.type = TCP_FRAME_WRITE,
                     .flags = TCP_FRAME_F_EAGER,
                     .epoch_tag = wr->epoch_tag,
                     .len = (uint32_t)wr->len,
                     .imm = wr->imm,
                     .rkey = (uint32_t)wr->name.tag,
                     .raddr = wr->name.seq | (uint64_t)wr->name.known << 32};
  return queue_write_frame(to_tcp(rep), &h, wr->local, wr->wr_id, wr->post_ns);
}

static rr_status tcp_post_ctrl(rr_rail_ep *rep, const void *msg, uint32_t len) {
  tcp_ep *ep = to_tcp(rep);
  if (ep->failed) return ep->failed;
  if (!ep->connected) return RR_ERR_INVALID;
  if (len > RR_RAIL_CTRL_MAX) return RR_ERR_INVALID;
  tcp_stream *s = ep->streams[0];
  tcp_ctrl *cs = ep->ctrl;
  if (!cs) {
    if (!(cs = malloc(sizeof *cs))) return RR_AGAIN;
    cs->fresh = cs->nfree = 0;
    ep->ctrl = cs;
  }
  int16_t slot;
  if (cs->nfree) {
    slot = cs->free_slot[cs->nfree - 1];
  } else {
    if (cs->fresh == CTRL_SLOTS) return RR_AGAIN;
    slot = cs->fresh;
    if (!(cs->buf[slot] = malloc(RR_RAIL_CTRL_MAX))) return RR_AGAIN;
    cs->fresh++; /* its buffer stays with the slot */
    cs->free_slot[cs->nfree++] = slot;
  }
  tcp_tx *t = tx_push(s);
  if (!t) return RR_AGAIN; /* the slot stays free */
  cs->nfree--;
  memcpy(cs->buf[slot], msg, len);
  tcp_frame_hdr h = {.type = TCP_FRAME_CTRL, .len = len};
  tcp_frame_encode(&h, t->wire);
  t->len = len;
  t->payload = cs->buf[slot];
  t->sent = 0;
  t->ctrl_slot = slot;
  t->wr_id = 0;
  s->queued_bytes += TCP_FRAME_BYTES + len;
  return RR_OK;
}

/* A marker behind everything queued on every stream (a stream's frames
 * arrive in order). Markers use no control slot; they need room on every
 * stream or none is queued. */
static rr_status tcp_post_drain(rr_rail_ep *rep, uint32_t epoch) {
  tcp_ep *ep = to_tcp(rep);
  if (ep->failed) return ep->failed;
  if (!ep->connected) return RR_ERR_INVALID;
  for (int i = 0; i < ep->nstreams; i++)
    if (tx_room(ep->streams[i]) != RR_OK) return RR_AGAIN;
  for (int i = 0; i < ep->nstreams; i++) {
    tcp_stream *s = ep->streams[i];
    tcp_tx *t = tx_push(s);
    tcp_frame_hdr h = {.type = TCP_FRAME_DRAIN, .imm = epoch};
    tcp_frame_encode(&h, t->wire);
    t->len = 0;
    t->payload = NULL;
    t->sent = 0;
    t->ctrl_slot = -2; /* neither a write nor a control slot */
    t->wr_id = 0;
    s->queued_bytes += TCP_FRAME_BYTES;
  }
  return RR_OK;
}

/* Hand as many queued frames as the socket takes to the kernel. */
static rr_status stream_transmit(tcp_ep *ep, tcp_stream *s) {
  size_t moved = 0;
  while (s->tx_head != s->tx_tail && moved < PROGRESS_BUDGET) {
    struct iovec iov[IOV_BATCH];
    int niov = 0;
    size_t attempted = 0;
    for (uint32_t i = s->tx_head; i != s->tx_tail && niov + 2 <= IOV_BATCH; i++) {
      tcp_tx *t = &s->tx[i % s->tx_cap];
      uint32_t off = t->sent;
      if (off < TCP_FRAME_BYTES) {
        iov[niov++] = (struct iovec){t->wire + off, TCP_FRAME_BYTES - off};
        off = TCP_FRAME_BYTES;
      }
      uint32_t poff = off - TCP_FRAME_BYTES;
      if (t->len > poff) iov[niov++] = (struct iovec){(char *)t->payload + poff, t->len - poff};
      attempted += TCP_FRAME_BYTES + t->len - t->sent;
    }
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
    ssize_t n = sendmsg(s->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return RR_OK;
      if (errno == EINTR) continue;
      return tcp_ep_fail(ep, tcp_classify_errno(errno), "send failed", errno);
    }
    /* Retire what went out completely. */
    uint64_t done_ns = 0; /* read once per send, and only for telemetry */
    moved += (size_t)n;
    size_t left = (size_t)n;
    s->queued_bytes -= (size_t)n;
    while (left > 0) {
      tcp_tx *t = &s->tx[s->tx_head % s->tx_cap];
      size_t frame = TCP_FRAME_BYTES + t->len;
      size_t rest = frame - t->sent;
      if (left < rest) {
        t->sent += (uint32_t)left;
        break;
      }
      left -= rest;
      s->tx_head++;
      if (t->ctrl_slot >= 0) {
        ep->ctrl->free_slot[ep->ctrl->nfree++] = t->ctrl_slot;
      } else if (t->ctrl_slot == -1) {
        s->writes_queued--;
        if (ep->base.tel_tx) {
          if (!done_ns) done_ns = rr_now_ns();
          rr_tel_record(ep->base.tel_tx, t->post_ns, done_ns, t->len);
        }
        rr_status st = ep->base.events->on_write_done(&ep->base, t->wr_id);
        if (st != RR_OK) return tcp_ep_fail(ep, st, "write completion rejected", 0);
      }
    }
    if ((size_t)n < attempted) return RR_OK; /* the socket buffer is full */
  }
  return RR_OK;
}

static rr_status tcp_progress(rr_rail_ep *rep) {
  tcp_ep *ep = to_tcp(rep);
  if (ep->failed) return ep->failed;
  if (!ep->connected) return RR_OK;
  /* Transmit before receiving: control messages that arriving data triggers
   * (acknowledgements) leave with the next call, behind any data the caller
   * posts in between, keeping them off the latency-critical path. */
  ep->progress_calls++;
  for (int i = 0; i < ep->nstreams; i++) {
    tcp_stream *s = ep->streams[i];
    rr_status st = stream_transmit(ep, s);
    /* Streams past the first carry only bulk writes: one that has been
     * quiet for a while is polled on every 8th call, so a small-message
     * exchange pays one receive call per progress, not one per stream. A
     * bulk write arriving there waits a few calls at most. */
    int skip = i > 0 && s->idle_polls > QUIET_POLLS && (ep->progress_calls & 7);
    if (st == RR_OK && !skip) st = tcp_stream_receive(ep, s);
    if (st == RR_ERR_PEER && s->eof && !ep->failed) return tcp_drain_after_eof(ep, s);
    if (st != RR_OK) return st;
  }
  return RR_OK;
}

static void tcp_invalidate(rr_rail_ep *rep) {
  tcp_ep *ep = to_tcp(rep);
  for (int i = 0; i < ep->nstreams; i++) {
    tcp_stream *s = ep->streams[i];
    /* Incoming: the rest of a write in flight goes to the sink. */
    if (s->rx == RX_DIRECT) s->rx = RX_SINK;
    /* Outgoing: a frame partly on the wire must finish (the stream's framing
     * depends on it); everything behind it is dropped. */
    uint32_t keep = s->tx_head;
    if (keep != s->tx_tail && s->tx[keep % s->tx_cap].sent > 0) keep++;
    for (uint32_t j = keep; j != s->tx_tail; j++) {
      tcp_tx *t = &s->tx[j % s->tx_cap];
      s->queued_bytes -= TCP_FRAME_BYTES + t->len - t->sent;
      if (t->ctrl_slot >= 0) ep->ctrl->free_slot[ep->ctrl->nfree++] = t->ctrl_slot;
      else if (t->ctrl_slot == -1) s->writes_queued--;
    }
    s->tx_tail = keep;
  }
}

static size_t tcp_backlog(rr_rail_ep *rep) {
  tcp_ep *ep = to_tcp(rep);
  size_t b = 0;
  for (int i = 0; i < ep->nstreams; i++) b += ep->streams[i]->queued_bytes;
  return b;
}

static int tcp_flushed(rr_rail_ep *rep) {
  tcp_ep *ep = to_tcp(rep);
  if (ep->failed || !ep->connected) return 1;
  for (int i = 0; i < ep->nstreams; i++) {
    tcp_stream *s = ep->streams[i];
    if (s->queued_bytes) return 0;
    /* Bytes the kernel has not sent yet. (Waiting for the peer's kernel to
     * acknowledge them as well would wait out its delayed ACK, 40 ms, on
     * every close; sent bytes are retransmitted after our close() as long as
     * it sends no reset, which tcp_destroy sees to.) */
    int unsent = 0;
    if (s->fd >= 0 && ioctl(s->fd, SIOCOUTQNSD, &unsent) == 0 && unsent > 0) return 0;
  }
  return 1;
}

static uint64_t tcp_last_alive_ns(rr_rail_ep *rep, uint64_t now_ns) {
  tcp_ep *ep = to_tcp(rep);
  uint64_t best = ep->last_rx_ns, stalled = UINT64_MAX;
  /* The peer's kernel acknowledging our bytes proves the path both ways even
   * when the peer process has nothing to say. But bytes arriving prove only
   * the way to us: a socket whose own data waits unacknowledged (after an
   * outage TCP retransmits on an exponential backoff, seconds apart) cannot
   * deliver what we post on it, however much it receives. Such a stream
   * counts as alive only as of its last acknowledgement. */
  for (int i = 0; i < ep->nstreams; i++) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(ep->streams[i]->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) continue;
    uint64_t ago = (uint64_t)ti.tcpi_last_ack_recv * 1000000ull;
    uint64_t acked = ago <= now_ns ? now_ns - ago : 0;
    if (acked > best) best = acked;
    if (ti.tcpi_unacked > 0 && acked < stalled) stalled = acked;
  }
  return stalled < best ? stalled : best;
}

/* The sum over the streams: they share the NIC and the path. */
static rr_status tcp_path_stats(rr_rail_ep *rep, rr_rail_path_stats *out) {
  tcp_ep *ep = to_tcp(rep);
  if (ep->failed || !ep->connected) return RR_ERR_RAIL;
  rr_rail_path_stats sum = {0};
  for (int i = 0; i < ep->nstreams; i++) {
    uint64_t sent, retrans;
    uint32_t unacked;
    rr_status st = tcp_socket_path_stats(ep->streams[i]->fd, &sent, &retrans, &unacked);
    if (st != RR_OK) return st;
    sum.sent_bytes += sent;
    sum.retrans_bytes += retrans;
    sum.unacked += unacked;
  }
  *out = sum;
  return RR_OK;
}

static void tcp_destroy(rr_rail_ep *rep) {
  if (!rep) return;
  tcp_ep *ep = to_tcp(rep);
  for (int i = 0; i < ep->nstreams; i++) {
    tcp_stream *s = ep->streams[i];
    if (s->fd >= 0) tcp_close_quietly(s->fd);
    free(s->tx);
    free(s->staging);
    free(s);
  }
  for (int c = 0; ep->ctrl && c < ep->ctrl->fresh; c++) free(ep->ctrl->buf[c]);
  free(ep->ctrl);
  free(ep);
}

static rr_status tcp_ep_open(rr_rail_dev *dev, const rr_rail_events *events, void *events_arg,
                             rr_rail_ep **out) {
  tcp_ep *ep = calloc(1, sizeof *ep);
  if (!ep) return RR_ERR_NOMEM;
  ep->base = (rr_rail_ep){.ops = &rr_tcp_rail_ops, .dev = dev, .events = events,
                          .events_arg = events_arg, .rail = -1, .wire_id = -1};
  ep->last_rx_ns = rr_now_ns();
  *out = &ep->base;
  return RR_OK;
}

/* The sockets are the endpoint: nothing to describe beyond them. */
static rr_status tcp_ep_addr(rr_rail_ep *rep, void *blob, uint32_t *len) {
  (void)rep;
  (void)blob;
  *len = 0;
  return RR_OK;
}

/* Adopt the setup sockets as streams (stream 0 carries control messages). */
static rr_status tcp_ep_connect(rr_rail_ep *rep, const rr_rail_connect_args *args) {
  tcp_ep *ep = to_tcp(rep);
  if (ep->connected || args->nfds < 1 || args->nfds > RR_TCP_MAX_STREAMS || args->peer_addr_len != 0)
    return RR_ERR_INVALID;
  for (int i = 0; i < args->nfds; i++)
    if (args->fds[i] < 0) return RR_ERR_INVALID;
  for (int i = 0; i < args->nfds; i++) {
    tcp_stream *s = calloc(1, sizeof *s);
    if (!s) return RR_ERR_NOMEM; /* streams made so far go with destroy() */
    ep->streams[ep->nstreams++] = s;
    s->fd = -1;
    /* Stream 0 carries the control messages: it reads and sends from the
     * start. The others get their queue and staging when first used. */
    if (i == 0 && (tx_room(s) != RR_OK || !(s->staging = malloc(STAGING_MIN)))) return RR_ERR_NOMEM;
    if (i == 0) s->stage_cap = STAGING_MIN;
  }
  for (int i = 0; i < args->nfds; i++) {
    ep->streams[i]->fd = args->fds[i];
    args->fds[i] = -1; /* ours now */
  }
  ep->base.wire_id = ep->streams[0]->fd; /* the control stream names the endpoint */
  ep->connected = 1;
  ep->last_rx_ns = rr_now_ns();
  return RR_OK;
}

const rr_rail_ops rr_tcp_rail_ops = {
    .name = "tcp",
    .wire = RR_RAIL_WIRE_STREAMS,
    .reg_mr = tcp_reg_mr,
    .dereg_mr = tcp_dereg_mr,
    .dev_progress = tcp_dev_progress,
    .dev_event = tcp_dev_event,
    .dev_close = tcp_dev_close,
    .ep_open = tcp_ep_open,
    .ep_addr = tcp_ep_addr,
    .ep_connect = tcp_ep_connect,
    .post_write = tcp_post_write,
    .post_eager = tcp_post_eager,
    .post_flush = NULL, /* each write goes to its stream as it is posted */
    .post_ctrl = tcp_post_ctrl,
    .post_drain = tcp_post_drain,
    .progress = tcp_progress,
    .invalidate = tcp_invalidate,
    .backlog = tcp_backlog,
    .flushed = tcp_flushed,
    .last_alive_ns = tcp_last_alive_ns,
    .path_stats = tcp_path_stats,
    .destroy = tcp_destroy,
};
