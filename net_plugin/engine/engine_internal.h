/* The engine's internals, shared by its files: the rr_engine struct, its
 * rails and requests, and the helpers one engine file calls in another.
 * engine.h is the API (what the core calls, and what the engine is); the
 * code outside net_plugin/engine that includes this header says why. */
#ifndef RERAIL_ENGINE_INTERNAL_H
#define RERAIL_ENGINE_INTERNAL_H
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "engine_inbound.h"
#include "engine_phase.h"
#include "engine_wire.h"
#include "rail.h"

/* Rail states. DEAD is final (the endpoint broke); DOWN may heal. */
typedef enum rr_rail_state {
  RR_RAIL_ACTIVE = 0,       /* carries traffic */
  RR_RAIL_DOWN,             /* failed: link down, silent, or the peer said so */
  RR_RAIL_RECOVERING,       /* signs of life again: on probation (hysteresis) */
  RR_RAIL_DEAD,             /* the endpoint broke: never used again */
  /* Demoted (sender's measurement, engine_gray.c): up, but delivering a
   * fraction of what it should. Carries no traffic, stays connected, is
   * probed, and returns like a healed rail. */
  RR_RAIL_DEGRADED,
  RR_RAIL_NSTATES
} rr_rail_state;

typedef struct engine_rail {
  rr_rail_ep *ep;
  rr_rail_state state;
  rr_status cause;          /* DEAD: what broke the endpoint (RR_ERR_PEER: the peer closed it) */
  int weight;               /* relative bandwidth (link speed), for balance */
  uint64_t state_since_ns;
  uint64_t watch_since_ns;  /* silence is judged from here (reset when work starts) */
  uint64_t last_alive_ns;   /* cached rr_rail_ops.last_alive_ns */
  uint64_t last_probe_ns;
  int life_slot;            /* its link in rr_link_lives (link_life.h); -1: none, the table was full */
  engine_inbound in;        /* receiver: what its invitations should bring over it */
  uint64_t healthy_since_ns;/* RECOVERING: continuous signs of life since */
  uint32_t recent_failures; /* for the fail-back hold's backoff */
  uint64_t last_failure_ns;
  double vtime;             /* balance: bytes placed on this rail / weight */
  uint64_t last_reconnect_ns;/* sender: when the last reconnect attempt began */
  int reconnecting;         /* sender: an attempt is under way */
  int fresh;                /* reconnected and not yet seen alive */
  int heard;                /* the peer showed life on it since it was made */
  int need_drain;           /* receiver: writes of an older epoch may still land on it */
  int invalidated;          /* its current endpoint was invalidated (nothing more lands through it) */
  uint32_t drain_posted;    /* sender: the epoch of the last drain barrier posted on it */
  /* Sender: writes posted on its current endpoint whose completion has not
   * come, of this epoch and of older ones. An invalidation or a new endpoint ends
   * them all (nothing reads their source after). An old one may sit in a
   * verbs QP whose peer end was invalidated, not drained: see ack_completes(). */
  uint32_t writes_cur, writes_old;
  uint64_t swapped_ns;      /* when its current endpoint was installed (0: at connect) */
  char ifname[16];          /* local NIC */
  char name[80];            /* "rail1 (eth1 -> 10.0.1.2)" for messages */
  char why[64];             /* why it went down */
  char peer_addr[48];       /* the remote address (the gray-failure table's key, with the NIC) */
  int where;                /* rr_fault_where of its last failure or demotion */
  int where_hint;           /* the caller's knowledge for the next transition (0: classify) */
  /* Gray failures (engine_gray.c). Sender: bytes posted on it, and at the
   * last tick the bytes posted and the rail's backlog then. */
  uint64_t g_posted, g_prev_posted;
  size_t g_prev_backlog;
  int g_prev_loaded;
  int g_prev_flushed;
  uint64_t g_prev_ns;
  /* A latency sample (gray_latency.h) under way: posted onto the idle rail
   * around g_lat_t0 (0: none), g_lat_bytes of it, g_posted then. */
  uint64_t g_lat_t0, g_lat_bytes, g_lat_posted;
  uint64_t probe_start_ns;  /* DEGRADED: the probe in flight began (0: none) */
  uint64_t probe_bytes;
  uint64_t probe_done_ns;   /* when the last probe ended */
  rr_rail_path_stats g_path;/* the transport's totals at the last reading (RR_RAIL_CAP_PATH_STATS) */
  uint64_t g_path_ns;       /* when they were read (0: not yet in this state) */
  rr_rail_path_stats probe_path; /* DEGRADED: the totals when the probe in flight began */
  int probe_path_ok;        /* they could be read */
  /* Demoted, and held so across reopens of its endpoint until probes
   * restore it (or its NIC's link goes down: then it is judged afresh). A
   * rail whose invalidation resets the endpoint (verbs) is invalidated when demoted, so
   * nothing it queued of the old epoch lands later, and reopened: the fresh
   * endpoint comes back DEGRADED, not ACTIVE, and is probed. Both ends keep
   * it (the sender's notices name it degraded meanwhile). */
  int g_demoted;
  /* Demoted, on a transport whose invalidation keeps the endpoint (TCP), and
   * its endpoint holds what the fault left behind: a probe that timed out
   * (its bytes queued behind a long retransmission timeout), or, once probes
   * restored the link, bytes still unsent or unacknowledged since
   * g_stale_since. It gets a fresh endpoint, as a verbs rail gets a fresh
   * queue pair (engine_gray_needs_reopen); swapping one in clears this. A
   * reopen is waited for RR_GRAY_REOPEN_WAIT_NS at most (gray_reopen_bound):
   * one over the lossy path itself can fail attempt after attempt, and
   * meanwhile the rail is neither probed nor restored. */
  int g_reopen;
  uint64_t g_reopen_since;  /* g_reopen was asked then */
  uint64_t g_reopen_gave_up;/* a reopen waited too long then (0: none): the rail is probed and
                             * restored on the endpoint it has for a while after */
  uint64_t g_stale_since;   /* restorable, but bytes unsent or unacknowledged since (0: none) */
  double degraded_frac;     /* what it delivered, as a fraction of its healthy level */
  uint64_t degraded_for_ns; /* for how long it had delivered that little when demoted */
} engine_rail;

