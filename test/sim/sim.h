/* Deterministic simulation of the transfer engine: two real rr_engines (a
 * sender and a receiver) over an in-memory rail, driven by a seeded
 * scheduler on virtual time, with faults the seed chooses. A seed number
 * alone reproduces a run exactly.
 *
 *   sim_rail.c     the in-memory rail (rr_rail_ops): devices, registrations,
 *                  endpoint pairs whose items travel per-stream FIFOs
 *   sim_traffic.c  NCCL's proxy pattern on both ends, and every check on the
 *                  bytes (checksummed payloads, canaries, scribbled buffers)
 *   sim_faults.c   the seed's fault schedule, the events that carry it out,
 *                  and the sender's reconnects
 *   sim_main.c     the seed's choices, the scheduler loop, the end-of-seed
 *                  checks and the command line */
#ifndef RERAIL_SIM_H
#define RERAIL_SIM_H
#include <stddef.h>
#include <stdint.h>

/* The engine's internals, not only its API: the simulation reads its
 * requests, rails and statistics to check the invariants. */
#include "engine_internal.h"
#include "sim_rng.h"

#define SIM_MAX_RAILS 4
#define SIM_MAX_STREAMS 2
#define SIM_SEND 0
#define SIM_RECV 1
#define SIM_MS 1000000ull
#define SIM_US 1000ull
#define SIM_START_NS (1000 * SIM_MS) /* virtual time at the start of a seed */
#define SIM_CHUNK 4096 /* small chunks: messages have many of them */
#define SIM_DEV_BASE_RECV 8 /* receiver devices are 8.., so the two ends' NIC states stay apart */

enum sim_kind { SIM_TCP = 0, SIM_VERBS = 1 };

typedef struct sim_item sim_item;
typedef struct sim_queue {
  sim_item *head, *tail;
  uint32_t n;
  size_t bytes;      /* payloads plus a header's worth per item */
} sim_queue;

typedef struct sim_mr {
  rr_rail_mr base;
  struct sim_mr *next;
} sim_mr;

typedef struct sim_dev {
  rr_rail_dev base;
  struct sim_world *w;
  int kind, side, rail;
  sim_mr *mrs; /* every live registration (verbs: writes are checked against them) */
} sim_dev;

typedef struct sim_pair sim_pair;

/* Receive state of one stream: a write may land in two steps (the rest of
 * its payload on a later progress call), so an invalidation can cut it mid-way. */
typedef struct sim_rx {
  sim_item *cur;      /* a write partly landed, or being sunk */
  uint32_t done;      /* payload bytes of cur already handled */
  char *dst;          /* NULL: the rest is discarded */
  uint8_t drain_seen;
  uint32_t drain_epoch;
} sim_rx;

typedef struct sim_ep {
  rr_rail_ep base;
  sim_pair *pair;
  int side;
  sim_queue sq;       /* posted, not yet on the wire */
  size_t sq_bytes;
  uint32_t sq_writes, sq_ctrl;
  uint32_t next_stream;
  sim_rx rx[SIM_MAX_STREAMS];
  uint64_t *cq;       /* verbs: completions of writes that landed, to report */
  uint32_t cq_n, cq_cap;
  /* Verbs rails whose completion means placement: writes of the peer that
   * landed in our memory (their writer's completion already queued) and
   * that this end has not polled yet, each visible from its time on.
   * Reported in order, and before any control message or drain that came
   * behind them; lost when the endpoint breaks or is invalidated, as a failed
   * device's completion queue is. */
  struct sim_rcq {
    rr_write_hdr hdr;
    uint64_t at;
  } *rcq;
  uint32_t rcq_n, rcq_cap;
  rr_status broken;   /* the endpoint broke (takes effect at broken_at) */
  uint64_t broken_at;
  int invalidated;    /* verbs: an invalidation killed it */
  int attached;       /* handed to its engine */
  uint64_t last_rx_ns, last_ack_ns;
} sim_ep;

/* One connected path between a sender endpoint and a receiver endpoint on
 * one rail. wire[s] holds what side s transmitted, per stream, in order. */
