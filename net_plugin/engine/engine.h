/* The transfer engine: one per connection end (send or receive).
 *
 * Messages move as chunks written into receiver-posted buffers. Progress is
 * tracked at both ends: the sender's chunks are posted (queued on a rail),
 * transmitted (left this host's hands) and acked (the receiver reported the
 * whole receive landed); the receiver keeps, per sub-receive, the count of
 * chunks received and the prefix of chunks that are all there ("done").
 *
 * A send completes towards NCCL only when its buffer may be reused: small
 * messages in host memory are copied into a bounce buffer and complete at
 * once, larger ones (and any in GPU memory) when every chunk is in the
 * receiver's memory: their writes completed on rails whose completion means
 * placement (verbs RC), or the receiver acked the receive. Keeping the data
 * until then is what lets a failover replay it; a placed send is never
 * replayed, the receiver is told it holds it (docs/protocol.md, invariant 8).
 *
 * Failover (engine_rails.c, engine_recv.c, engine_send.c): a connection holds
 * a primary rail and warm backups. When a rail dies, the receiver invalidates it,
 * moves to a new epoch, and tells the sender, per outstanding receive, the
 * chunks it holds; the sender replays the rest on the rails still up. The
 * receiver places every write itself and drops every write of an older epoch;
 * rails whose invalidation would be destructive (verbs) are drained instead, and no
 * receive completes before they are, so nothing from before the switch can
 * land after it. See docs/protocol.md and docs/failover.md. */
#ifndef RERAIL_ENGINE_H
#define RERAIL_ENGINE_H
#include <stddef.h>
#include <stdint.h>

#include "net_core.h" /* RR_PTR_*, rr_profiler_fn */
#include "rail.h"

#define RR_MAX_DEVS 32      /* RR_MAX_NETIFS: devices a registration can span */

/* What NCCL's mhandle points at: one registration per NIC of the
 * connection's rails, made at regMr, so a failover registers nothing. */
typedef struct rr_mr {
  void *base;
  size_t size;
  int type;                 /* RR_PTR_* */
  rr_rail_mr *reg[RR_MAX_DEVS]; /* by device index; NULL on devices not registered */
} rr_mr;

/* GPU memory (NCCL_PTR_CUDA, NCCL_PTR_DMABUF) is the NIC's alone: the CPU
 * never reads or writes it (no bounce copy, no inline or eager send from
 * it, no eager copy into it, no TCP rail touching it). */
static inline int rr_mr_is_gpu(const rr_mr *m) { return m && (m->type == RR_PTR_CUDA || m->type == RR_PTR_DMABUF); }

enum rr_engine_role { RR_ENGINE_SEND = 1, RR_ENGINE_RECV = 2 };
enum rr_request_kind { RR_REQ_SEND = 0x5e, RR_REQ_RECV = 0x7e, RR_REQ_FLUSH = 0xf1 /* core/flush.c */ };
enum rr_failover_mode { RR_FAILOVER_CHAIN = 0, RR_FAILOVER_BALANCE = 1 };

typedef struct rr_engine rr_engine;

typedef struct rr_engine_config {
  int role;
  size_t chunk_size;
  /* Rails with RR_RAIL_CAP_ADAPTIVE_ROUTING: a write of more bytes than
   * this goes split (rr_write_wr.bulk; RERAIL_IB_AR_THRESHOLD). */
  uint64_t ar_threshold;
  int failover_mode;        /* enum rr_failover_mode */
  uint64_t progress_timeout_ns;  /* δ: silence before a rail is blamed */
  uint64_t failback_hold_ns;     /* healthy this long before traffic returns */
  char peer[64];            /* the remote host, for messages and health events */
  rr_profiler_fn profiler;  /* NCCL's profiler callback, or NULL */
  /* The communicator's QoS class for the endpoints opened for this engine
   * (rr_rail_ep.traffic_class), -1 for none; the engine only carries it. */
  int traffic_class;
  /* Sender only: reopen rail `rail` afresh (new sockets, new QP). Called
   * again and again while it returns RR_AGAIN; RR_OK hands over the new
   * endpoint (events already pointing at this engine); a failure ends this
   * attempt. A rail that failed keeps stale state in its old transport
   * (TCP's retransmission backoff, bytes of invalidated epochs): a fresh one
   * heals at once. NULL when the owner cannot reconnect. */
  rr_status (*reconnect)(void *arg, int rail, rr_rail_ep **ep);
  void *reconnect_arg;
  /* Failed rails are reopened (by our cfg.reconnect, or by the peer's
   * through our listener): a rail that failed comes back only as a fresh
   * endpoint, never on its old transport, whose state (TCP's retransmission
   * backoff, a QP in error) can leave it mute for seconds after the path
   * heals. When neither end can reopen it, the old endpoint may recover. */
  int reopens;
  /* Sender: messages up to this many bytes (at most RR_BOUNCE_SIZE) may
   * leave before their clear-to-send, on rails where the receiver places
   * writes itself (RR_RAIL_CAP_EAGER); 0: never. */
  size_t eager_max;
  /* Gray failures (engine_gray.c): a rail delivering under degraded_pct %
   * of its healthy level while loaded, for degraded_ns, is demoted; it
   * returns once probes show restore_pct % for the fail-back hold.
   * degraded_pct 0: never demote. A rail whose transport reports its
   * retransmissions (RR_RAIL_CAP_PATH_STATS) and retransmits retrans_pct %
   * of what it sends for degraded_ns, when its siblings do not, is demoted
   * too. */
  uint32_t degraded_pct, restore_pct, retrans_pct;
  uint64_t degraded_ns;
  /* ... and one whose requests take latency_x times the healthiest path's
   * latency to that peer host, and latency_min_ns more (gray_latency.h);
   * latency_x 0: never for latency. */
  uint32_t latency_x;
  uint64_t latency_min_ns;
} rr_engine_config;

