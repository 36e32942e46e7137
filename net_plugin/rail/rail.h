/* The rail interface: what the transfer engine and the core need from a
 * transport. Shaped after UCX's transport layer and RDMA: two layers.
 *
 * Device layer (rr_rail_dev): one local NIC as a transport sees it. It says
 * what it can do (rr_rail_dev_attr), registers memory for its own use (a
 * verbs MR is valid on one protection domain, i.e. one NIC), drives any
 * completion source its endpoints share (verbs has none: a CQ per
 * endpoint) and reports port events.
 *
 * Endpoint layer (rr_rail_ep): one connected path to the peer over one local
 * device (an RC QP, or a set of TCP sockets). Endpoints are opened on a
 * device, describe themselves in an address blob the transport defines, and
 * are connected with the peer's blob, which the core exchanges over its
 * authenticated setup sockets (and hands over too: the TCP rail keeps them as
 * its data path, verbs closes them). The engine then posts one-sided writes
 * with 32-bit immediate data into receiver-posted buffers, small control
 * messages, and drain barriers.
 *
 * Every decision (which rail, when to fail over, what to replay, where an
 * incoming write may land) is the engine's: a rail moves bytes and reports
 * what it sees. The receiver decides where bytes go: a rail that sees a write
 * before it lands (TCP) asks the engine for the destination; a rail whose
 * NIC places the bytes itself (verbs) can only land them in memory the
 * receiver registered on that NIC and advertised for this connection, and
 * reports each landed write so the engine checks it afterwards.
 *
 * Completions and arrivals reach the engine through rr_rail_events, called
 * from ep progress() on the thread that calls it, under the owning engine's
 * lock; pointers handed to a callback are valid only during the call. A
 * device progress() never calls into an engine: it files what it polls into
 * the owning endpoint, whose own progress() delivers it (so one connection's
 * thread never runs another connection's engine). */
#ifndef RERAIL_RAIL_H
#define RERAIL_RAIL_H
#include <net/if.h>
#include <stddef.h>
#include <stdint.h>

#include "rr_netif.h"
#include "rr_status.h"
#include "rr_telemetry.h"

typedef struct rr_rail_dev rr_rail_dev;
typedef struct rr_rail_ep rr_rail_ep;
typedef struct rr_rail_ops rr_rail_ops;

/* ------------------------------------------------------------ devices */

/* Capability flags of a device (rr_rail_dev_attr.caps): one property each,
 * read where that property matters. Every rail carries one-sided writes with
 * 32-bit immediate data and registers memory per device: that is the seam,
 * not a capability.
 *
 *   flag                -> meaning -> read by (besides the contract test, which checks each)
 *   EP_ORDERED          one endpoint delivers writes, control messages and drains in posting
 *                       order -> no engine code: it relies on drains and sequence numbers,
 *                       never on this.
 *   WRITE_BEGIN         on_write_begin: the engine chooses where each write lands, and sees
 *                       the key and address the writer named -> engine_recv.c check_write (the
 *                       key and address checks).
 *   INVALIDATE_KEEPS_EP invalidate() discards what is in flight and the endpoint carries on ->
 *                       engine_rail_invalidate_cheap: the rollback (engine_recv.c, engine_send.c)
 *                       and gray demotion (engine_gray.c).
 *   EPOCH_TAG           rr_write_wr.epoch_tag reaches the peer as rr_write_hdr.epoch_tag ->
 *                       engine_recv.c write_of_this_epoch (a write of another epoch is sunk).
 *   EAGER               post_eager: a write naming a receive (seq, tag), placed by the
 *                       receiver -> engine_send.c (eager_allowed, and the rail a write goes
 *                       on).
 *   CONNECT_MAY_BLOCK   ep_connect may wait -> core/connect_job.c.
 *   SETUP_IS_DATA       the setup sockets are the data path -> core/net_core.c, core/oob.c.
 *   PATH_STATS          path_stats() is present -> engine_gray.c.
 *   WRITE_DONE_PLACED   on_write_done means placed at the peer -> engine.c ev_write_done,
 *                       engine_send.c (ack or not).
 *   ADAPTIVE_ROUTING    writes above a threshold go split (rr_write_wr.bulk) -> engine_send.c.
 *   PROBE_WRITE         post_write carries RR_WRITE_PROBE -> engine_gray.c.
 *
 * Some come together: INVALIDATE_KEEPS_EP needs WRITE_BEGIN and EPOCH_TAG (a
 * write of an invalidated epoch still on the wire reaches on_write_begin, where its
 * tag gets it sunk), and EAGER needs WRITE_BEGIN (the receiver places it). */
