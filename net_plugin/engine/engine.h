/* The transfer engine: one per connection end (send or receive).
 *
 * Messages move as chunks written into receiver-posted buffers. Progress is
 * tracked at both ends: the sender's chunks are posted (queued on a rail),
 * transmitted (left this host's hands) and acked (the receiver reported the
 * whole receive landed); the receiver counts chunks received per
 * sub-receive until the message is done. A send completes towards NCCL only
 * when its buffer may be reused: small messages are copied into a bounce
 * buffer and complete at once, larger ones when acked. Keeping the data until
 * the ack is what lets a later failover replay it. */
#ifndef RERAIL_ENGINE_H
#define RERAIL_ENGINE_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "engine_wire.h"
#include "rail.h"

/* What NCCL's mhandle points at. */
typedef struct rr_mr {
  void *base;
  size_t size;
  int type;                 /* RR_PTR_* */
  rr_rail_mr *rail_mr;      /* registration on the rail(s) */
} rr_mr;

enum rr_engine_role { RR_ENGINE_SEND = 1, RR_ENGINE_RECV = 2 };
enum rr_request_kind { RR_REQ_SEND = 0x5e, RR_REQ_RECV = 0x7e };

typedef struct rr_engine rr_engine;

typedef struct rr_send_req {
  uint8_t kind;             /* RR_REQ_SEND */
  uint8_t in_use;
  uint8_t user_done;        /* NCCL has been told it is done */
  uint8_t acked;
  uint8_t sub;
  int16_t bounce;           /* bounce buffer index, -1 when none */
  rr_engine *engine;
  uint32_t seq;
  const char *data;         /* user buffer, or the bounce buffer */
  size_t size;
  const rr_rail_mr *mr;
  uint64_t raddr;
  uint32_t rkey;
  uint32_t nchunks, posted, transmitted;
} rr_send_req;

typedef struct rr_recv_sub {
  char *data;
  size_t posted_size;
  size_t size;              /* as sent, known once the last chunk landed */
  uint32_t expected;        /* chunk count, 0 until the last chunk landed */
  uint32_t received;
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

struct rr_engine {
  int role;
  pthread_mutex_t lock;     /* NCCL may test from one thread and close from another */
  size_t chunk_size;
  rr_rail_ep *rail;         /* the active rail */
  rr_status failed;         /* sticky failure: every later call reports it */
  int ctrl_urgent;          /* a queued control message must leave before we return */
  uint32_t epoch;

  /* sender */
  engine_cts_slot cts[RR_NET_MAX_REQUESTS];
  uint32_t send_seq;        /* the receive the next isend matches */
  rr_send_req sreq[RR_SEND_POOL];
  uint16_t fifo[RR_SEND_POOL]; /* active sends in posting order */
  uint32_t fifo_head, fifo_tail, fifo_post; /* post: first entry with unposted chunks */
  char *bounce;             /* RR_BOUNCE_COUNT * RR_BOUNCE_SIZE, allocated on first use */
  int16_t bounce_free[RR_BOUNCE_COUNT];
  int nbounce_free;

  /* receiver */
  rr_recv_req rreq[RR_NET_MAX_REQUESTS];
  uint32_t recv_seq;        /* sequence number of the next irecv */
};

extern const rr_rail_events rr_engine_rail_events;

rr_status rr_engine_init(rr_engine *e, int role, size_t chunk_size);
/* The engine drives ep from now on (events must be rr_engine_rail_events, arg e). */
void rr_engine_attach_rail(rr_engine *e, rr_rail_ep *ep);
void rr_engine_fini(rr_engine *e);

rr_status rr_engine_isend(rr_engine *e, void *data, size_t size, int tag, rr_mr *mr,
                          void **request);
rr_status rr_engine_irecv(rr_engine *e, int n, void **data, const size_t *sizes,
                          const int *tags, rr_mr **mrs, void **request);
rr_status rr_engine_test(void *request, int *done, size_t *sizes);

#endif
