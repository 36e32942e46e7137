/* NCCL profiler events (net v10+): one per message, from post to completion.
 *
 * A profiler plugin decodes the event with NCCL's own declaration of the
 * descriptor plugin_id names, so the engine builds NCCL's structs
 * (include/nccl/profiler_net.h, layouts pinned by abi_layout_checks.h): the
 * socket descriptor for rails made of byte streams, the IB one for rails
 * made of queue pairs, chosen by what the rail says it is (rr_rail_ops.wire);
 * no transport header is needed. A message may move over several rails
 * (failover, balance): the event names the rail that carries control when
 * the message is posted. */
#include <string.h>

#include "engine_internal.h"
#include "nccl/abi_layout_checks.h"
#include "nccl/profiler_net.h"

_Static_assert(sizeof(nccl_profiler_net_sock_descr_v1_t) <= sizeof(engine_prof_descr) &&
                   sizeof(nccl_profiler_net_ib_descr_v1_t) <= sizeof(engine_prof_descr),
               "every descriptor fits the engine's buffer");
_Static_assert(ENGINE_PROF_SEND == NCCL_PROFILER_SOCK_OP_SEND && ENGINE_PROF_RECV == NCCL_PROFILER_SOCK_OP_RECV,
               "the engine's directions are the socket descriptor's ops");

/* libibverbs opcodes (kept out of the engine, which includes no transport
 * header; test_verbs_ep_connect checks them against <infiniband/verbs.h>): a sender
 * moves a message as RDMA writes with immediate (IBV_WR_RDMA_WRITE_WITH_IMM),
 * and the receiver's NIC reports each of them as IBV_WC_RECV_RDMA_WITH_IMM. */
#define PROF_IBV_WR_RDMA_WRITE_WITH_IMM 1
#define PROF_IBV_WC_RECV_RDMA_WITH_IMM 129

int64_t engine_prof_describe(const rr_rail_ep *ep, int op, uint32_t seq, size_t length,
                             engine_prof_descr *out) {
  memset(out, 0, sizeof *out);
  if (ep && ep->ops->wire == RR_RAIL_WIRE_QUEUE_PAIRS) {
    nccl_profiler_net_ib_descr_v1_t d = {.type = NCCL_PROFILE_QP};
    d.qp.device = ep->dev->index;
    d.qp.wr_id = seq; /* the message's sequence number: one event spans its work requests */
    d.qp.opcode = op == ENGINE_PROF_SEND ? PROF_IBV_WR_RDMA_WRITE_WITH_IMM : PROF_IBV_WC_RECV_RDMA_WITH_IMM;
    d.qp.qp_num = ep->wire_id;
    d.qp.length = length;
    memcpy(out->bytes, &d, sizeof d);
    return (int64_t)(NCCL_PROFILER_NET_TYPE_IB | NCCL_PROFILER_NET_IB_VER);
  }
  nccl_profiler_net_sock_descr_v1_t d = {.type = NCCL_PROFILE_SOCKET};
  d.sock.fd = ep ? ep->wire_id : -1;
  d.sock.op = op;
  d.sock.length = length;
  memcpy(out->bytes, &d, sizeof d);
  return (int64_t)(NCCL_PROFILER_NET_TYPE_SOCK | NCCL_PROFILER_NET_SOCK_VER);
}

/* The rail a message posted now starts on: the control rail, else the
 * first (every rail down: the event still says which connection). */
static const rr_rail_ep *posting_ep(const rr_engine *e) {
  int r = engine_control_rail(e);
  if (r < 0 && e->nrails > 0) r = 0;
  return r >= 0 ? e->rails[r].ep : NULL;
}

void engine_prof_start(rr_engine *e, void **event, void *phandle, int op, uint32_t seq,
                       size_t length) {
  *event = NULL;
  if (!e->cfg.profiler || !phandle) return;
  engine_prof_descr d;
  int64_t id = engine_prof_describe(posting_ep(e), op, seq, length, &d);
  e->cfg.profiler(event, NCCL_PROFILER_NET_EVENT_START, phandle, id, d.bytes);
}

void engine_prof_stop(rr_engine *e, void **event) {
  if (!e->cfg.profiler || !*event) return;
  e->cfg.profiler(event, NCCL_PROFILER_NET_EVENT_STOP, NULL, 0, NULL);
  *event = NULL;
}