enum rr_rail_cap {
  RR_RAIL_CAP_EP_ORDERED = 1u << 0,    /* what arrives on one endpoint (writes, control messages,
                                        * drains) is delivered in posting order (RC QP; a verbs
                                        * rail with several QPs puts it back in order); without
                                        * it only control messages are ordered */
  RR_RAIL_CAP_WRITE_BEGIN = 1u << 1,   /* the rail sees a write before it lands and asks the
                                        * engine where it goes (on_write_begin), reporting the
                                        * key and address the writer named (rr_write_hdr.rkey,
                                        * .raddr). Without it the NIC places writes itself, in
                                        * memory registered on it, and the engine checks them
                                        * after they landed (on_write_recv) */
  RR_RAIL_CAP_INVALIDATE_KEEPS_EP = 1u << 2, /* invalidate() discards what is in flight and leaves the
                                        * endpoint working (TCP: queued frames dropped, the
                                        * incoming write sunk), so a rollback invalidates such a rail
                                        * instead of waiting for a drain on it. Without it
                                        * invalidate() breaks the endpoint for good (verbs: the QP
                                        * goes to the error state) and the engine drains it */
  RR_RAIL_CAP_EPOCH_TAG = 1u << 3,     /* rr_write_wr.epoch_tag (the low 16 bits of the writer's
                                        * epoch) reaches the receiver as rr_write_hdr.epoch_tag, so
                                        * a write that waited in a failed rail's buffers
                                        * through many rollbacks is still known to be old.
                                        * Without it only the immediate's 4 bits say the epoch
                                        * (rr_write_hdr.epoch_tag is 0) */
  RR_RAIL_CAP_EAGER = 1u << 4,         /* post_eager is present: a write that names the
                                        * receive it is for (rr_eager_wr) instead of a buffer,
                                        * which the receiver's engine places (on_write_begin
                                        * with RR_WRITE_EAGER). Without it post_eager is NULL */
  RR_RAIL_CAP_CONNECT_MAY_BLOCK = 1u << 5, /* ep_connect may wait (a RoCE queue pair resolving
                                        * its peer's address): the core connects a reopened
                                        * rail off the thread driving its connection */
  RR_RAIL_CAP_SETUP_IS_DATA = 1u << 6, /* the setup sockets become the data path (TCP): they
                                        * must travel over the device's own IP address
                                        * (attr.netdev's); without it setup, authentication
                                        * and reconnects travel over the core's out-of-band
                                        * interface, whatever happens to this device */
  RR_RAIL_CAP_PATH_STATS = 1u << 7,    /* path_stats() reports what the transport sent and
                                        * retransmitted on the endpoint (TCP: TCP_INFO) */
  RR_RAIL_CAP_WRITE_DONE_PLACED = 1u << 8, /* on_write_done for a write means its bytes are in
                                        * the peer's registered memory, to stay there whatever
                                        * fails next (an RC write the responder acknowledged):
                                        * the engine may give NCCL the source back on it alone.
                                        * Without it, on_write_done means only that the rail is
                                        * done reading the source (TCP: the local kernel holds
                                        * the bytes; the peer process may never get them) */
  RR_RAIL_CAP_ADAPTIVE_ROUTING = 1u << 9, /* the fabric may route a write's packets over
                                        * several paths (an InfiniBand port, by NCCL's rule):
                                        * the engine sends a write above RERAIL_IB_AR_THRESHOLD
                                        * split (rr_write_wr.bulk), its bulk as a plain write
                                        * and a small write with immediate behind it. Only a
                                        * rail that carries rr_write_wr.bulk reports it */
  RR_RAIL_CAP_PROBE_WRITE = 1u << 10,  /* post_write carries RR_WRITE_PROBE: filler that crosses
                                        * the path like data and never reaches the peer's
                                        * engine as data (TCP: the receiver discards it at the
                                        * frame; verbs: written without an immediate into scratch
                                        * memory the peer's rail registered for it). The engine
                                        * judges gray failures only on rails it can probe */
};

/* Memory kinds a device can register (rr_rail_dev_attr.mem_kinds). */
enum rr_mem_kind {
  RR_MEM_HOST = 1u << 0,
  RR_MEM_CUDA = 1u << 1,               /* GPUDirect RDMA */
  RR_MEM_DMABUF = 1u << 2,             /* registration from a DMA-BUF file descriptor */
};

