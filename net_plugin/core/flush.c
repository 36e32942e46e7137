/* iflush: making a receive into GPU memory visible to the GPU.
 *
 * A NIC's writes into GPU memory may still be on their way through PCIe when
 * the receive completes; a read by the same NIC from that memory completes
 * only behind them. So, as NCCL's IB transport does, a receive into memory
 * registered as CUDA or DMA-BUF is flushed by an RDMA read of its last
 * buffer on a device's loopback QP (rail/verbs/verbs_flush.c), and the flush
 * request NCCL tests is done when the read is. Host memory needs nothing
 * (a NULL request), nor does anything with RERAIL_GDR_FLUSH_DISABLE=1.
 *
 * A connection may have placed the bytes through any of its rails (balance
 * mode, or a failover mid-receive): the read goes out on the NIC of every
 * rail that carries traffic now. A NIC that cannot flush (port down, its QP
 * in error, a read pending past the progress timeout) hands its read to
 * another NIC of the connection's chain, so a rail failure the connection
 * survives never fails a flush. Only when no NIC of the connection can
 * complete a read for a while (4 progress timeouts: every rail is down, and
 * the connection itself is failing) does test() return an error; it never
 * waits forever. */
#include "core_internal.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_log.h"
#include "rr_params.h"

#include <stdlib.h>

enum { LEG_WAITING = -1 }; /* not posted yet: its device's flush queue was full */

typedef struct flush_leg {
  rr_rail_dev *dev;          /* NULL once the leg is over */
  rr_rail_flush f;           /* the device's while PENDING */
} flush_leg;

typedef struct rr_flush_req {
  uint8_t kind;              /* RR_REQ_FLUSH */
  const rr_mr *mr;
  const void *addr;          /* the byte read back: the start of the last non-empty buffer */
  uint64_t start_ns, leg_timeout_ns;
  int nlegs;
  flush_leg leg[RR_MAX_RAILS];
  int ncand;                 /* the connection's devices, those carrying traffic first */
  rr_rail_dev *cand[RR_MAX_RAILS];
  uint32_t tried;            /* by candidate: given a read in this round */
  uint64_t round_ns;         /* when the current round began */
  int done_ok;               /* reads that completed */
} rr_flush_req;

static int needs_flush(const rr_mr *mr) {
  if (mr->type == RR_PTR_CUDA || mr->type == RR_PTR_DMABUF) return 1;
  return rr_params_get()->test_force_gpu_flush; /* tests: host memory as if it were GPU memory */
}

/* Can dev flush this registration at all? */
static int dev_can_flush(const rr_mr *mr, const rr_rail_dev *dev) {
  return dev->ops->flush_post && dev->index >= 0 && dev->index < RR_MAX_DEVS && mr->reg[dev->index];
}

/* Post leg's read on its device; a device that cannot take it is marked FAILED. */
static void leg_post(rr_flush_req *q, flush_leg *l) {
  rr_status st = l->dev->ops->flush_post(l->dev, q->mr->reg[l->dev->index], q->addr, &l->f);
  if (st == RR_OK) return; /* PENDING */
  if (st == RR_AGAIN) l->f.state = LEG_WAITING;
  else l->f.state = RR_FLUSH_FAILED;
}

/* A candidate not given a read in this round, or -1. */
static int next_candidate(rr_flush_req *q) {
  for (int c = 0; c < q->ncand; c++)
    if (!(q->tried & (1u << c)) && dev_can_flush(q->mr, q->cand[c])) return c;
  return -1;
}

static void leg_start(rr_flush_req *q, flush_leg *l, int c) {
  q->tried |= 1u << c;
  *l = (flush_leg){.dev = q->cand[c]};
  leg_post(q, l);
}

/* The connection's devices: those of rails carrying traffic, then the rest
 * of its chain; *nactive says how many of the first kind. */
static int connection_devices(rr_engine *e, rr_rail_dev **out, int *nactive) {
  int n = 0;
  pthread_mutex_lock(&e->lock);
  for (int pass = 0; pass < 2; pass++) {
    for (int r = 0; r < e->nrails; r++) {
      if (!e->rails[r].ep || (pass == 0) != (engine_rail_usable(e, r) != 0)) continue;
      rr_rail_dev *d = e->rails[r].ep->dev;
      int dup = 0;
      for (int i = 0; i < n; i++) dup |= out[i] == d;
      if (!dup && n < RR_MAX_RAILS) out[n++] = d;
    }
    if (pass == 0) *nactive = n;
  }
  pthread_mutex_unlock(&e->lock);
  return n;
}