struct sim_pair {
  int rail, kind, nstreams;
  uint32_t id;
  sim_ep *ep[2];
  sim_queue wire[2][SIM_MAX_STREAMS];
  uint64_t last_arrive[2][SIM_MAX_STREAMS];
  uint64_t closed_at[2]; /* side s destroyed its endpoint at this time (0: open) */
  int mute;              /* lost for good: drops everything, reports nothing */
  uint64_t stall_until;  /* delivers nothing before this */
  sim_pair *next;
};

typedef struct sim_path {
  int up;
  uint64_t down_since;
  int nic_down[2];       /* reported down to that end's health module */
} sim_path;

enum sim_ev_kind {
  SIM_EV_REPLACE = 1,    /* the receiver's listener installs a reconnected endpoint */
  SIM_EV_PATH_DOWN,      /* arg: flags SIM_PD_* */
  SIM_EV_PATH_UP,
  SIM_EV_BREAK_BOTH,     /* the current pair fails at both ends at once */
  SIM_EV_MUTE,           /* the current pair goes silent for good (everything in flight lost) */
  SIM_EV_STALL,          /* the current pair delivers nothing for arg ns */
  SIM_EV_PEER_DEATH,     /* arg: the side whose process dies */
  SIM_EV_ALL_DOWN,       /* every path down for good */
};
#define SIM_PD_NIC_SEND 1u  /* the sender's NIC reports the link down */
#define SIM_PD_NIC_RECV 2u
#define SIM_PD_BREAK 4u     /* the endpoints fail at both ends at once */

typedef struct sim_event {
  uint64_t at;
  int kind, rail;
  uint64_t arg;
  sim_ep *ep;
} sim_event;

#define SIM_MAX_EVENTS 256

typedef struct sim_stats {
  uint64_t seeds, failed, rollbacks, violations, reconnects, ctrl_dups, splits, mid_invalidations, errors_expected,
      garbled, writes, ctrls, steps, vtime_ms, sink_writes, placed_sends, claims,
      group_writes, split_writes, acks_held; /* writes of several chunks; of which split (adaptive routing) */
} sim_stats;

typedef struct sim_world {
  uint64_t seed;
  sim_rng rng;
  int verbose;
  int failed;
  char fail_why[512];

  int nrails;
  int kind[SIM_MAX_RAILS];
  int nstreams[SIM_MAX_RAILS];
  int placed[SIM_MAX_RAILS];    /* verbs-like: RR_RAIL_CAP_WRITE_DONE_PLACED (completion = placement) */
  /* verbs-like: rr_rail_dev_attr.write_max (bytes one write may carry: a
   * group of chunks; 0 one chunk) and RR_RAIL_CAP_ADAPTIVE_ROUTING (groups
   * above ar_threshold go split: a plain write and a write with immediate). */
  uint32_t write_max[SIM_MAX_RAILS];
  int ar[SIM_MAX_RAILS];
  uint64_t ar_threshold;
  uint64_t rcq_lag_ns;          /* longest a placed write's arrival waits to be polled */
  uint64_t lat_ns[SIM_MAX_RAILS], jitter_ns[SIM_MAX_RAILS];
  uint32_t sq_depth;            /* writes an endpoint queues before RR_AGAIN */
  size_t window;                /* bytes a stream holds in flight, unread by the peer (flow control) */
  uint64_t verbs_retry_ns;      /* a verbs pair whose path stays down this long breaks */
  unsigned dup_pm, delay_pm, split_pm, midinvalidate_pm; /* per-mille fault rates */
  unsigned recv_post_pm;     /* chance per receiver step to post a receive (a slow receiver lets eager messages come first) */
  unsigned garble_pm;           /* control messages garbled in flight (reserved header bits set) */
  uint64_t garbled;             /* garbled messages sent: the violations they may cause */
  unsigned wdelay_pm;           /* writes delayed in flight (whatever follows on their stream waits) */
  uint64_t delay_max_ns;        /* the longest extra delay of a control message or write */
  int reconnect;                /* the sender reopens failed rails */
  uint64_t chaos_end_ns;
  int expect_error;             /* peer death or all paths down */
  uint64_t error_at_ns;         /* when that fault struck */
  int dead[2];                  /* that side's process died */
  int all_down;                 /* every path is down for good */

  rr_engine eng[2];
  int eng_live[2];
  sim_dev *dev[2][SIM_MAX_RAILS];
  sim_path path[SIM_MAX_RAILS];
  sim_pair *cur[SIM_MAX_RAILS]; /* the newest pair of each rail */
  sim_pair *pairs;
  uint32_t next_pair_id;
  int reconnect_wait[SIM_MAX_RAILS]; /* calls an attempt in progress still answers RR_AGAIN */

  sim_event ev[SIM_MAX_EVENTS];
  int nev;

  int activity;                 /* something moved during this step */
  uint64_t last_rollbacks;      /* receiver rollbacks seen (flaps are scheduled after new ones) */
  sim_stats st;
} sim_world;

