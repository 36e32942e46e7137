/* The verbs rail's endpoint, shared by the files that implement it
 * (rail_verbs.c says how it works as a whole):
 *   rail_verbs.c      state, failure, invalidate, liveness, the rail's ops table
 *   verbs_ep_setup.c  open (QPs, buffers, the control ring), address, connect, destroy
 *   verbs_post.c      the send and receive queues: writes, drains, receives, chained
 *                     posts and which requests are signalled
 *   verbs_ctrl.c      control messages through the peer's ring, credits back
 *   verbs_progress.c  completions, arrivals and delivery in the writer's order
 * Not for the rest of rerail: rail_verbs.h is the rail's interface. */
#ifndef RERAIL_VERBS_EP_H
#define RERAIL_VERBS_EP_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "rail_verbs.h"
#include "verbs_ring.h"

/* Control messages and drains in flight (one that went inline gives its
 * slot back once posted, a longer one with a later signalled completion:
 * verbs_chain.c). Half the peer's ring: control messages are a
 * clear-to-send or an ack per request (NCCL keeps 32 requests in flight
 * per connection), which the peer consumes as it polls; more wait in the
 * engine's queue (post_ctrl's RR_AGAIN) for the completions that free slots. */
#define SEND_SLOTS 32
#define MSG_HDR 8                 /* type u8, 3 x 0, value u32 (epoch of a drain) */
#define SLOT_BYTES VERBS_RING_SLOT_BYTES /* a send slot holds a ring message as written */
/* A receive slot holds a drain or a NOP and nothing longer: a longer SEND
 * fails on our side with a length error, a protocol violation (wc_class).
 * A write with immediate places its bytes in NCCL's buffer, not here. */
#define RECV_BYTES MSG_HDR
/* Inline data the QPs ask for: what a small control message takes with its
 * ring header and trailer (20 B): an ack (12 B body), a probe, a down
 * notice, the credit word and drains. A clear-to-send (44 B body for one
 * receive over two rails) and anything longer is read by the NIC from its
 * send slot, as NCCL's (which inlines nothing by default) are. Each byte of
 * inline capacity is in every WQE of the send queue: rxe's send WQE is a
 * 208 B header and max(inline, 16 B) in a power-of-two slot, so 48 B keeps
 * it at 256 B where 64 B made it 512 (a QP of 255 send WQEs: 64 KiB more
 * resident memory, bench/verbs_queue_cost.sh); mlx5 builds its WQEs of
 * 64 B blocks, where 16 B of inline more or less moves less. */
#define VERBS_MAX_INLINE 48
#define SLOT_INTERNAL (-2)        /* sq_entry.slot of a request that holds no send slot: a credit
                                   * write, or a message that went inline (its slot is free once
                                   * posted: the NIC copied it into the work request) */
#define SLOT_BULK (-3)            /* sq_entry.slot of the plain RDMA WRITE that carries the bulk of a
                                   * split write (adaptive routing): it waits on the chain as a
                                   * write does, and its bytes count, but the write with immediate
                                   * behind it is the one reported done (verbs_post_write) */
/* Chained posts (verbs_chain.c): the writes the engine posts in one pass wait
 * on their QP's chain and go to the NIC as one ibv_post_send (one doorbell)
 * when the engine says the pass is over (post_flush), before any other
 * request on that QP, when the chain reaches CHAIN_MAX requests or
 * CHAIN_BYTES, and in progress(). 4 MiB is a whole message at NCCL's
 * default step (512 KiB x 8) or 32 chunks of 128 KiB: one doorbell and one
 * completion per message; the cap bounds how long the first write waits
 * for the NIC and what one completion covers (the silence judge credits
 * the bytes ahead of it, rail_verbs.c). */
#define CHAIN_MAX 32
#define CHAIN_BYTES (4u << 20)
/* At most this many requests in a row go unsignalled: control ring writes
 * (clear-to-send, acks) are signalled rarely, as NCCL's FIFO writes are, but
 * the hardware frees send queue slots only on a signalled completion, so
 * one comes at least every quarter of the queue. */
#define SIGNAL_RUN (VERBS_SQ_DEPTH / 4)
/* Liveness floor: before a QP has measured its rate, the silence judge
 * assumes it carries at least this much per quarter of δ (what a signal
 * every quarter MiB guaranteed before chaining: rail_verbs.c). */