#define RR_RAIL_DEV_NAME_MAX 64

typedef struct rr_rail_dev_attr {
  /* What the device is, as NCCL's getProperties and the tools report it;
   * filled by the transport that opened it. */
  char name[RR_RAIL_DEV_NAME_MAX];     /* "mlx5_0:1" (an RDMA port), "eth0" (an interface) */
  char netdev[IF_NAMESIZE];            /* the IP interface it sits on (its link state is the
                                        * device's): "" for one without (an InfiniBand port) */
  char pci_path[256];                  /* sysfs path of its PCI function; "" when virtual */
  uint64_t guid;                       /* adapter GUID (ports of one adapter share it); 0: none */
  int port;                            /* 1-based port on its adapter; 0: not a port */
  int numa_node;                       /* -1 when unknown */
  uint32_t caps;                       /* enum rr_rail_cap */
  uint32_t mem_kinds;                  /* enum rr_mem_kind */
  uint32_t inline_max;                 /* bytes a write may carry inline (0: none) */
  /* Most bytes one write may carry: the engine sends consecutive chunks of a
   * message that go on one rail together as one write up to this (a group,
   * docs/protocol.md), so the receiver sees one arrival for them. 0: one
   * chunk per write (TCP: a write is a frame on one stream, and a chunk per
   * frame lets a second stream take the next chunk). */
  uint32_t write_max;
  uint32_t max_eps;                    /* endpoints the device supports (0: no limit) */
  uint32_t addr_len;                   /* bytes of an endpoint's address blob (0: none) */
  int speed_mbps;                      /* link speed, 0 when unknown */
  int latency_us;                      /* one-way latency estimate, 0 when unknown */
  /* An RDMA port's addressing, as `rerail devices` shows it (NCCL users
   * check these first when a cluster will not connect); link "" for a
   * device that is not an RDMA port. */
  char link[16];                       /* "InfiniBand", "RoCE v2", "RoCE v1", "RoCE" */
  int gid_index;                       /* the GID the port addresses peers with */
  uint8_t gid[16];
  uint32_t lid;                        /* InfiniBand: the port's LID; 0 none */
} rr_rail_dev_attr;

/* Port events a device reports (dev_event()). */
typedef enum rr_rail_dev_event_kind {
  RR_RAIL_DEV_EV_NONE = 0,
  RR_RAIL_DEV_EV_PORT_UP,              /* the port is ACTIVE again */
  RR_RAIL_DEV_EV_PORT_DOWN,            /* the port went down */
  RR_RAIL_DEV_EV_FATAL,                /* the device is unusable (e.g. a catastrophic error) */
} rr_rail_dev_event_kind;
/* After RR_RAIL_DEV_EV_FATAL the transport has failed every endpoint of the
 * device and closed it: ep_open fails with RR_ERR_RAIL, reg_mr still
 * succeeds (with keys 0, which no rail carries, until the device reopens).
 * The rr_rail_dev itself, its index and every registration handle stay
 * valid. The transport looks for the device again from dev_event (called
 * at the monitor's rate) and, once it is back and usable, opens it again
 * under the same index, registers the handles again (their keys change) and
 * reports RR_RAIL_DEV_EV_PORT_UP. Until then the core holds the device
 * down, whatever its interface's link says. */

typedef struct rr_rail_dev_event {
  rr_rail_dev_event_kind kind;
  char why[64];
} rr_rail_dev_event;

/* Base of every transport's device (embedded first; container_of back). */
struct rr_rail_dev {
  const rr_rail_ops *ops;
  int index;                           /* rerail device index (NCCL's dev) */
  rr_rail_dev_attr attr;
};

/* A memory registration on one device (transport state follows it). */
typedef struct rr_rail_mr {
  rr_rail_dev *dev;
  void *base;
  size_t len;
  uint32_t lkey;
  uint32_t rkey;                       /* what the peer names this memory by on this device */
} rr_rail_mr;

/* ---------------------------------------------------------- endpoints */

