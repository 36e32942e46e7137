/* The transfer engine: one per connection end (send or receive).
 *
 * Messages move as chunks written into receiver-posted buffers. Progress is
 * tracked at both ends: the sender's chunks are posted (queued on a rail),
 * transmitted (left this host's hands) and acked (the receiver reported the
 * whole receive landed); the receiver keeps, per sub-receive, the count of
 * chunks received and the prefix of chunks that are all there ("done").
 *
 * A send completes towards NCCL only when its buffer may be reused: small
 * messages are copied into a bounce buffer and complete at once, larger ones
 * when acked. Keeping the data until the ack is what lets a failover replay it.
 *
 * Failover (engine_rails.c, engine_recv.c, engine_send.c): a connection holds
 * a primary rail and warm backups. When a rail dies, the receiver fences every
 * rail, moves to a new epoch, and tells the sender, per outstanding receive,
 * the chunks it holds; the sender replays the rest on the rails still up. The
 * receiver drops every write of an older epoch, so nothing from before the
 * switch can land after it. See docs/failover.md. */
#ifndef RERAIL_ENGINE_H
#define RERAIL_ENGINE_H
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "engine_wire.h"
#include "rail.h"

#define RR_MAX_RAILS 8

/* What NCCL's mhandle points at. */
typedef struct rr_mr {
  void *base;
  size_t size;
  int type;                 /* RR_PTR_* */
  rr_rail_mr *rail_mr;      /* registration on the rail(s) */
} rr_mr;

enum rr_engine_role { RR_ENGINE_SEND = 1, RR_ENGINE_RECV = 2 };
enum rr_request_kind { RR_REQ_SEND = 0x5e, RR_REQ_RECV = 0x7e };
enum rr_failover_mode { RR_FAILOVER_CHAIN = 0, RR_FAILOVER_BALANCE = 1 };

/* Rail states. DEAD is final (the endpoint broke); DOWN may heal. */
typedef enum rr_rail_state {
  RR_RAIL_ACTIVE = 0,       /* carries traffic */
  RR_RAIL_DOWN,             /* failed: link down, silent, or the peer said so */
  RR_RAIL_RECOVERING,       /* signs of life again: on probation (hysteresis) */
  RR_RAIL_DEAD,             /* the endpoint broke: never used again */
  RR_RAIL_NSTATES
} rr_rail_state;

typedef struct rr_engine rr_engine;

typedef struct engine_rail {
  rr_rail_ep *ep;
  rr_rail_state state;
  int weight;               /* relative bandwidth (link speed), for balance */
  uint64_t state_since_ns;
  uint64_t watch_since_ns;  /* silence is judged from here (reset when work starts) */
  uint64_t last_alive_ns;   /* cached rr_rail_ops.last_alive_ns */
  uint64_t last_probe_ns;
  uint64_t healthy_since_ns;/* RECOVERING: continuous signs of life since */
  uint32_t recent_failures; /* for the fail-back hold's backoff */
  uint64_t last_failure_ns;
  double vtime;             /* balance: bytes placed on this rail / weight */
  uint64_t last_reconnect_ns;/* sender: when the last reconnect attempt began */
  int reconnecting;         /* sender: an attempt is under way */
  int fresh;                /* reconnected and not yet seen alive */
  char ifname[16];          /* local NIC */
  char name[80];            /* "rail1 (eth1 -> 10.0.1.2)" for messages */
  char why[64];             /* why it went down */
} engine_rail;

typedef struct rr_send_req {
  uint8_t kind;             /* RR_REQ_SEND */
  uint8_t in_use;
  uint8_t user_done;        /* NCCL has been told it is done */
  uint8_t acked;
  uint8_t sub;
  int8_t rail;              /* chain mode: the rail this message uses, -1 before its first chunk */
  int16_t bounce;           /* bounce buffer index, -1 when none */
  rr_engine *engine;
  uint32_t seq;
  const char *data;         /* user buffer, or the bounce buffer */
  size_t size;
  const rr_rail_mr *mr;
  uint64_t raddr;
  uint32_t rkey;
  uint32_t nchunks, posted, transmitted; /* posted/transmitted count the current epoch from its replay point */
  uint32_t resumed_epoch;   /* a RESUME_SLOT of this epoch named it */
  void *prof_event;         /* NCCL profiler event, NULL when none */
} rr_send_req;