#define SIGNAL_BYTES (256u << 10)
/* Rate samples from fewer bytes measure latency, not the path's rate. */
#define RATE_SAMPLE_MIN (64u << 10)
/* Receives are posted again in chained batches of this many, one doorbell
 * each, instead of one call per receive (NCCL posts one receive per irecv;
 * rerail's engine consumes about one per message now that a message's chunks
 * go as one write). What it costs the queue: a QP's receive queue holds
 * VERBS_RQ_DEPTH receives at connect and gives one up only to a request the
 * peer's NIC sent (a write with immediate, a drain, a NOP); progress posts
 * each again once delivered, holding back fewer than VERBS_RECV_BATCH. So
 * it holds VERBS_RQ_DEPTH - (VERBS_RECV_BATCH - 1) = 240, less the requests
 * that arrived since the last progress pass: the peer's engine keeps at most
 * 32 requests (NCCL's window) of up to 8 buffers in flight, each one write
 * per VERBS_WRITE_MAX, so at NCCL's step sizes (512 KiB-4 MiB, mostly one
 * buffer) that is far more than arrives between two passes. Should the
 * queue still run empty (a burst of multi-buffer receives while progress is
 * held up), the peer's NIC retries (rnr_retry 7: without limit) until
 * progress posts more: a delay, never a failure or a loss. */
#define VERBS_RECV_BATCH 16
#define VERBS_RECV_CHAIN 64       /* receives chained in one call (the connect's 255 go in 4) */
#define RECV_TAG (1ull << 63)
#define RECV_ID(q, i) (RECV_TAG | (uint64_t)(q) << 32 | (uint64_t)(i))

/* Type 1 was a control message by SEND: they travel through the ring now. */
/* Type 3, a NOP, followed unsignalled writes before they were chained (every
 * chain of writes now ends signalled): no longer sent, still accepted. */
enum verbs_msg_type { MSG_DRAIN = 2, MSG_NOP = 3 };

typedef struct sq_entry {
  uint64_t wr_id;                 /* the engine's, for writes */
  uint64_t post_ns;               /* the engine's stamp, for writes; 0 for the rail's own */
  uint32_t len;
  int16_t slot;                   /* send slot of a SEND or ring write, -1 for the engine's write,
                                   * SLOT_INTERNAL for one that holds none */
  uint8_t signaled;
} sq_entry;

/* A request queued on a QP's chain, not yet handed to the NIC: what its
 * work request needs (one gather entry; the QPs are created with one). */
typedef struct chain_wr {
  uint64_t laddr, raddr;
  uint32_t len, lkey, rkey;
  uint32_t imm;                   /* network order, as the work request carries it */
  uint8_t opcode;                 /* enum ibv_wr_opcode */
  uint8_t flags;                  /* IBV_SEND_INLINE or 0; signalling is decided when it is rung */
  uint8_t nsge;
} chain_wr;

/* A receive that completed, waiting for its turn in the writer's order:
 * what delivery needs of its work completion (a quarter of one). */
typedef struct verbs_arrival {
  uint32_t imm;                   /* immediate data, network order as the completion had it */
  uint32_t byte_len;
  uint16_t slot;                  /* the receive's slot (< VERBS_RQ_DEPTH) */
  uint8_t is_write;               /* a write with immediate, else a drain */
} verbs_arrival;

/* One RC QP of the endpoint, with its own send queue accounting, and the
 * completions of ordered requests (writes, drains) that arrived on it ahead
 * of their turn. */
typedef struct verbs_qp {
  struct ibv_qp *qp;
  sq_entry sq[VERBS_SQ_DEPTH];
  uint64_t sq_head, sq_tail;      /* sequence numbers: posted = tail, retired = head */
  uint64_t last_signaled;         /* sequence number + 1 of the last signalled request */
  /* Queued, not yet rung: sequence numbers [sq_tail - nchain, sq_tail). Their
   * credits are taken (sq_tail counts them). */
  chain_wr chain[CHAIN_MAX];
  int nchain, chain_writes;
  uint32_t chain_bytes;
  int signal_wanted;              /* flushed() asked: the next pass signals the tail (a credit write) */
  uint64_t done_ns;               /* when its last signalled completion was polled (0: none yet) */
  double rate;                    /* bytes per ns its writes went at, smoothed; 0 until measured */
  verbs_arrival arrived[VERBS_RQ_DEPTH]; /* each holds one of this QP's receives */
  /* Counted for ever, 64 bits: a 32-bit count would wrap where the depth
   * (not a power of two) does not divide 2^32, and reuse an entry. */
  uint64_t arr_head, arr_tail;
  /* Receive slots consumed and not posted again yet (< VERBS_RECV_BATCH). */
  uint16_t repost[VERBS_RECV_BATCH];
  uint32_t nrepost;
} verbs_qp;