/* One-sided write of [local, local+len) to (remote_addr, rkey) on the peer. */
typedef struct rr_write_wr {
  uint64_t wr_id;                      /* returned in on_write_done */
  const void *local;
  size_t len;                          /* may be 0: the immediate alone is delivered */
  const rr_rail_mr *local_mr;          /* NULL for memory the rail itself owns (inline/bounce) */
  uint64_t remote_addr;
  uint32_t rkey;
  uint32_t imm;                        /* delivered with the write to the receiver */
  /* Delivered to on_write_begin by rails that carry it (TCP): the low bits
   * of the writer's epoch, so a frame that sat in the kernel buffer of a
   * failed rail through many failovers is still recognised as old. */
  uint16_t epoch_tag;
  /* rr_now_ns() when the engine posted it: rails that record telemetry use
   * it as the request's start (the engine reads the clock once per batch). */
  uint64_t post_ns;
  uint8_t flags;                       /* RR_WRITE_PROBE or 0 */
  /* RR_RAIL_CAP_ADAPTIVE_ROUTING rails only, else 0: the first `bulk` bytes
   * go as a plain write the receiver is not told of, and the remaining
   * len - bulk bytes (maybe none) as the write with immediate behind it,
   * which the receiver's arrival (len - bulk bytes long) reports for both:
   * RC places a write with immediate only after every write before it on
   * the queue pair. */
  size_t bulk;
} rr_write_wr;

/* What an eager write names instead of a buffer: the receive it is for and
 * what the writer assumed when it chose that receive. Opaque to the rail,
 * which carries it intact. */
typedef struct rr_eager_name {
  uint32_t seq;                        /* the receive's sequence number */
  uint32_t known;                      /* the writer's first receive not yet heard of when it chose seq */
  int32_t tag;                         /* the message's tag */
} rr_eager_name;

/* An eager write (post_eager, RR_RAIL_CAP_EAGER rails): a message sent
 * before its clear-to-send, so it names no buffer; the receiver's engine
 * places it (into its receive if posted, else into an early buffer of its
 * own). Fields as rr_write_wr's; the receiver's rail delivers it through
 * on_write_begin with RR_WRITE_EAGER set and `name` in rr_write_hdr.eager. */
typedef struct rr_eager_wr {
  uint64_t wr_id;                      /* returned in on_write_done */
  const void *local;
  size_t len;                          /* may be 0 */
  const rr_rail_mr *local_mr;          /* NULL for memory the rail itself owns (a bounce copy) */
  uint32_t imm;
  uint16_t epoch_tag;                      /* as rr_write_wr.epoch_tag */
  uint64_t post_ns;
  rr_eager_name name;
} rr_eager_wr;

/* rr_write_hdr.flags only: the write was posted with post_eager (rkey and
 * raddr 0; what it names is in rr_write_hdr.eager). */
#define RR_WRITE_EAGER 0x1u
/* A probe write carries filler to measure a demoted rail's rate without
 * putting NCCL's data on it. Only rails with RR_RAIL_CAP_PROBE_WRITE carry
 * it; len bytes cross the path, and of the rest only wr_id, post_ns and
 * epoch tag: a rail that sees writes before they land hands it to
 * on_write_begin, where the receiver discards it (*dst NULL); one whose NIC
 * places writes itself writes it from and into scratch memory of its own
 * (local, remote_addr and rkey are ignored) with no immediate, so the peer's
 * engine never hears of it. */
#define RR_WRITE_PROBE 0x2u
/* The longest probe write a rail with RR_RAIL_CAP_PROBE_WRITE must carry. */
#define RR_WRITE_PROBE_MAX (1u << 20)

/* A write from the peer as the rail saw it arrive. */
typedef struct rr_write_hdr {
  uint32_t imm;
  uint32_t len;
  uint32_t rkey;                       /* the key the writer used (WRITE_BEGIN rails; verbs: 0) */
  uint64_t raddr;                      /* the address the writer named (WRITE_BEGIN rails; verbs: 0,
                                        * the NIC placed it and the immediate says where) */
  uint16_t epoch_tag;                      /* rails without RR_RAIL_CAP_EPOCH_TAG: 0 */
  uint8_t flags;                       /* RR_WRITE_PROBE as the writer posted it, RR_WRITE_EAGER */
  rr_eager_name eager;                 /* RR_WRITE_EAGER: what post_eager named; else 0 */
} rr_write_hdr;

/* Engine callbacks, called from ep progress() under the engine's lock.
 * A failure returned by a callback makes progress() stop and return it;
 * RR_ERR_PROTOCOL means "this rail carried something that breaks the
 * protocol": the engine fails that rail over, never the connection. */
