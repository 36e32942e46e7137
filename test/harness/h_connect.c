/* Connection setup as NCCL's proxy does it: the comm-wide attribute hints,
 * then connect() and accept() called again and again until each returns a
 * comm, each call timed (one that blocks longer than --max-call-ms is a
 * failure). */
#include "harness.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

static void check_call_time(const char *what, int idx, uint64_t ns) {
  if ((double)ns * 1e-9 > g_opt.max_call_s)
    h_error("a single %s() call for connection %d blocked for %.3f s: NCCL requires connect/accept "
            "not to block (limit %.3f s)", what, idx, (double)ns * 1e-9, g_opt.max_call_s);
}

/* NCCL's attribute hints (v11+): the comm-wide ones before connect/accept,
 * the transfer ones before the first isend/irecv of an operation. */
void h_set_attrs(hnet *n, int xfer_send, int xfer_recv) {
  if (!n->set_net_attr) return;
  hnet_net_attr a;
  for (int i = 0; i < 4; i++) a.send[i] = a.recv[i] = HNET_ATTR_UNDEF;
  a.op = a.algo = a.proto = (uint32_t)HNET_ATTR_UNDEF;
  /* [max peers, min peers, max flows per peer, min flows per peer] */
  a.send[1] = a.send[3] = a.recv[1] = a.recv[3] = 1;
  a.send[0] = a.recv[0] = 1;
  a.send[2] = a.recv[2] = g_opt.conns;
  a.op = 1u << 5 | 1u << 6 | 1u << 7;   /* SendRecv, Send, Recv */
  if (xfer_send) a.send[0] = a.send[1] = 1, a.send[2] = a.send[3] = g_opt.conns, a.op = 1u << 6;
  if (xfer_recv) a.recv[0] = a.recv[1] = 1, a.recv[2] = a.recv[3] = g_opt.conns, a.op = 1u << 7;
  int rc = n->set_net_attr(n, &a);
  if (rc != HNET_SUCCESS) h_error("setNetAttr() returned %s", hnet_result_str(rc));
}

/* The connection's id as the plugin knows it (the same at both ends), for
 * scripts that play a peer holding the handle: hostile_peers.sh reopens a
 * rail of connection k by it. "<role>.connected.<k>" for a send comm,
 * "<role>.accepted.<k>" for a receive comm; nothing when the plugin exports
 * no ids. A receive comm's id is final when accept() returns it; a send
 * comm's only once the connection is confirmed: a plugin may hand the comm
 * out before the listener's last answer and start the connection over as a
 * new one (a new id) until its first isend() returns a request
 * (include/rerail/conn_id.h). So the sender publishes then (h_traffic.c),
 * or before it closes a comm that never got one.
 * With --scale-report every id waits for the close (h_conn_release): a file
 * per connection (two inode operations on the rendezvous directory's file
 * system, slow on ext4 after a run deleted thousands) would otherwise be
 * timed as the plugin's setup and traffic, and a plugin that exports no ids
 * (NCCL's socket transport, the benchmark's other side) pays none. */
int h_conn_publish_due(void) { return !g_opt.scale_report; }

int h_conn_publish_id(h_conn *c) {
  uint64_t id;
  if (!g_opt.rdv || hnet_conn_id(c->net, c->comm, &id) != 0) return 0;
  char name[64], text[32];
  snprintf(name, sizeof name, "%s.%d", c->is_send ? "connected" : "accepted", c->idx);
  snprintf(text, sizeof text, "%016" PRIx64 "\n", id);
  c->id_published = 1;
  return h_rdv_put_flag(g_opt.role, name, text);
}

/* One connect() (is_send) or accept() call for connection c, as NCCL's proxy
 * makes it: 1 when it gave the comm (a receive comm's id published and its
 * listen comm closed, as NCCL does at once), 0 when it is still pending, -1
 * on an error (reported). */
static int try_conn(h_conn *c, int is_send) {
  if (c->comm) return 0;
  const char *call = is_send ? "connect" : "accept";
  void *comm = NULL;
  uint64_t t0 = h_now_ns();
  int rc = is_send ? c->net->connect(c->net, g_opt.dev, c->handle, &comm) : c->net->accept(c->net, c->listen, &comm);
  uint64_t dt = h_now_ns() - t0;
  h_note_call(is_send ? A_CONNECT : A_ACCEPT, dt);
  check_call_time(call, c->idx, dt);
  if (rc != HNET_SUCCESS) {
    h_error("%s() for connection %d returned %s", call, c->idx, hnet_result_str(rc));
    return -1;
  }
  if (!comm) {
    atomic_fetch_add_explicit(is_send ? &g_cnt.null_connect : &g_cnt.null_accept, 1, memory_order_relaxed);
    return 0;
  }
  c->comm = comm;
  c->id_published = 0;
  if (!is_send) {
    if (h_conn_publish_due() && h_conn_publish_id(c)) return -1;
    /* NCCL closes the listen comm as soon as accept() has returned the comm */
    rc = H_CALL(A_CLOSE, c->net->close_listen(c->net, c->listen));
    c->listen = NULL;
    if (rc != HNET_SUCCESS) {
      h_error("closeListen() for connection %d returned %s", c->idx, hnet_result_str(rc));
      return -1;
    }
  }
  return 1;
}

int h_connect_all(hnet *n, h_conn *send, int nsend, h_conn *recv, int nrecv) {
  int pending = 0;
  (void)n;
  /* NCCL sets the comm-wide hints before every connect and accept */
  for (int i = 0; i < nsend; i++) h_set_attrs(send[i].net, 0, 0);
  for (int i = 0; i < nrecv; i++) h_set_attrs(recv[i].net, 0, 0);
  for (int i = 0; i < nsend; i++) pending += !send[i].comm;
  for (int i = 0; i < nrecv; i++) pending += !recv[i].comm;
  while (pending) {
    int progress = 0;
    for (int i = 0; i < nsend + nrecv; i++) {
      int got = try_conn(i < nsend ? &send[i] : &recv[i - nsend], i < nsend);
      if (got < 0) return -1;
      pending -= got;
      progress |= got;
    }
    if (atomic_load(&g_abort)) return -1;
    if (h_peer_aborted()) {
      h_error("the %s aborted during connection setup", h_role_name(1 - g_opt.role));
      return -1;
    }
    if (!progress) {
      struct timespec ts = {0, 50 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  return 0;
}