struct verbs_ep {
  rr_rail_ep base;
  verbs_hca *hca;
  verbs_gen *gen;                 /* the device's opening it was made on (verbs_reset.c) */
  verbs_ep *dev_prev, *dev_next; /* the device's list of its endpoints */
  /* Every QP's send and receive completions, polled by this endpoint alone;
   * its context (and every QP's) is the endpoint, for async events. */
  struct ibv_cq *cq;
  /* RERAIL_IB_QPS_PER_RAIL QPs, as many as both ends have after connect.
   * Ordered request number o (writes and drains, counted together) goes
   * whole on QP o % nqps; the receiver delivers them in that global order,
   * so the endpoint is one FIFO to the engine however many QPs carry it. */
  verbs_qp *qps;
  int nqps;
  uint32_t psn;                   /* the first PSN of every QP */
  /* The port's GID when the endpoint opened: what it advertises and sends
   * from, whatever a later GID change makes the device's (verbs_events.c). */
  union ibv_gid gid;
  int gid_index;
  uint32_t max_inline;            /* bytes a request may carry inline (the QPs' cap) */
  int attached;
  int connected;
  int invalidated;
  rr_status failed;
  /* Lock-free: the monitor marks (first error wins), the owner acts under its engine's lock. */
  _Atomic int async_event;        /* ibv_event_type + 1 of an async error, 0 when none */
  size_t backlog;                 /* bytes of writes posted and not completed */
  char *bufs;                     /* send slots, a credit word, receive slots (bufs_bytes) */
  struct ibv_mr *bufs_mr;
  /* The control rings: ours, which the peer writes into, and the peer's. */
  uint8_t *ring;
  struct ibv_mr *ring_mr;
  uint64_t peer_ring;
  uint32_t peer_ring_rkey;
  /* Probe filler (verbs_probe.c): written from our opening's scratch (NULL:
   * none) into the peer's (address 0: none). */
  struct ibv_mr *scratch_mr;
  uint64_t peer_scratch;
  uint32_t peer_scratch_rkey;
  /* Both directions' counts, which every message read from our ring is
   * judged against (verbs_ring_read). */
  verbs_ring_state rs;
  uint64_t rx_returned;           /* rs.rx_msgs as the peer was last told it */
  uint32_t tx_ops;                /* ordered requests posted */
  int16_t send_free[SEND_SLOTS];
  int nsend_free;
  uint64_t stray;                 /* completions that named none of our QPs */
  uint64_t last_rx_ns, last_tx_ns;
  /* The setup socket of stream 0, kept after connect only to learn that the
   * peer's process is gone: its kernel closes the socket (a QP of a dead
   * process just stops answering, which only δ of silence would tell). */
  int watch_fd;
  uint32_t progress_calls;
  /* SIGNAL_BYTES per quarter of δ, in bytes per ns: the rate the silence
   * judge assumes of a QP that has not measured one (rail_verbs.c). */
  double rate_floor;
};

static inline verbs_ep *to_ep(rr_rail_ep *ep) { return rr_container_of(ep, verbs_ep, base); }
/* Hand the queue counters' growth to the endpoint's telemetry recorder
 * (either direction's: the exporter sums them per rail). */
static inline void verbs_ep_publish_cost(rr_rail_ep *rep) {
  rr_tel_cost_publish(rep->tel_tx ? rep->tel_tx : rep->tel_rx, &rep->cost, &rep->cost_published);
}

/* bufs: SEND_SLOTS send slots, the credit word we write from (8 bytes, so
 * the receive slots behind it stay 8-byte aligned), then VERBS_RQ_DEPTH
 * receive slots per QP: with one QP, exactly 5 pages. */
#define CREDIT_SRC_BYTES 8
static inline size_t bufs_bytes(int nqps) {
  return (size_t)SEND_SLOTS * SLOT_BYTES + CREDIT_SRC_BYTES + (size_t)nqps * VERBS_RQ_DEPTH * RECV_BYTES;
}
/* Registration pins whole pages: the buffers are allocated in them. */
static inline size_t verbs_pages(size_t bytes) { return (bytes + 4095) & ~(size_t)4095; }

/* What one endpoint of nqps QPs holds, from the sizes open uses (the unit
 * tests check it against budgets; docs/memory_per_connection.md compares
 * it with NCCL's). The provider's own queues are its to size: the depths
 * and inline capacity asked for are what decides them. */
typedef struct verbs_ep_footprint {
  size_t host;          /* the endpoint and its QPs' bookkeeping, not pinned */
  size_t registered;    /* send and receive slots, and the control ring: pinned */
  uint32_t sq_depth;    /* per QP */
  uint32_t rq_depth;    /* per QP */
  uint32_t cq_depth;    /* the endpoint's CQ */
  uint32_t max_inline;  /* asked for; the device may grant less */
} verbs_ep_footprint;
void verbs_ep_footprint_of(int nqps, verbs_ep_footprint *f);