typedef struct rr_send_req {
  uint8_t kind;             /* RR_REQ_SEND */
  uint8_t in_use;
  uint8_t user_done;        /* NCCL has been told it is done */
  uint8_t acked;
  uint8_t sub;
  uint8_t eager;            /* sent before its clear-to-send: sub, raddr and rkey not known yet */
  uint8_t nic_only;         /* GPU memory at either end: only rails whose NIC registered both
                             * buffers carry it (a local registration, a non-zero key) */
  uint8_t parked;           /* accepted, but the receive it was sent to has no buffer with its
                             * tag: it waits, unsent, for the receive it belongs to (seq unset) */
  uint32_t known;           /* eager: the sender's known_seq when it chose seq (the frame carries it) */
  int8_t rail;              /* chain mode: the rail this message uses, -1 before its first chunk */
  int16_t bounce;           /* bounce buffer index, -1 when none */
  rr_engine *engine;
  uint32_t seq;
  int tag;
  const char *data;         /* user buffer, or the bounce buffer */
  size_t size;
  const rr_mr *mr;          /* NULL for a bounced message */
  uint64_t raddr;
  uint32_t rkey[RR_MAX_RAILS]; /* the receive buffer's key on each rail */
  uint32_t nchunks, posted, transmitted; /* posted/transmitted count the current epoch from its replay point */
  /* Of those, the chunks known to be in the receiver's memory: the replay
   * point's, and each write of this round whose completion came on a rail
   * with RR_RAIL_CAP_WRITE_DONE_PLACED. All of them: the send is placed,
   * NCCL gets its buffer back, and it is never written again (a rollback
   * claims it instead: ENGINE_CTRL_PLACED). */
  uint32_t placed;
  uint16_t gen;             /* its round: bumped at every rewind and reuse; in wr_id, so a completion
                             * of an earlier round's write is not counted in this one */
  uint8_t ack_only;         /* a write of an earlier round was still in flight at a rewind: it may
                             * read NCCL's buffer yet, so only the receiver's ack completes the send */
  uint8_t held;             /* acked, and held back for such a write (counted once: acks_held) */
  uint8_t claim_owed;       /* placed, and the receiver's last rollback may not know it: a PLACED
                             * claim must go */
  uint8_t resumed;          /* a RESUME_SLOT of resumed_epoch named it (each is obeyed once) */
  uint32_t resumed_epoch;
  void *prof_event;         /* NCCL profiler event, NULL when none */
} rr_send_req;

