/* The rail interface: what the transfer engine needs from a transport.
 *
 * A rail endpoint ("ep") is one connected path to the peer over one local NIC
 * (a QP for verbs, a set of sockets for TCP). The interface is shaped after
 * RDMA: the receiver registers memory and advertises (address, rkey) in a
 * clear-to-send; the sender issues one-sided writes carrying 32-bit immediate
 * data into those buffers; small control messages travel separately. No byte
 * stream semantics leak upwards, so the same engine drives verbs and TCP and
 * replays chunks on another rail after a failure. Every decision (which rail,
 * when to fail over, what to replay) is the engine's; a rail only moves bytes
 * and reports what it sees.
 *
 * Completions are delivered through callbacks from progress(), on the thread
 * that calls it; pointers handed to a callback are valid only during the call. */
#ifndef RERAIL_RAIL_H
#define RERAIL_RAIL_H
#include <stddef.h>
#include <stdint.h>

#include "rr_status.h"
#include "rr_telemetry.h"

typedef struct rr_rail_ep rr_rail_ep;
typedef struct rr_rail_ops rr_rail_ops;

/* A memory registration on one rail (transport-specific state follows it). */
typedef struct rr_rail_mr {
  void *base;
  size_t len;
  uint32_t lkey;
  uint32_t rkey;
} rr_rail_mr;

/* One-sided write of [local, local+len) to (remote_addr, rkey) on the peer. */
typedef struct rr_write_wr {
  uint64_t wr_id;          /* returned in on_write_done */
  const void *local;
  size_t len;              /* may be 0: the immediate alone is delivered */
  const rr_rail_mr *local_mr;
  uint64_t remote_addr;
  uint32_t rkey;
  uint32_t imm;            /* delivered with the data to on_write_recv */
  /* Delivered to on_write_begin by rails that carry it (TCP): lets the
   * receiver tell a write from before a fence apart from a current one
   * across many fences, even if it sat in a kernel buffer of a failed rail
   * for long. Rails that fence physically (verbs: the old QP is reset)
   * deliver 0 and the engine relies on that instead. */
  uint16_t fence;
  /* rr_now_ns() when the engine posted it: rails that record telemetry use
   * it as the request's start instead of reading the clock once more per
   * chunk (the engine reads it once per batch of posts). */
  uint64_t post_ns;
} rr_write_wr;

/* Engine callbacks, called from ops->progress(). Returning a failure status
 * from a callback makes progress() stop and return it. */
typedef struct rr_rail_events {
  /* The local write wr_id has left this host's hands (buffer reusable by the rail). */
  rr_status (*on_write_done)(void *arg, uint64_t wr_id);
  /* A write from the peer is about to land: return 0 to have the rail discard
   * it (a fenced epoch), non-zero to let it land. Rails that cannot see a
   * write before it lands (verbs) fence by other means and may skip this. */
  int (*on_write_begin)(void *arg, uint32_t imm, uint16_t fence);
  /* A write from the peer has fully landed in our memory. */
  rr_status (*on_write_recv)(void *arg, uint32_t imm, uint32_t len);
  /* A control message from the peer. */
  rr_status (*on_ctrl)(void *arg, const void *msg, uint32_t len);
} rr_rail_events;

/* Largest control message a rail must carry. */
#define RR_RAIL_CTRL_MAX 512

struct rr_rail_ops {
  const char *name;
  /* Queue a write. RR_AGAIN when the send queue is full (retry later). */
  rr_status (*post_write)(rr_rail_ep *ep, const rr_write_wr *wr);
  /* Queue a control message (copied). RR_AGAIN when its queue is full. */
  rr_status (*post_ctrl)(rr_rail_ep *ep, const void *msg, uint32_t len);
  /* Move bytes: transmit what is queued, deliver what arrived through the
   * event callbacks. Returns RR_OK, or the failure that broke the rail for
   * good (the engine never uses a broken endpoint again). */
  rr_status (*progress)(rr_rail_ep *ep);
  /* Fence: drop every queued frame not yet started, and discard the rest of
   * any incoming write not yet landed. After fence() returns, nothing issued
   * before it lands in registered memory on either side. */
  void (*fence)(rr_rail_ep *ep);
  /* Bytes queued for transmission and not yet handed to the wire. */
  size_t (*backlog)(rr_rail_ep *ep);
  /* The latest time (rr_now_ns) at which the path to the peer was seen to
   * work in both directions: bytes received, or the peer acknowledging
   * bytes we sent (for TCP, the kernel's ACKs). While our own data waits
   * unacknowledged, only acknowledgements count: what we post must get
   * through, not just what the peer sends. */
  uint64_t (*last_alive_ns)(rr_rail_ep *ep, uint64_t now_ns);
  /* Release everything; the endpoint is gone afterwards. */
  void (*destroy)(rr_rail_ep *ep);
};

/* Base of every transport's endpoint (transports embed it first and get back
 * to themselves with container_of). */
struct rr_rail_ep {
  const rr_rail_ops *ops;
  const rr_rail_events *events;
  void *events_arg;
  int dev;                 /* rerail device index of the local NIC */
  /* Telemetry recorders the owner installs (NULL when off): the rail records
   * every write it sends and every write that lands, with rr_tel_record(). */
  rr_tel_rail *tel_tx, *tel_rx;
};

#define rr_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#endif