typedef struct rr_rail_events {
  /* The local write wr_id has left this host's hands (its buffer is reusable
   * by the rail); on a device with RR_RAIL_CAP_WRITE_DONE_PLACED, its bytes
   * are placed in the peer's memory as well. Called only for a write that
   * succeeded: one the rail could not complete is never reported (the
   * endpoint fails instead). Not necessarily in posting order: a verbs rail
   * with several QPs completes each QP's writes in order, not the
   * endpoint's (the engine counts them). */
  rr_status (*on_write_done)(rr_rail_ep *ep, uint64_t wr_id);
  /* RR_RAIL_CAP_WRITE_BEGIN rails: a write is about to land. The engine sets
   * *dst to where its h->len bytes go, or to NULL to have the rail read and
   * discard them (a write of an invalidated epoch). RR_ERR_PROTOCOL: the write is
   * not one the engine asked for (unknown slot or key, outside the posted
   * receive, a duplicate): nothing is written and the rail fails. An eager
   * write (RR_WRITE_EAGER) comes back resolved: the engine rewrites *h into
   * the write the writer would have made with a clear-to-send (or keeps it
   * eager when it lands in the engine's own early buffer), and the rail
   * hands that *h to on_write_recv. */
  rr_status (*on_write_begin)(rr_rail_ep *ep, rr_write_hdr *h, void **dst);
  /* A write from the peer has fully landed (for TCP: at the *dst the engine
   * gave; for verbs: where the NIC placed it, described by h). */
  rr_status (*on_write_recv)(rr_rail_ep *ep, const rr_write_hdr *h);
  /* A control message from the peer. */
  rr_status (*on_ctrl)(rr_rail_ep *ep, const void *msg, uint32_t len);
  /* A drain barrier posted by the peer with post_drain() has arrived: every
   * write the peer posted on this endpoint before it has landed or never
   * will. Barriers are reported in order, and the latest one always is; an
   * earlier barrier may be reported only through a later one (a TCP stream
   * that already carried the next marker), which proves it too. */
  rr_status (*on_drain)(rr_rail_ep *ep, uint32_t epoch);
} rr_rail_events;

/* Largest control message a rail must carry. */
#define RR_RAIL_CTRL_MAX 512
/* Largest endpoint address blob. */
#define RR_RAIL_ADDR_MAX 128

/* What the core hands a transport to connect an endpoint: the peer's blob
 * and the setup sockets (connected, non-blocking, authenticated). A
 * transport that moves data over them takes ownership (TCP: one stream per
 * socket); one that does not leaves them to the core, which closes them. */
/* Most setup sockets the core opens per rail (and hands to ep_connect). */
#define RR_RAIL_SETUP_FDS_MAX 8

typedef struct rr_rail_connect_args {
  const void *peer_addr;
  uint32_t peer_addr_len;
  int *fds;                            /* set an entry to -1 to take ownership of it */
  int nfds;
} rr_rail_connect_args;

/* A flush of memory a device wrote into (GPU memory registered as CUDA or
 * DMA-BUF): the device reads back from it, and the read completes only after
 * every earlier write of that device is visible there (PCIe ordering), which
 * is how NCCL's IB transport makes received data visible to the GPU. The
 * caller owns it; the device writes `state` (under its own lock) until the
 * flush is done, failed or abandoned. */
enum rr_rail_flush_state { RR_FLUSH_IDLE = 0, RR_FLUSH_PENDING, RR_FLUSH_DONE, RR_FLUSH_FAILED };
typedef struct rr_rail_flush {
  _Atomic int state;                   /* enum rr_rail_flush_state */
  uint64_t posted_ns;                  /* when it was posted (rr_now_ns) */
} rr_rail_flush;

/* What a transport's endpoint is on the wire. Observers outside the engine
 * describe traffic in these terms: NCCL's profiler has one event descriptor
 * for sockets and another for queue pairs. */
typedef enum rr_rail_wire {
  RR_RAIL_WIRE_STREAMS = 0,            /* byte streams (TCP sockets) */
  RR_RAIL_WIRE_QUEUE_PAIRS = 1,        /* RDMA queue pairs (verbs) */
} rr_rail_wire;

/* What an endpoint's transport has sent on its path since it was connected,
 * as running totals (rr_rail_ops.path_stats). A path that loses packets
 * shows as retransmissions long before it falls silent: the engine judges a
 * lossy rail by retrans_bytes / sent_bytes (engine_gray.c). */