typedef struct rr_recv_sub {
  char *data;
  size_t posted_size;
  size_t size;              /* as sent, known once the last chunk landed */
  uint32_t max_chunks;      /* chunks the posted size allows */
  uint32_t expected;        /* chunk count, 0 until the last chunk landed */
  uint32_t prefix;          /* chunks [0, prefix) have all landed */
  uint32_t high;            /* one past the highest chunk landed in this epoch */
  /* Bit k: chunk k landed in this epoch (or before the prefix). Exact for
   * every chunk the posted size allows, so a repeat is always recognised.
   * Kept across receives of the slot and grown when needed. */
  uint64_t *seen;
  uint32_t seen_words;
} rr_recv_sub;

typedef struct rr_recv_req {
  uint8_t kind;             /* RR_REQ_RECV */
  uint8_t in_use;
  uint8_t n;
  uint8_t complete;         /* every chunk of every sub-receive landed */
  uint8_t subs_done;
  uint8_t ack_now;          /* the sender waits for our ack: send it at once */
  uint8_t landed;           /* every chunk is here; complete once the rails are drained */
  uint8_t cts_held;         /* its clear-to-send waits for an eager message until cts_due_ns */
  uint64_t cts_due_ns;
  rr_engine *engine;
  uint32_t seq;
  engine_cts cts;           /* as sent, for a resend after a rollback */
  void *prof_event[RR_NET_MAX_RECVS]; /* NCCL profiler events, NULL when none */
  rr_recv_sub sub[RR_NET_MAX_RECVS];
} rr_recv_req;

/* A message that came eagerly before its receive was posted (receiver). */
enum { EARLY_EMPTY = 0, EARLY_ARRIVING, EARLY_HERE };
#define EARLY_COPIES 2            /* per slot: see engine_recv.c */
typedef struct engine_early {
  uint8_t state;            /* EARLY_EMPTY, EARLY_ARRIVING (its bytes are landing), EARLY_HERE */
  uint32_t seq, epoch, len;
  uint32_t known;           /* the sender's known_seq: receives [known, seq) were assumed to take one message */
  int tag;
} engine_early;

typedef struct engine_cts_slot {
  uint8_t valid;
  uint8_t matched;          /* bitmask of sub-receives an isend has taken */
  engine_cts cts;
} engine_cts_slot;

/* Engine-wide counters (read under the lock; for tests and telemetry). */
typedef struct rr_engine_stats {
  uint64_t violations;      /* protocol violations that failed a rail */
  uint64_t rollbacks;       /* epochs started (receiver) or adopted (sender) */
  uint64_t closes_owed;     /* our closes that gave up with something owed undelivered */
  uint64_t parked;          /* sender: eager messages parked (sent to a receive without their tag) */
  uint64_t demotions;       /* rails demoted as degraded (this end's view) */
  /* Sends completed towards NCCL on their writes' placement, before any
   * ack (sender); sub-receives completed on a PLACED claim (receiver). */
  uint64_t placed_sends, claims_taken;
  uint64_t bad_transitions; /* rollback phase changes not in engine_phase.c's tables (a bug) */
  /* Sender: acked sends held back from NCCL while an older epoch's write
   * was still outstanding on an endpoint we had not invalidated (invariant 8). */
  uint64_t acks_held;
} rr_engine_stats;