typedef struct rr_recv_sub {
  char *data;
  size_t posted_size;
  size_t size;              /* as sent, known once the last chunk landed */
  uint32_t expected;        /* chunk count, 0 until the last chunk landed */
  uint32_t received;        /* chunks landed (each counted once per epoch) */
  uint32_t prefix;          /* chunks [0, prefix) have all landed */
  uint64_t window;          /* bit i: chunk prefix + i landed */
} rr_recv_sub;

typedef struct rr_recv_req {
  uint8_t kind;             /* RR_REQ_RECV */
  uint8_t in_use;
  uint8_t n;
  uint8_t complete;         /* every chunk of every sub-receive landed */
  uint8_t subs_done;
  uint8_t ack_now;          /* the sender waits for our ack: send it at once */
  rr_engine *engine;
  uint32_t seq;
  engine_cts cts;           /* as sent, for a resend after a rollback */
  void *prof_event[RR_NET_MAX_RECVS]; /* NCCL profiler events, NULL when none */
  rr_recv_sub sub[RR_NET_MAX_RECVS];
} rr_recv_req;

typedef struct engine_cts_slot {
  uint8_t valid;
  uint8_t matched;          /* bitmask of sub-receives an isend has taken */
  engine_cts cts;
} engine_cts_slot;

#define RR_SEND_POOL (RR_NET_MAX_REQUESTS * RR_NET_MAX_RECVS)
#define RR_BOUNCE_COUNT RR_NET_MAX_REQUESTS
#define RR_BOUNCE_SIZE 4096

typedef struct rr_engine_config {
  int role;
  size_t chunk_size;
  int failover_mode;        /* enum rr_failover_mode */
  uint64_t progress_timeout_ns;  /* δ: silence before a rail is blamed */
  uint64_t failback_hold_ns;     /* healthy this long before traffic returns */
  char peer[64];            /* the remote host, for messages and health events */
  rr_profiler_fn profiler;  /* NCCL's profiler callback, or NULL */
  /* Sender only: reopen rail `rail` afresh (new sockets, new QP). Called
   * again and again while it returns RR_AGAIN; RR_OK hands over the new
   * endpoint (events already pointing at this engine); a failure ends this
   * attempt. A rail that failed keeps stale state in its old transport
   * (TCP's retransmission backoff, bytes of fenced epochs): a fresh one
   * heals at once. NULL when the owner cannot reconnect. */
  rr_status (*reconnect)(void *arg, int rail, rr_rail_ep **ep);
  void *reconnect_arg;
  /* Failed rails are reopened (by our cfg.reconnect, or by the peer's
   * through our listener): a rail that failed comes back only as a fresh
   * endpoint, never on its old transport, whose state (TCP's retransmission
   * backoff, a QP in error) can leave it mute for seconds after the path
   * heals. When neither end can reopen it, the old endpoint may recover. */
  int reopens;
} rr_engine_config;

struct rr_engine {
  rr_engine_config cfg;
  pthread_mutex_t lock;     /* NCCL's threads and the background thread share the engine */
  rr_status failed;         /* sticky failure: every later call reports it */
  char failed_why[256];
  uint32_t epoch;
  _Atomic uint64_t last_progress_ns; /* when anybody last drove this engine (read unlocked) */
  uint64_t last_tick_ns;    /* last health check */
  uint64_t no_rail_since_ns;/* no ACTIVE rail since (0 = there is one) */
  uint64_t no_rail_life_ns; /* then: the last time any rail was seen working */
  int busy;                 /* outstanding requests at the last tick */
  int urgent;               /* a queued control message must leave before we return */
  int ctrl_queued;          /* control messages wait in a rail queue for the next progress */

  int nrails;
  engine_rail rails[RR_MAX_RAILS];
  uint32_t peer_down_mask;  /* rails the peer told us it sees down */

  /* sender */
  engine_cts_slot cts[RR_NET_MAX_REQUESTS];
  uint32_t send_seq;        /* the receive the next isend matches */
  rr_send_req sreq[RR_SEND_POOL];
  uint16_t fifo[RR_SEND_POOL]; /* active sends in posting order */
  uint32_t fifo_head, fifo_tail, fifo_post; /* post: first entry that may have unposted chunks */
  char *bounce;             /* RR_BOUNCE_COUNT * RR_BOUNCE_SIZE, allocated on first use */
  int16_t bounce_free[RR_BOUNCE_COUNT];
  int nbounce_free;
  int resume_wait;          /* a rollback is under way: post nothing until RESUME_END */
  uint64_t resume_wait_since_ns;
  uint32_t resume_wait_epoch; /* waiting for a RESUME_END of an epoch after this one */
  uint64_t stall_start_ns;  /* when the failure that caused the current rollback was seen */

