/* The rail interface: what the transfer engine needs from a transport.
 *
 * A rail endpoint ("ep") is one connected path to the peer over one local NIC
 * (a QP for verbs, a set of sockets for TCP). The interface is shaped after
 * RDMA: the receiver registers memory and advertises (address, rkey) in a
 * clear-to-send; the sender issues one-sided writes carrying 32-bit immediate
 * data into those buffers; small control messages travel separately. No byte
 * stream semantics leak upwards, so the same engine drives verbs and TCP and
 * can replay chunks on another rail after a failure.
 *
 * Completions are delivered through callbacks from poll(), on the thread that
 * polls; pointers handed to a callback are valid only during the call. */
#ifndef RERAIL_RAIL_H
#define RERAIL_RAIL_H
#include <stddef.h>
#include <stdint.h>

#include "rr_status.h"

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
} rr_write_wr;

/* Engine callbacks, called from ops->poll(). Returning a failure status from
 * a callback makes poll() stop and return it (a protocol violation, say). */
typedef struct rr_rail_events {
  /* The local write wr_id has left this host's hands (buffer reusable by the rail). */
  rr_status (*on_write_done)(void *arg, uint64_t wr_id);
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
  /* Queue a control message (copied). Never RR_AGAIN: rails size their control
   * queue for the engine's bound (two per request slot). */
  rr_status (*post_ctrl)(rr_rail_ep *ep, const void *msg, uint32_t len);
  /* Move bytes: transmit what is queued, deliver what arrived through the
   * event callbacks. Returns RR_OK, or the failure that broke the rail. */
  rr_status (*progress)(rr_rail_ep *ep);
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
};

#define rr_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#endif