#define RR_SEND_POOL (RR_NET_MAX_REQUESTS * RR_NET_MAX_RECVS)
#define RR_SEND_CHUNK 32
/* Bounce buffers per send end: NCCL's proxy keeps at most NCCL_STEPS (8)
 * sends in flight on a connection (more only when channels share a comm),
 * so 8 cover every small send in the usual case; one that finds none free
 * goes from NCCL's buffer and completes on placement or ack, as a larger one
 * does. On verbs the arena is registered on every NIC of the connection
 * (a failover registers nothing): 32 of them pinned 256 KiB per connection
 * with a backup, 1.6x what NCCL's IB transport pins per side. */
#define RR_BOUNCE_COUNT 8
#define RR_BOUNCE_SIZE 4096

/* The fields only a sender uses (rr_engine.snd; engine_snd). */
typedef struct engine_sender {
  /* NCCL's last isend was refused for want of a clear-to-send: the
   * connection waits on the peer, which is being busy (a peer that stopped
   * answering must fail the send, not leave NCCL retrying forever). */
  uint8_t cts_wanted;
  engine_cts_slot *cts;     /* RR_NET_MAX_REQUESTS */
  uint32_t send_seq;        /* the receive the next isend matches */
  /* Receives [known_seq, send_seq) each took one eager message on the
   * assumption that it takes only one (n = 1): their clear-to-sends, or
   * acks, have not said yet. Below known_seq every receive's shape is
   * known. A message that needs a clear-to-send waits until none is
   * assumed; a receive found to take more moves the later eager messages
   * (docs/protocol.md, "Eager writes"). */
  uint32_t known_seq;
  uint32_t implied_mask;    /* by slot: an ack says the assumed receive took just its eager message */
  int assumed_tag;          /* the tag of every eager message assumed in [known_seq, send_seq) */
  int nparked;              /* requests parked (rr_send_req.parked) */
  /* Send requests, RR_SEND_CHUNK at a time as needed (engine_sreq): the
   * pool may hold every request the protocol allows, and a connection
   * rarely has more than a few in flight. */
  rr_send_req *sreq_chunk[RR_SEND_POOL / RR_SEND_CHUNK];
  uint32_t sreq_cap;        /* requests allocated */
  uint16_t *fifo;           /* RR_SEND_POOL: active sends in posting order */
  uint32_t fifo_head, fifo_tail, fifo_post; /* post: first entry that may have unposted chunks */
  char *bounce;             /* RR_BOUNCE_COUNT * RR_BOUNCE_SIZE, allocated on first use */
  int16_t bounce_free[RR_BOUNCE_COUNT];
  int nbounce_free;
  rr_send_phase send_phase; /* the rollback's phase (engine_phase.c) */
  int claims_owed;          /* requests whose claim_owed is set */
  uint64_t resume_wait_since_ns;
  uint64_t stall_start_ns;  /* when the failure that caused the current rollback was seen */
  uint64_t no_carrier_since_ns; /* a GPU message has found no rail up that can carry it since (0: none) */
  int down_notice_pending;  /* a rail that carried no traffic failed; tell the receiver */
  uint8_t restore_notice;   /* a demoted rail is back: the next DOWN goes even if it names none */
  uint32_t resume_got;      /* slots whose RESUME_SLOT of this epoch arrived */
  uint32_t fail_epoch;      /* the epoch its FAIL names (lost in, or waits to leave) */
  rr_rail_mr *bounce_reg[RR_MAX_RAILS]; /* the bounce arena on each rail's device */
} engine_sender;