typedef struct rr_rail_path_stats {
  uint64_t sent_bytes;                 /* payload bytes put on the wire, retransmissions included */
  uint64_t retrans_bytes;              /* of which retransmissions */
  uint32_t unacked;                    /* now, not a total: packets on the wire the peer has not
                                        * acknowledged yet (0: it has every byte sent). TCP's
                                        * flushed() means only "sent" (rail_tcp.c), so the latency
                                        * criterion waits for this as well (engine_gray.c) */
} rr_rail_path_stats;

/* One const table per transport; every entry is present (a stub where a
 * transport has nothing to do), except the flush entries, which a transport
 * whose memory needs no flush leaves NULL, path_stats, which only a
 * transport with RR_RAIL_CAP_PATH_STATS fills in, post_eager, which only a
 * transport with RR_RAIL_CAP_EAGER fills in, and post_flush, which only a
 * transport that batches writes fills in. */
struct rr_rail_ops {
  const char *name;
  rr_rail_wire wire;

  /* ---- device layer ---- */
  /* Registration of [base, base+len) of memory kind `kind` (enum
   * rr_mem_kind; dmabuf_fd/offset for RR_MEM_DMABUF) on this device. */
  rr_status (*reg_mr)(rr_rail_dev *dev, void *base, size_t len, uint32_t kind, int dmabuf_fd,
                      uint64_t dmabuf_offset, rr_rail_mr **mr);
  void (*dereg_mr)(rr_rail_mr *mr);
  /* Poll the device's shared completion sources, if it has any, and file
   * what arrived into the owning endpoints (never calls the engine). Thread
   * safe. */
  rr_status (*dev_progress)(rr_rail_dev *dev);
  /* Next port event, RR_RAIL_DEV_EV_NONE when there is none. Thread safe;
   * called by the core's monitor thread. */
  rr_rail_dev_event_kind (*dev_event)(rr_rail_dev *dev, rr_rail_dev_event *ev);
  void (*dev_close)(rr_rail_dev *dev);
  /* Flush (see rr_rail_flush; NULL when not needed). flush_post reads back
   * from `addr` inside `mr` (this device's registration): RR_OK posted (the
   * flush is PENDING), RR_AGAIN the device's flush queue is full (post again
   * later), another failure: this device cannot flush now (port down, no
   * flush QP), use another. flush_poll moves PENDING flushes of the device to
   * DONE or FAILED. flush_abandon gives up on a PENDING flush that takes too
   * long: the device's flush queue is reset and every flush still on it
   * FAILED. All three thread safe. */
  rr_status (*flush_post)(rr_rail_dev *dev, const rr_rail_mr *mr, const void *addr, rr_rail_flush *f);
  void (*flush_poll)(rr_rail_dev *dev);
  void (*flush_abandon)(rr_rail_dev *dev, rr_rail_flush *f);