static inline char *send_slot(verbs_ep *ep, int i) { return ep->bufs + (size_t)i * SLOT_BYTES; }
static inline char *credit_src(verbs_ep *ep) { return ep->bufs + (size_t)SEND_SLOTS * SLOT_BYTES; }
static inline char *recv_slot(verbs_ep *ep, int q, int i) {
  return credit_src(ep) + CREDIT_SRC_BYTES + ((size_t)q * VERBS_RQ_DEPTH + (size_t)i) * RECV_BYTES;
}

/* Small requests of the rail's own memory (never a write's payload, which
 * may be GPU memory: verbs_post_write) travel inside the work request: the
 * NIC need not read them from memory (one DMA read less on the way out,
 * which is most of a clear-to-send's or an ack's cost on real hardware). */
static inline unsigned inline_flag(const verbs_ep *ep, size_t len) {
  return len > 0 && len <= ep->max_inline ? IBV_SEND_INLINE : 0;
}

/* One credit stays free for the signalled credit write that retires an
 * unsignalled tail when flushed() asks (verbs_ctrl_signal). */
static inline int sq_full(const verbs_qp *q) { return q->sq_tail - q->sq_head >= VERBS_SQ_DEPTH - 1; }

/* The QP that carries the next ordered request, and any control message
 * or credit posted before it: RC then places those ahead of it. */
static inline verbs_qp *next_qp(verbs_ep *ep) { return &ep->qps[ep->tx_ops % (uint32_t)ep->nqps]; }

/* rail_verbs.c */
/* The endpoint fails with st (the first failure stays); returns it. */
rr_status verbs_ep_fail(verbs_ep *ep, rr_status st, const char *what);
rr_status verbs_ep_check_async(verbs_ep *ep);
/* RR_OK when requests may be posted. */
rr_status verbs_ep_usable(verbs_ep *ep);

/* verbs_ep_setup.c */
rr_status verbs_ep_open(rr_rail_dev *dev, const rr_rail_events *events, void *events_arg, rr_rail_ep **out);
rr_status verbs_ep_addr(rr_rail_ep *rep, void *blob, uint32_t *len);
rr_status verbs_ep_connect(rr_rail_ep *rep, const rr_rail_connect_args *args);
void verbs_destroy(rr_rail_ep *rep);

/* verbs_post.c */
rr_status verbs_post_recvs(verbs_ep *ep, int q, const uint16_t *slots, int n);
rr_status verbs_recv_consumed(verbs_ep *ep, int q, int i);
/* Queue one send-queue request on QP q (the caller reserved its credit):
 * the engine's writes (slot -1, and SLOT_BULK) wait on the chain; anything else is rung at
 * once with whatever the chain holds ahead of it, so order on the QP holds.
 * _signaled: the same, and this request is signalled whatever the rules say. */
rr_status verbs_post_send(verbs_ep *ep, verbs_qp *q, struct ibv_send_wr *wr, uint64_t wr_id, uint32_t len,
                          int16_t slot, uint64_t post_ns);
rr_status verbs_post_send_signaled(verbs_ep *ep, verbs_qp *q, struct ibv_send_wr *wr, uint32_t len);
/* Hand QP q's chain to the NIC: one ibv_post_send. */
rr_status verbs_ring_chain(verbs_ep *ep, verbs_qp *q, int force_signal);
rr_status verbs_post_flush(rr_rail_ep *rep);
rr_status verbs_post_msg(verbs_ep *ep, verbs_qp *q, uint8_t type, uint32_t value, int reserve_signal_credit);
rr_status verbs_post_write(rr_rail_ep *rep, const rr_write_wr *w);
rr_status verbs_post_drain(rr_rail_ep *rep, uint32_t epoch);

/* verbs_ctrl.c */
rr_status verbs_post_ctrl(rr_rail_ep *rep, const void *msg, uint32_t len);
/* Deliver the messages of our ring that are due (verbs_progress.c's deliver). */
rr_status verbs_ctrl_deliver(verbs_ep *ep, uint64_t now);
rr_status verbs_ctrl_return_credit(verbs_ep *ep);
/* A signalled credit write on QP q: RC completes in order, so its
 * completion retires every unsignalled request ahead of it. */
rr_status verbs_ctrl_signal(verbs_ep *ep, verbs_qp *q);

/* verbs_progress.c */
rr_status verbs_progress(rr_rail_ep *rep);

/* verbs_probe.c: post_write, with RR_WRITE_PROBE filler written into the
 * peer's scratch instead of where the request names. */
rr_status verbs_post_write_or_probe(rr_rail_ep *rep, const rr_write_wr *w);

#endif