/* The fields only a receiver uses (rr_engine.rcv; engine_rcv). */
typedef struct engine_receiver {
  int urgent;               /* a queued control message must leave before we return */
  int ctrl_queued;          /* control messages wait in a rail queue for the next progress */
  rr_recv_req *rreq;        /* RR_NET_MAX_REQUESTS */
  uint32_t recv_seq;        /* sequence number of the next irecv */
  /* Eager messages for receives not posted yet, by slot (allocated on first use). */
  char *early_buf;          /* RR_NET_MAX_REQUESTS * EARLY_COPIES * RR_BOUNCE_SIZE */
  engine_early early[RR_NET_MAX_REQUESTS * EARLY_COPIES];
  uint8_t peer_eager;       /* the sender's last message came eagerly: hold clear-to-sends a while */
  int cts_held;             /* receives whose clear-to-send is held */
  int notice_rail;          /* the rail that carried the last notice sent with no rail up */
  /* Completed receives not yet acknowledged: at most one per receive slot
   * (a slot is reposted only after its clear-to-send, which flushes them). */
  uint32_t ack_queue[RR_NET_MAX_REQUESTS];
  uint32_t ack_head, ack_pending;
  uint64_t ack_since_ns;    /* when the oldest of them completed */
  int ack_flush;            /* the sender waits on one of them: acknowledge at once */
  uint64_t ack_due_ns;      /* one the sender waits on leaves by then (0: none waits) */
  uint32_t resume_recv_seq; /* recv_seq when the current rollback began */
  rr_recv_phase recv_phase; /* the announcement's phase (engine_phase.c) */
  uint32_t announce_slot;   /* ANNOUNCING: the next slot to look at (< RR_NET_MAX_REQUESTS) */
  uint32_t resume_mask;     /* slots this rollback's RESUME_SLOTs named so far */
} engine_receiver;

struct rr_engine {
  rr_engine_config cfg;
  /* guards: the whole engine (every field but last_progress_ns and idle_hint); NCCL's threads take it in
   * every call, the monitor only tries it. Never two engines' at once (docs/locking.md). */
  pthread_mutex_t lock;     /* NCCL's threads and the background thread share the engine */
  rr_status failed;         /* sticky failure: every later call reports it */
  char failed_why[256];
  uint32_t epoch;
  /* Lock-free: stored by whoever drives the engine, read by the monitor without the lock
   * to leave engines NCCL drives alone. */
  _Atomic uint64_t last_progress_ns; /* when anybody last drove this engine (read unlocked) */
  /* rr_engine_idle_background's verdict at the end of the last drive, for
   * the monitor to skip an idle engine without touching more of it than
   * this cache line (it looks at thousands every 5 ms). Cleared by every
   * entry that can give the engine something to do outside a drive (isend,
   * irecv, a rail replaced); a link change wakes engines anyway. */
  _Atomic int idle_hint;
  uint64_t last_tick_ns;    /* last health check (coarse clock) */
  uint64_t last_work_ns;    /* last progress with work outstanding or a word from the peer (coarse; 0: never) */
  uint8_t peer_spoke;       /* a message or write from the peer was read since the last progress */
  uint64_t no_rail_since_ns;/* no ACTIVE rail since (0 = there is one) */
  uint64_t no_rail_life_ns; /* then: the last time any rail was seen working */
  int busy;                 /* outstanding requests at the last tick */

  int nrails;
  engine_rail rails[RR_MAX_RAILS];
  int fail_notice_pending;  /* a FAIL message still has to be posted (either end) */
  uint64_t down_notice_ns;  /* when the peer was last reminded of rails waiting to be reopened */

  /* What only one role uses, by role (cfg.role): reached through
   * engine_snd/engine_rcv, which check the role. The request pools are
   * allocated for the engine's role only (rr_engine_init): a job holds
   * thousands of connections (docs/memory_per_connection.md). */
  union {
    engine_sender snd;
    engine_receiver rcv;
  };

  /* Orderly close (engine_close.c). */
  uint8_t closing;          /* rr_engine_close is under way: no rail is reopened */
  uint8_t bye_sent;         /* our BYE is posted: everything we owed went before it */
  uint8_t peer_bye;         /* the peer's BYE arrived: its rails closing next are the end */
  uint8_t bye_warned;       /* a request the peer's close left unanswered was reported */
  uint32_t peer_bye_seq;    /* the peer's next send (or receive) sequence number at its BYE */