rr_status rr_net_iflush(rr_recv_comm *comm, int n, void **data, const int *sizes,
                        void **mhandles, void **request) {
  if (!request) return RR_ERR_INVALID;
  *request = NULL;
  if (!comm || comm->magic != RR_MAGIC_RECV) {
    RR_WARN("iflush: not a rerail receive comm");
    return RR_ERR_INVALID;
  }
  if (n < 1 || n > RR_NET_MAX_RECVS || !data || !sizes) return RR_ERR_INVALID;
  /* NCCL reads back the last buffer that received anything. */
  int last = -1;
  for (int i = 0; i < n; i++)
    if (sizes[i] > 0) last = i;
  if (last < 0 || !mhandles || !mhandles[last]) return RR_OK;
  const rr_mr *mr = mhandles[last];
  if (!needs_flush(mr) || rr_params_get()->gdr_flush_disable) return RR_OK;
  const char *addr = data[last];
  if (!addr || addr < (const char *)mr->base || addr >= (const char *)mr->base + mr->size) {
    RR_WARN("iflush: buffer %d (%p) is outside its registration", last, data[last]);
    return RR_ERR_INVALID;
  }
  rr_flush_req *q = calloc(1, sizeof *q);
  if (!q) return RR_ERR_NOMEM;
  q->kind = RR_REQ_FLUSH;
  q->mr = mr;
  q->addr = addr;
  q->start_ns = q->round_ns = rr_now_ns();
  q->leg_timeout_ns = rr_params_get()->progress_timeout_ms * 1000000ull;
  int nactive = 0;
  q->ncand = connection_devices(&comm->engine, q->cand, &nactive);
  /* A read through every NIC carrying traffic; none carrying any: one. */
  for (int c = 0; c < q->ncand && (c < nactive || q->nlegs == 0); c++)
    if (dev_can_flush(mr, q->cand[c])) leg_start(q, &q->leg[q->nlegs++], c);
  if (q->nlegs == 0) {
    /* No verbs NIC in the connection: nothing wrote through PCIe for us. */
    free(q);
    return RR_OK;
  }
  *request = q;
  rr_counter_inc(RR_CTR_FLUSH_REQUESTS);
  return RR_OK;
}

/* Drive one leg; returns 1 while it is still in flight. */
static int leg_progress(rr_flush_req *q, flush_leg *l, uint64_t now) {
  int st = l->f.state;
  if (st == LEG_WAITING) {
    leg_post(q, l);
    st = l->f.state;
  }
  if (st == RR_FLUSH_PENDING) {
    l->dev->ops->flush_poll(l->dev);
    st = l->f.state;
    if (st == RR_FLUSH_PENDING && now - l->f.posted_ns > q->leg_timeout_ns) {
      l->dev->ops->flush_abandon(l->dev, &l->f);
      st = l->f.state;
    }
  }
  if (st == RR_FLUSH_DONE) {
    q->done_ok++;
    l->dev = NULL;
    return 0;
  }
  if (st != RR_FLUSH_FAILED) return 1;
  /* This NIC cannot flush: another of the connection's takes the read. */
  int c = next_candidate(q);
  if (c >= 0) {
    leg_start(q, l, c);
    return 1;
  }
  l->dev = NULL;
  return 0;
}

rr_status rr_core_flush_test(void *request, int *done) {
  rr_flush_req *q = request;
  uint64_t now = rr_now_ns();
  int busy = 0;
  for (int i = 0; i < q->nlegs; i++)
    if (q->leg[i].dev) busy += leg_progress(q, &q->leg[i], now);
  if (busy) {
    *done = 0;
    return RR_OK;
  }
  if (q->done_ok == 0) {
    /* Every NIC failed its read. Their flush QPs are made anew on the next
     * read: go round again for a while, then give up. */
    if (now - q->start_ns < 4 * q->leg_timeout_ns) {
      /* not at once: a NIC that just refused would only refuse again */
      if (now - q->round_ns > q->leg_timeout_ns / 10) {
        q->round_ns = now;
        q->tried = 0;
        int c = next_candidate(q);
        if (c >= 0) leg_start(q, &q->leg[0], c);
      }
      *done = 0;
      return RR_OK;
    }
    RR_WARN("iflush: no NIC of the connection could flush the receive (%d tried for %llu ms)", q->ncand,
            (unsigned long long)((now - q->start_ns) / 1000000));
    free(q);
    *done = 1;
    return RR_ERR_RAIL;
  }
  free(q);
  *done = 1;
  return RR_OK;
}