  /* ---- endpoint layer ---- */
  /* An unconnected endpoint on dev; its address blob (attr.addr_len bytes)
   * goes to the peer. */
  rr_status (*ep_open)(rr_rail_dev *dev, const rr_rail_events *events, void *events_arg,
                       rr_rail_ep **ep);
  rr_status (*ep_addr)(rr_rail_ep *ep, void *blob, uint32_t *len);
  /* Connect with the peer's blob and the setup sockets. */
  rr_status (*ep_connect)(rr_rail_ep *ep, const rr_rail_connect_args *args);
  /* Queue a write. RR_AGAIN when the send queue has no room (credits are
   * reserved before anything is posted: retry later). */
  rr_status (*post_write)(rr_rail_ep *ep, const rr_write_wr *wr);
  /* RR_RAIL_CAP_EAGER only (else NULL): queue an eager write (rr_eager_wr).
   * It is a write in every other respect: on_write_done reports it, a drain
   * posted after it covers it, invalidate drops it. RR_AGAIN and failures as
   * post_write's. */
  rr_status (*post_eager)(rr_rail_ep *ep, const rr_eager_wr *wr);
  /* Optional (NULL: post_write hands each write over at once, as TCP's
   * streams do). Hand over everything post_write queued on this endpoint
   * since the last call, as one submission per queue (verbs: one chained
   * ibv_post_send per QP, one doorbell). The engine calls it once per
   * posting pass, after its last post_write. A rail with it still never
   * leaves a write queued on its own account: post_ctrl and post_drain
   * hand over what is queued ahead of them (posting order holds), invalidate
   * drops it with the rest, a queue that reaches the rail's cap is handed
   * over at once, and progress() hands over the rest; it only lets a pass's
   * writes share a submission. An op and not
   * a flag on rr_write_wr ("last of the pass"): the engine learns that a
   * write was the last only after it (the next is refused RR_AGAIN, or goes
   * to another rail). RR_OK, or the failure that broke the endpoint, as
   * post_write's. */
  rr_status (*post_flush)(rr_rail_ep *ep);
  /* Queue a control message (copied). RR_AGAIN when its queue is full. */
  rr_status (*post_ctrl)(rr_rail_ep *ep, const void *msg, uint32_t len);
  /* Queue a drain barrier behind every write posted so far on this
   * endpoint; the peer's on_drain(epoch) proves those writes landed or never
   * will (TCP: a marker frame on every stream; RDMA: a zero-length write
   * with immediate, behind which RC ordering holds). RR_AGAIN when full. */
  rr_status (*post_drain)(rr_rail_ep *ep, uint32_t epoch);
  /* Move bytes and deliver what arrived through the events. Returns RR_OK,
   * or the failure that broke the endpoint for good (RR_ERR_PEER: the peer
   * closed it; RR_ERR_PROTOCOL: it carried garbage; RR_ERR_RAIL: the path
   * failed); the engine never uses a broken endpoint again. */
  rr_status (*progress)(rr_rail_ep *ep);
  /* Invalidate: drop every queued item not yet started and discard the rest of
   * any incoming write not yet landed. After invalidate() returns, nothing lands
   * in this side's registered memory any more (verbs: the QP goes to the
   * error state; it is reopened, never reused). Each side's invalidation guards
   * what lands on that side: a sender's invalidation does not stop a write the
   * receiver already began to place (TCP gave it a destination; an RC NIC
   * places what reached it) — the receiver's own invalidation does. */
  void (*invalidate)(rr_rail_ep *ep);
  /* Bytes queued for transmission and not yet handed to the wire. */
  size_t (*backlog)(rr_rail_ep *ep);
  /* 1 when everything posted on this endpoint has reached the peer's side,
   * so destroying it now loses nothing the peer would read (TCP: our kernel
   * sent every byte, and retransmits it after close() unless a reset goes
   * out, rail_tcp.c; whether the peer acknowledged it is path_stats'
   * unacked; verbs: every work request completed,
   * i.e. the peer's NIC placed it). A broken endpoint counts as flushed:
   * nothing more leaves through it. An orderly close waits for this. */
  int (*flushed)(rr_rail_ep *ep);
  /* The latest time (rr_now_ns) at which the path was seen to work both
   * ways: bytes received, or the peer acknowledging bytes we sent. While our
   * own data waits unacknowledged, only acknowledgements count. The engine
   * asks when in doubt; a transport that learns of its sends only now and
   * then may take the call to ask for fresh word (verbs: a signalled
   * request behind unsignalled ones, the engine's probe among them), and
   * may count a path alive while the data ahead of its next report cannot
   * have gone yet at the rate it measured (verbs, rail_verbs.c). */
  uint64_t (*last_alive_ns)(rr_rail_ep *ep, uint64_t now_ns);
  /* RR_RAIL_CAP_PATH_STATS only (else NULL): the endpoint's running totals
   * (rr_rail_path_stats) into *out; RR_OK, or a failure when the transport
   * cannot tell now (a broken endpoint): the caller judges nothing then.
   * Costs a system call per socket: call it a few times a second, not per
   * message. */
  rr_status (*path_stats)(rr_rail_ep *ep, rr_rail_path_stats *out);
  /* Release everything; the endpoint is gone afterwards. */
  void (*destroy)(rr_rail_ep *ep);
};