  rr_engine_stats stats;
  char violation_why[96];   /* the first violation, for the log */
};

/* An engine is one end of a connection, a sender or a receiver for its
 * whole life (rr_engine_config.role). Code that serves both ends asks
 * engine_is_sender/engine_is_receiver where their behaviour differs, and
 * reaches a field that only one role uses through engine_snd/engine_rcv:
 * in a build with assertions (the CI's sanitizer build, and the simulation
 * in it) a wrong-role access stops there. */
static inline int engine_is_sender(const rr_engine *e) { return e->cfg.role == RR_ENGINE_SEND; }
static inline int engine_is_receiver(const rr_engine *e) { return e->cfg.role == RR_ENGINE_RECV; }
/* The end in messages: "send" or "receive" for the connection, "send" or
 * "recv" in a rail's lines and health reasons (short: they share a field). */
static inline const char *engine_role_word(const rr_engine *e) { return engine_is_sender(e) ? "send" : "receive"; }
static inline const char *engine_role_abbr(const rr_engine *e) { return engine_is_sender(e) ? "send" : "recv"; }
#define engine_snd(e) (assert(engine_is_sender(e)), &(e)->snd)
#define engine_rcv(e) (assert(engine_is_receiver(e)), &(e)->rcv)

/* Send request idx (< sreq_cap). */
static inline rr_send_req *engine_sreq(const rr_engine *e, uint32_t idx) {
  return &engine_snd(e)->sreq_chunk[idx / RR_SEND_CHUNK][idx % RR_SEND_CHUNK];
}
/* Room for another RR_SEND_CHUNK send requests (engine.c). */
rr_status engine_sreq_grow(rr_engine *e);

/* ---- shared between the engine's files ---------------------------------- */