extern const rr_rail_events rr_engine_rail_events;

/* RR_ERR_NOMEM, RR_ERR_SYSTEM or RR_ERR_INVALID (a role that is neither
 * RR_ENGINE_SEND nor RR_ENGINE_RECV): nothing to finish. */
rr_status rr_engine_init(rr_engine *e, const rr_engine_config *cfg);
/* Add a connected rail; rail 0 is the primary, the rest backups in chain order.
 * The endpoint's events must be rr_engine_rail_events with arg e. All rails
 * are added before the first receive is posted (clear-to-sends carry a key
 * per rail). */
rr_status rr_engine_add_rail(rr_engine *e, rr_rail_ep *ep, int weight, const char *ifname,
                             const char *peer_addr);
/* Add a rail that belongs to the connection but could not be reached while
 * it was set up (a NIC of either end was down): ep is opened on the rail's
 * device and never connected; the engine only reads its device (the NIC
 * whose state gates a reopen, whose registration a clear-to-send names,
 * that events and telemetry name) and destroys it when the rail is reopened
 * (cfg.reconnect, rr_engine_rail_replace) or the engine ends. The rail is
 * held as DEAD, so nothing is posted to or polled from it until then, and it
 * earns its way back like any reopened rail (engine_rail_swap). Its cause is
 * RR_ERR_PEER: the checks that decide whether the peer closed every rail
 * (check_rails_left, busy_or_recent) require every rail DEAD by the peer,
 * and a rail that never connected must tip them neither way. Same ordering
 * rule as rr_engine_add_rail; why says what kept it out (for the log). */
rr_status rr_engine_add_rail_later(rr_engine *e, rr_rail_ep *ep, int weight, const char *ifname,
                                   const char *peer_addr, const char *why);
void rr_engine_fini(rr_engine *e);
/* Orderly close, before rr_engine_fini (engine_close.c): deliver what this
 * end owes the peer (a receiver its acknowledgements, a sender the messages
 * it reported done), then a BYE, and wait until the rails carrying them
 * have handed everything to the peer; at most timeout_ns. The peer then
 * reads the close as the end of the connection, not a failure. Nobody else
 * may drive the engine meanwhile (the monitor has let it go). RR_OK when
 * all of it was delivered, RR_AGAIN when the time ran out first, the
 * connection's failure when it had failed. */
rr_status rr_engine_close(rr_engine *e, uint64_t timeout_ns);
/* Swap rail `rail`'s endpoint for a freshly connected one (the receiver side
 * of a reconnect; the sender side swaps through cfg.reconnect). The rail
 * starts over as DOWN and earns its way back like any healed rail.
 * peer_addr: the remote address the new endpoint reached, which the rail is
 * named and its link (link_life.h) keyed by from now on (a rail added for
 * later had only the peer host's address to go by); NULL keeps the rail's. */
void rr_engine_rail_replace(rr_engine *e, int rail, rr_rail_ep *ep, const char *peer_addr);

rr_status rr_engine_isend(rr_engine *e, void *data, size_t size, int tag, rr_mr *mr,
                          void *phandle, void **request);
rr_status rr_engine_irecv(rr_engine *e, int n, void **data, const size_t *sizes,
                          const int *tags, rr_mr **mrs, void **phandles, void **request);
rr_status rr_engine_test(void *request, int *done, size_t *sizes);

/* Drive an engine nobody else is driving (the background thread): answers
 * the peer and notices failures while NCCL has nothing to ask of it.
 * Returns without waiting when another thread holds the engine. An engine
 * that is idle (rr_engine_idle_background) is driven every
 * RR_ENGINE_IDLE_BACKGROUND_NS instead of every RR_ENGINE_BACKGROUND_NS,
 * unless wake_idle (the caller saw a link change that every rail must
 * hear of now). */
#define RR_ENGINE_BACKGROUND_NS (10 * 1000000ull)
#define RR_ENGINE_IDLE_BACKGROUND_NS (100 * 1000000ull)
/* Idle: no work outstanding and no word from the peer for this long. */
#define RR_ENGINE_IDLE_AFTER_NS (1000 * 1000000ull)
void rr_engine_background(rr_engine *e, uint64_t now_ns, int wake_idle);
/* Whether the background may drive e at the slower cadence (caller holds
 * e->lock): nothing outstanding, owed, doubted or under way, for
 * RR_ENGINE_IDLE_AFTER_NS. Each drive stores it in idle_hint. */
int rr_engine_idle_background(const rr_engine *e, uint64_t now_ns);

#endif