  /* receiver */
  rr_recv_req rreq[RR_NET_MAX_REQUESTS];
  uint32_t recv_seq;        /* sequence number of the next irecv */
  uint32_t ack_queue[RR_NET_MAX_REQUESTS]; /* acks that could not be posted yet */
  uint32_t ack_head, ack_pending;
  uint32_t resume_recv_seq; /* recv_seq when the current rollback began */
  int resume_cursor;        /* next slot to announce after a rollback; -1 = none, 32 = END */
  int fail_notice_pending;  /* a FAIL message still has to be posted */
  uint64_t down_notice_ns;  /* when the peer was last reminded of rails waiting to be reopened */
};

extern const rr_rail_events rr_engine_rail_events;

rr_status rr_engine_init(rr_engine *e, const rr_engine_config *cfg);
/* Add a connected rail; rail 0 is the primary, the rest backups in chain order.
 * The endpoint's events must be rr_engine_rail_events with arg e. */
rr_status rr_engine_add_rail(rr_engine *e, rr_rail_ep *ep, int weight, const char *ifname,
                             const char *peer_addr);
void rr_engine_fini(rr_engine *e);
/* Swap rail `rail`'s endpoint for a freshly connected one (the receiver side
 * of a reconnect; the sender side swaps through cfg.reconnect). The rail
 * starts over as DOWN and earns its way back like any healed rail. */
void rr_engine_rail_replace(rr_engine *e, int rail, rr_rail_ep *ep);

rr_status rr_engine_isend(rr_engine *e, void *data, size_t size, int tag, rr_mr *mr,
                          void *phandle, void **request);
rr_status rr_engine_irecv(rr_engine *e, int n, void **data, const size_t *sizes,
                          const int *tags, rr_mr **mrs, void **phandles, void **request);
rr_status rr_engine_test(void *request, int *done, size_t *sizes);

/* Drive an engine nobody else is driving (the background thread): answers
 * the peer and notices failures while NCCL has nothing to ask of it.
 * Returns without waiting when another thread holds the engine. */
void rr_engine_background(rr_engine *e, uint64_t now_ns);

/* ---- shared between the engine's files ---------------------------------- */

rr_status engine_fail(rr_engine *e, rr_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* One pass: rails, health, outbox. Caller holds the lock. */
rr_status engine_progress(rr_engine *e);
/* Post a control message on the control rail (lowest ACTIVE). RR_AGAIN when
 * it cannot go now. */
rr_status engine_post_ctrl(rr_engine *e, const void *msg, uint32_t len);
int engine_control_rail(const rr_engine *e);
int engine_outstanding(const rr_engine *e);

/* NCCL profiler events (net v10+): one per message, from post to completion,
 * described with NCCL's socket event schema v1 so stock profilers read it. */
void engine_prof_start(rr_engine *e, void **event, void *phandle, int op, size_t length);
void engine_prof_stop(rr_engine *e, void **event);

/* engine_rails.c */
void engine_rails_tick(rr_engine *e, uint64_t now);
void engine_rail_set_state(rr_engine *e, int r, rr_rail_state st, const char *why);
void engine_rail_swap(rr_engine *e, int r, rr_rail_ep *ep); /* caller holds the lock */
uint32_t engine_down_mask(const rr_engine *e);
int engine_rail_usable(const rr_engine *e, int r);

/* engine_send.c */
/* now: the caller's clock reading, or 0 to read it when a chunk is posted. */
rr_status engine_send_post(rr_engine *e, uint64_t now);
rr_status engine_send_on_ctrl(rr_engine *e, const void *msg, uint32_t len);
rr_status engine_send_on_write_done(rr_engine *e, uint64_t wr_id);
void engine_send_rail_lost(rr_engine *e);
rr_status engine_send_test(rr_send_req *r, int *done, size_t *sizes);

/* engine_recv.c */
int engine_recv_write_begin(rr_engine *e, uint32_t imm, uint16_t fence);
rr_status engine_recv_write(rr_engine *e, uint32_t imm, uint32_t len);
rr_status engine_recv_on_ctrl(rr_engine *e, const void *msg, uint32_t len);
rr_status engine_recv_outbox(rr_engine *e);
void engine_recv_rollback(rr_engine *e);
rr_status engine_recv_test(rr_recv_req *r, int *done, size_t *sizes);

#endif
