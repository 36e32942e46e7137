/* The TCP rail's endpoint: its streams, their transmit queues and receive
 * state, shared by the transmit side and the ops (rail_tcp.c) and the
 * receive side (tcp_rx.c). Internal to the rail; the core sees rail_tcp.h. */
#ifndef RERAIL_TCP_EP_H
#define RERAIL_TCP_EP_H
#include "rail_tcp.h"
#include "tcp_frame.h"

#include <stddef.h>
#include <stdint.h>

/* Receive staging (headers and small payloads) starts at STAGING_MIN and
 * doubles, up to STAGING_MAX, each time a read fills it: a receiver of small
 * messages reads several per system call, while a sender, which receives only
 * clear-to-sends and acknowledgements, keeps 1 KiB instead of 8
 * (bench/RESULTS.md, "Thousands of connections"). A control message must
 * fit whole. */
#define STAGING_MIN 1024
#define STAGING_MAX 8192
_Static_assert(STAGING_MIN >= TCP_FRAME_BYTES + RR_RAIL_CTRL_MAX, "a control frame fits the smallest staging");
/* Bytes one progress call moves per stream and direction: enough to keep a
 * fast link busy, small enough that no NCCL call is held for long. */
#define PROGRESS_BUDGET (4u << 20)

typedef struct tcp_tx {
  uint8_t wire[TCP_FRAME_BYTES]; /* the encoded header */
  uint32_t len;               /* payload bytes behind it */
  const char *payload;
  uint32_t sent;              /* bytes of hdr+payload already handed to the kernel */
  int16_t ctrl_slot;          /* -1 for writes */
  uint64_t wr_id;
  uint64_t post_ns;           /* writes: for telemetry */
} tcp_tx;

/* RX_SINK reads a write's payload into a scratch buffer and forgets it: the
 * engine refused it (an invalidated epoch) or an invalidation cut it off mid-way. */
typedef enum rx_state { RX_HEADER, RX_DIRECT, RX_SINK } rx_state;

typedef struct tcp_stream {
  int fd;
  /* transmit FIFO */
  tcp_tx *tx;                 /* tx_cap entries, grown up to TX_DEPTH */
  uint32_t tx_cap;
  uint32_t tx_head, tx_tail;  /* free-running; tail - head = queued */
  uint32_t writes_queued;
  size_t queued_bytes;        /* header+payload bytes not yet handed to the kernel */
  /* receive */
  rx_state rx;
  /* Allocated when the stream first carries a byte: the streams past the
   * first carry only bulk writes, which many connections never send. */
  char *staging;
  uint32_t stage_cap;             /* its size: STAGING_MIN .. STAGING_MAX */
  uint32_t stage_off, stage_len;  /* unread bytes are [stage_off, stage_len) */
  char *direct_dst;               /* RX_DIRECT: where the rest of the payload goes */
  uint32_t direct_left;
  uint64_t direct_start_ns;       /* when the write being read began to arrive */
  rr_write_hdr direct_hdr;        /* the write being read, for on_write_recv */
  uint32_t idle_polls;            /* receive polls in a row that found nothing */
  uint8_t drain_seen;             /* a drain marker arrived on this stream */
  uint8_t eof;                    /* the peer closed (or reset) this stream */
  uint32_t drain_epoch;           /* the epoch of the last one */
} tcp_stream;

typedef struct tcp_ep {
  rr_rail_ep base;
  int connected;            /* ep_connect adopted the sockets */
  int nstreams;
  uint32_t next_stream;     /* round-robin cursor for writes */
  uint32_t progress_calls;
  rr_status failed;         /* sticky: first failure */
  uint64_t last_rx_ns;      /* last time any byte arrived */
  tcp_stream *streams[RR_TCP_MAX_STREAMS];
  struct tcp_ctrl *ctrl;    /* allocated with the first control message */
} tcp_ep;

/* rail_tcp.c. Fail the endpoint (sticky; its sockets close now) with st,
 * logged as information: the engine decides what deserves a warning. */
rr_status tcp_ep_fail(tcp_ep *ep, rr_status st, const char *what, int err);
/* A socket error as a status: RR_ERR_PEER for a reset or closed pipe,
 * RR_ERR_RAIL for anything else. */
rr_status tcp_classify_errno(int err);

/* tcp_rx.c. Read and deliver what stream s holds, up to PROGRESS_BUDGET
 * bytes: RR_OK, the endpoint's failure, or RR_ERR_PEER with s->eof set
 * when the peer closed the stream (the endpoint not failed yet). */
rr_status tcp_stream_receive(tcp_ep *ep, tcp_stream *s);
/* The peer closed stream `closed`: deliver what the others still hold,
 * then fail the endpoint with RR_ERR_PEER. */
rr_status tcp_drain_after_eof(tcp_ep *ep, const tcp_stream *closed);
/* Close a socket without sending a reset (reads what is unread first). */
void tcp_close_quietly(int fd);

#endif