extern uint64_t sim_now_ns;

void sim_trace(sim_world *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sim_fail(sim_world *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sim_event_add(sim_world *w, uint64_t at, int kind, int rail, uint64_t arg, sim_ep *ep);
/* Whether a fault keeping rail r unusable over [start, end) (or for good)
 * leaves the connection a usable rail; records it when it does. */
int sim_fault_ok(sim_world *w, int r, uint64_t start, uint64_t end, int permanent);
/* How long a break keeps a rail unusable (detection and reconnect). */
uint64_t sim_loss_span(sim_world *w);

/* sim_faults.c */
void sim_schedule_faults(sim_world *w);
void sim_run_event(sim_world *w, const sim_event *ev);
/* After a new rollback during the chaos window, maybe flap a rail. */
void sim_maybe_flap(sim_world *w);
void sim_nic_set(sim_world *w, int side, int rail, int down);
/* The sender's cfg.reconnect. */
rr_status sim_reconnect(void *arg, int rail, rr_rail_ep **out);

/* sim_rail.c */
extern const rr_rail_ops sim_rail_ops_tcp, sim_rail_ops_verbs;
sim_dev *sim_dev_open(sim_world *w, int side, int rail, int kind);
void sim_dev_close(sim_dev *d);
/* A fresh connected pair on rail r; both endpoints point at their engines. */
sim_pair *sim_pair_new(sim_world *w, int rail);
void sim_pair_break(sim_world *w, sim_pair *p, rr_status st, uint64_t at, const char *why);
void sim_pair_mute(sim_world *w, sim_pair *p, const char *why);
void sim_pair_close_side(sim_world *w, sim_pair *p, int side);
/* Earliest arrival still pending anywhere (UINT64_MAX: none). */
uint64_t sim_next_arrival(sim_world *w);
void sim_pairs_free(sim_world *w);
int sim_pair_quiet(const sim_pair *p);

/* sim_describe.c: for the trace, into buf (n bytes), which they return. */
const char *sim_imm_str(char *buf, size_t n, const rr_write_hdr *h);
const char *sim_ctrl_str(char *buf, size_t n, const void *msg, uint32_t len);

/* sim_traffic.c */
void sim_traffic_init(sim_world *w);
void sim_traffic_setup_mrs(sim_world *w);
void sim_traffic_free_mrs(sim_world *w);
/* One NCCL proxy iteration for that side. */
void sim_traffic_step(sim_world *w, int side);
int sim_traffic_done(sim_world *w);
/* A side still has something it waits for (requests outstanding or to post). */
int sim_traffic_busy(sim_world *w, int side);
int sim_traffic_errored(sim_world *w, int side);
/* Engine-level outstanding requests of that side. */
int sim_traffic_outstanding(sim_world *w, int side);
uint64_t sim_traffic_last_progress(sim_world *w);
/* Whether a write from [p, p+len) may be posted now: not from a send
 * buffer NCCL already got back (a completed send must never be replayed). */
int sim_traffic_source_ok(sim_world *w, const void *p, size_t len);
/* The message whose send buffer holds p, -1 when none does (a bounce copy). */
int sim_traffic_source_msg(sim_world *w, const void *p);
/* Whether message mi's send buffer is still NCCL's to lend (not reported done). */
int sim_traffic_send_live(sim_world *w, int mi);
/* Whether [p, p+len) lies inside a receive posted and not yet reaped. */
int sim_traffic_landing_ok(sim_world *w, const void *p, size_t len);
void sim_traffic_summary(sim_world *w, char *buf, size_t len);
/* For the trace: which receive buffer p falls in, and whose it is now. */
void sim_traffic_where(sim_world *w, const void *p, char *buf, size_t len);

#endif