rr_status engine_fail(rr_engine *e, rr_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* One pass: rails, health, outbox. Caller holds the lock. */
rr_status engine_progress(rr_engine *e);
int engine_control_rail(const rr_engine *e);
int engine_outstanding(const rr_engine *e);

/* engine_prof.c: NCCL profiler events (net v10+), one per message from post
 * to completion, in the descriptor NCCL's own transport of that kind uses
 * (socket or IB), so stock profiler plugins decode them. */
enum { ENGINE_PROF_SEND = 0, ENGINE_PROF_RECV = 1 };
/* Room for any of NCCL's descriptors, aligned as they are. */
typedef union engine_prof_descr {
  uint64_t align;
  unsigned char bytes[48];
} engine_prof_descr;
/* Fill *out with the descriptor of a message of `length` bytes (sequence
 * number seq, direction ENGINE_PROF_*) posted on ep (NULL: none), in NCCL's
 * layout; returns the plugin id that names that layout. */
int64_t engine_prof_describe(const rr_rail_ep *ep, int op, uint32_t seq, size_t length,
                             engine_prof_descr *out);
void engine_prof_start(rr_engine *e, void **event, void *phandle, int op, uint32_t seq,
                       size_t length);
void engine_prof_stop(rr_engine *e, void **event);

/* engine_close.c */
/* The peer's BYE arrived. */
rr_status engine_on_bye(rr_engine *e, const engine_msg *m);
/* Every rail is closed after the peer's BYE: the connection ended in order.
 * What this end still waits on is reported once, as the peer's close. */
void engine_closed_by_peer(rr_engine *e);
/* A request the peer's orderly close leaves unfinished: say so once. */
void engine_report_unanswered(rr_engine *e, const char *what, uint32_t seq);

/* engine_rails.c */
void engine_rails_tick(rr_engine *e, uint64_t now);
void engine_rail_set_state(rr_engine *e, int r, rr_rail_state st, const char *why);
void engine_rail_set_state_seen(rr_engine *e, int r, rr_rail_state st, const char *why, engine_rail_seen seen);
void engine_rail_swap(rr_engine *e, int r, rr_rail_ep *ep); /* caller holds the lock */
uint32_t engine_down_mask(const rr_engine *e);
/* Rails given up on: DEAD, or DOWN and neither fresh nor reopened within δ
 * (a reopened rail the peer may already use is not reported). */
uint32_t engine_given_up_mask(const rr_engine *e, uint64_t now);
int engine_rail_usable(const rr_engine *e, int r);
/* The fail-back hold of rail rl now: doubled for each recent failure. */
uint64_t engine_rail_hold_ns(const rr_engine *e, const engine_rail *rl);

/* What a peer broke, for the per-kind counter (rr_counters' family
 * protocol_violations_total{kind}): an operator, or a test, sees which check
 * refused without reading the log. */
typedef enum engine_violation_kind {
  ENGINE_VIOL_NO_RECEIVE,  /* a write for a slot with no posted receive */
  ENGINE_VIOL_CHUNK_INDEX, /* a chunk index outside the receive, past its last, or a last one too early */
  ENGINE_VIOL_LENGTH,      /* a chunk or probe write of a length its place cannot have */
  ENGINE_VIOL_DUPLICATE,   /* a chunk or eager message twice in one epoch */
  ENGINE_VIOL_KEY,         /* a write with a key the receive does not have on that rail */
  ENGINE_VIOL_ADDRESS,     /* a write to an address its chunk does not have */
  ENGINE_VIOL_MALFORMED,   /* a control message or eager write that does not decode */
  ENGINE_VIOL_WINDOW,      /* a sequence number outside the window of receives (eager, clear-to-send, claim) */
  ENGINE_VIOL_CLAIM,       /* a placement claim for no sub-receive, too large, or against what landed */
  ENGINE_VIOL_DIRECTION,   /* data or a control message the connection's role never receives */
  ENGINE_VIOL_EPOCH,       /* a failure notice from an epoch not yet begun */
  ENGINE_VIOL_OVERFLOW,    /* more early copies of one message than the early buffer holds */
  ENGINE_VIOL_KINDS
} engine_violation_kind;

/* A rail carried something that breaks the protocol: record it, counted by
 * kind (the caller returns RR_ERR_PROTOCOL, which fails that rail over,
 * never the job). */
rr_status engine_violation(rr_engine *e, int rail, engine_violation_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Encode and post a control message on the control rail (the lowest
 * ACTIVE): RR_AGAIN when it cannot go now; a rail that refuses it for good
 * goes DEAD. engine_post_msg_on posts on one given endpoint. */
rr_status engine_post_msg(rr_engine *e, const engine_msg *m);
rr_status engine_post_msg_on(rr_rail_ep *ep, const engine_msg *m);
/* Rails invalidated at a rollback: every rail whose invalidation is cheap and keeps the
 * endpoint (RR_RAIL_CAP_INVALIDATE_KEEPS_EP), besides the failed one. */
int engine_rail_invalidate_cheap(const rr_engine *e, int r);

/* engine_gray.c: gray failures (slow or lossy rails that stay up) */
/* Sender, once per tick per rail: measure, demote, probe, restore. */
void engine_gray_tick(rr_engine *e, int r, uint64_t now);
/* Rail r of e went from old to st (every transition, and a reopen): links
 * towards the same peer host are not judged until traffic settles, and a
 * hard event forgets what was judged of r's link. Caller holds e's lock. */
void engine_gray_on_state(rr_engine *e, int r, rr_rail_state old, rr_rail_state st, uint64_t now);
/* A failure notice (FAIL or DOWN) naming down_mask, qualified with what
 * this end knows: which of those rails are demoted, which fail here. */
engine_msg engine_notice(const rr_engine *e, uint8_t type, uint32_t epoch, uint32_t down_mask);
/* The peer's notice: where its qualifications place our rails' faults.
 * Sets where_hint for the transitions the notice causes. */
void engine_notice_where(rr_engine *e, const engine_msg *m);
/* Sender: rail r, ACTIVE, has been silent for δ. If its link was in a run
 * of slow windows (a trickle: a rate limit on RoCE delivers in bursts, and
 * a pause between them can outlast δ), or in a run of bad latency samples
 * (a delayed path whose requests outlast δ), with a delivery lately, it is
 * demoted instead of failed, so it is probed back rather than reopened into
 * traffic and failed again, over and over. Returns 1 when it was demoted. */
int engine_gray_demote_silent(rr_engine *e, int r, uint64_t now);
/* Sender: rail r is demoted and its endpoint was invalidated for good (verbs),
 * or holds what the fault left in it (g_reopen: TCP): it needs a fresh one
 * (reopened like a failed rail, it comes back demoted). */
int engine_gray_needs_reopen(const rr_engine *e, int r);
/* Is rail r's move from old to st a demotion going on rather than a new
 * fault: a demoted rail's endpoint ending (DEGRADED to DEAD: a verbs
 * invalidation), or its fresh endpoint held demoted (DOWN or RECOVERING to
 * DEGRADED)? Its health event then carries no `where`. */
int engine_gray_demotion_goes_on(const rr_engine *e, int r, rr_rail_state old, rr_rail_state st);
/* Receiver: the sender's notice demotes and restores rails. */
void engine_gray_on_notice(rr_engine *e, const engine_msg *m);
/* A probe write arrived (receiver): RR_OK to discard it, or a violation. */
rr_status engine_gray_probe_begin(rr_engine *e, int rail, const rr_write_hdr *h);
#define ENGINE_PROBE_WR_ID UINT64_MAX
#define ENGINE_PROBE_MAX_WRITE RR_WRITE_PROBE_MAX /* the receiver refuses larger probe writes */

/* engine_send.c (engine_phase.h: the rollback's phases) */
/* Posting waits for a rollback's announcement. */
static inline int engine_send_holding(const rr_engine *e) { return engine_snd(e)->send_phase != RR_SEND_STREAMING; }
/* now: the caller's clock reading, or 0 to read it when a chunk is posted. */
rr_status engine_send_post(rr_engine *e, uint64_t now);
rr_status engine_send_on_msg(rr_engine *e, int rail, const engine_msg *m);
/* placed: the rail has RR_RAIL_CAP_WRITE_DONE_PLACED. */
rr_status engine_send_on_write_done(rr_engine *e, int rail, uint64_t wr_id, int placed);
void engine_send_rail_lost(rr_engine *e, engine_rail_seen seen);
rr_status engine_send_test(rr_send_req *r, int *done, size_t *sizes);
/* engine_send_rails.c: the rail that carries r's next chunk (-1: none
 * can now); how many chunks from there one write on rail ri carries; and
 * what no carrier means (RR_OK: wait; a GPU message nobody registered
 * fails once the connection's bound passed). */
int engine_send_pick_rail(rr_engine *e, rr_send_req *r);
uint32_t engine_send_group_chunks(rr_engine *e, rr_send_req *r, int ri);
rr_status engine_send_no_carrier(rr_engine *e, const rr_send_req *r, uint64_t now);

/* engine_recv.c */
rr_status engine_recv_write_begin(rr_engine *e, int rail, rr_write_hdr *h, void **dst);
rr_status engine_recv_write(rr_engine *e, int rail, const rr_write_hdr *h);
rr_status engine_recv_on_msg(rr_engine *e, int rail, const engine_msg *m);
rr_status engine_recv_on_drain(rr_engine *e, int rail, uint32_t epoch);
rr_status engine_recv_outbox(rr_engine *e);
/* Complete the receives that wait only for drains that are no longer owed. */
void engine_recv_check_landed(rr_engine *e);
void engine_recv_rollback(rr_engine *e, rr_recv_cause cause);
rr_status engine_recv_test(rr_recv_req *r, int *done, size_t *sizes);
/* engine_recv_acks.c: a completed receive's ack queued (deferred and
 * coalesced); every queued ack posted (RR_OK also when no rail takes them
 * now: they stay queued); whether the queue is due to leave now. */
void engine_recv_ack_enqueue(rr_engine *e, uint32_t seq);
rr_status engine_recv_acks_flush(rr_engine *e);
int engine_recv_acks_due(const rr_engine *e);

#endif