/* Base of every transport's endpoint (embedded first; container_of back). */
struct rr_rail_ep {
  const rr_rail_ops *ops;
  rr_rail_dev *dev;
  const rr_rail_events *events;
  void *events_arg;                    /* the owning engine */
  int rail;                            /* the engine's index of this rail (set by the engine) */
  /* What the endpoint is known by on the wire (rr_rail_ops.wire): its first
   * socket (streams) or its first queue pair's number (queue pairs); -1
   * while it has none. Set by the transport; for observers only. */
  int wire_id;
  /* Option: the QoS class of the communicator the endpoint serves (NCCL's
   * per-communicator trafficClass, ncclNetCommConfig v11+), -1 when it has
   * none. The owner sets it after ep_open, before ep_connect. A transport
   * applies it as NCCL's own transport for its fabric does, or ignores it:
   * verbs uses it for the GRH traffic class and the service level of every
   * QP unless RERAIL_IB_TC / RERAIL_IB_SL are set (NCCL's net_ib rule);
   * TCP ignores it, as NCCL's socket transport sets no IP_TOS from it. */
  int traffic_class;
  /* Telemetry recorders the owner installs (NULL when off): the rail records
   * every write it sends and every write that lands, with rr_tel_record(). */
  rr_tel_rail *tel_tx, *tel_rx;
  /* The host's work on the endpoint's queues (rr_tel_cost), running totals
   * kept by a transport with work queues (verbs) as plain counters under
   * the owner's thread, and published to its recorder from progress() and
   * before destroy() (rr_tel_cost_publish): the .prom file's doorbells,
   * work requests and completions. A transport without them (TCP: its cost
   * is system calls per stream, not counted) leaves them 0. Tests read
   * them directly. cost_published: what the recorder has of them. */
  rr_tel_cost cost, cost_published;
};

#define rr_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---------------------------------------------------------- transports */

/* The transports a build knows (rr_rail_transports, in the order the core
 * asks them). Each finds its own devices and opens them: the core knows a
 * transport only through this table and rr_rail_ops. Once per process, under
 * the core's lock, the core asks each transport in turn to probe, then opens
 * what it found, then goes on to the next with the devices opened so far. */

/* One device a transport found and has not opened yet. */
typedef struct rr_rail_found {
  int which;                           /* the transport's own number for it (dev_open) */
  char name[RR_RAIL_DEV_NAME_MAX];     /* for logs: "mlx5_0:1", "eth0" */
  char netdev[IF_NAMESIZE];            /* the IP interface it sits on, "" none */
} rr_rail_found;

/* What the core hands a probe. */
typedef struct rr_rail_probe {
  /* The interfaces RERAIL_SOCKET_IFNAME leaves (every interface that is up
   * when it is unset; NCCL_SOCKET_IFNAME's syntax), with their addresses. */
  const rr_netif *nifs;
  int nnifs;
  const char *ifname_spec;             /* RERAIL_SOCKET_IFNAME as given ("" unset) */
  /* Devices the transports before this one opened: their interfaces are
   * taken, and a host with RDMA ports pools no plain interface by default. */
  const rr_rail_dev *const *opened;
  int nopened;
  /* Told of each candidate the transport leaves out and why (NULL: nobody
   * asks; the transport logs it anyway): `rerail devices` lists them, so an
   * operator sees why a NIC is not used. `reason` is one of the
   * RR_LEFT_OUT_* words (stable, for scripts), `why` a sentence. */
  void (*left_out)(void *arg, const char *name, const char *reason, const char *why);
  void *left_out_arg;
} rr_rail_probe;

/* Why a candidate device was left out (rr_rail_probe.left_out's reason). */
#define RR_LEFT_OUT_NOT_SELECTED "not_selected"   /* RERAIL_IB_HCA leaves it out */
#define RR_LEFT_OUT_NOT_ACTIVE "not_active"       /* the port is not ACTIVE */
#define RR_LEFT_OUT_UNUSABLE "unusable"           /* cannot be opened or queried, no GID, odd link layer */
#define RR_LEFT_OUT_TRANSPORT "transport"         /* RERAIL_TRANSPORT rules its transport out */
#define RR_LEFT_OUT_RDMA_PREFERRED "rdma_preferred" /* a plain interface on a host with RDMA ports */
#define RR_LEFT_OUT_VIRTUAL "virtual"             /* a virtual interface beside physical ones */
#define RR_LEFT_OUT_LOOPBACK "loopback"           /* lo beside other interfaces */
#define RR_LEFT_OUT_NOT_OPENED "not_opened"       /* found, but its transport could not open it */
#define RR_LEFT_OUT_TOO_MANY "too_many"           /* past the most devices rerail offers */

typedef struct rr_rail_transport {
  const char *name;
  /* Find the devices this transport serves on this host into out[0..max),
   * in the order they become devices; returns how many. Called once. */
  int (*probe)(const rr_rail_probe *in, rr_rail_found *out, int max);
  /* Open found device `which` as rerail device `index`, with its attr
   * (identity included) filled; or say why not (the core leaves it out). */
  rr_status (*dev_open)(int which, int index, rr_rail_dev **dev);
} rr_rail_transport;

extern const rr_rail_transport *const rr_rail_transports[];
extern const int rr_rail_ntransports;

#endif
