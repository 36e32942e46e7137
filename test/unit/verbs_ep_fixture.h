/* What the verbs endpoint tests (test_verbs_ep_*.c) share: the verbs rail's endpoints on
 * any host, on a device whose libibverbs is a table of fakes (its QPs, CQs and async event
 * queue are plain structs, posts are recorded) so that a QP fatal, a CQ error or a fatal
 * device can be raised at will and what is posted can be read back.
 *
 * Loopback (open_pair, setup_pair): two endpoints connected to each other, RDMA WRITEs
 * copied into the peer's memory at once, writes with immediate and SENDs completed on the
 * peer's receive queue through a CQ the test can hold back (cq_gate), or whose completions
 * of one QP wait aside (late_qpn); what the engines of the pair were told is logged
 * (evlog). The state is global, as a libibverbs is: each test program runs its tests one
 * after the other, and setup and open_pair reset it. */
#ifndef RERAIL_TEST_VERBS_EP_FIXTURE_H
#define RERAIL_TEST_VERBS_EP_FIXTURE_H
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "rail_verbs.h"
#include "verbs_ep.h" /* RECV_TAG: a receive completion's wr_id */
#include "verbs_ring.h"

/* ---- a fake device ------------------------------------------------------------ */

#define FAKE_QPS 4
#define FAKE_EVENTS 8
#define FAKE_CQS 8
#define FAKE_RQ 1024
#define FAKE_CQ 4096
#define MAX_POSTS 1024
#define FAKE_GIDS 4

extern struct ibv_context fake_ctx;
extern struct ibv_pd fake_pd;
extern struct ibv_qp fake_qps[FAKE_QPS];
extern int nqps;
extern struct ibv_async_event events[FAKE_EVENTS];
extern int nevents, next_event, nacked;

/* Loopback: each QP's posted receives (a FIFO). */
typedef struct fake_loopback_qp {
  uint32_t dest_qpn;
  uint64_t rq_id[FAKE_RQ];
  uint64_t rq_addr[FAKE_RQ];
  unsigned rq_head, rq_tail;
} fake_loopback_qp;
extern fake_loopback_qp lb[FAKE_QPS];
/* Every CQ's completions in one list, each with the CQ it is on, in the order they were made. */
extern struct ibv_wc cq[FAKE_CQ];
extern struct ibv_cq *cq_of[FAKE_CQ]; /* NULL once polled */
extern unsigned cq_head, cq_tail;
extern int cq_gate; /* completions poll_cq may still return; -1: no limit */
/* Completions of this QP number wait aside (its packets are late) until released. */
extern uint32_t late_qpn;
extern struct ibv_wc late[FAKE_CQ];
extern unsigned nlate;
/* A request the NIC fails, counted from 1 over every request the loopback carries (0: none). */
extern unsigned fail_wr_at, loopback_wrs;

/* Every request posted, in order, with the call (the doorbell) that carried it. */
typedef struct fake_post {
  enum ibv_wr_opcode opcode;
  unsigned flags;
  uint32_t len;
  int call;
} fake_post;
extern fake_post posts[MAX_POSTS];
extern int nposts, ncalls;

/* NCCL's buffers of the registration tests: each ibv_reg_mr of one gets an MR of its own
 * (lkey = the call's number), and the first may be made to block until released. */
extern char user_buf[3][4096];
extern int user_regs, user_deregs;
extern pthread_mutex_t reg_mu;
extern pthread_cond_t reg_cv;
extern int reg_block_first, reg_inside, reg_release;

extern struct ibv_qp_cap last_qp_cap;         /* what the last QP was created with */
extern struct ibv_ah_attr last_av;            /* the address vector of the last QP moved to RTR */
extern struct ibv_ah_attr rtr_av[FAKE_QPS];   /* ... and of each QP */

/* The device as libibverbs lists it, for a reset (verbs_reset.c): gone while device_listed
 * is 0, back (opened as fake_ctx2, a new context) when 1, with the port in fake_port_state. */
extern struct ibv_context fake_ctx2;
extern struct ibv_pd fake_pd2;
extern int device_listed, fake_port_state;
extern int ctx_opens, ctx_closes, pd_allocs, pd_deallocs;

/* The port's GID table as libibverbs gives it. */
extern union ibv_gid gids[FAKE_GIDS];
extern int fake_link_layer;

extern const rr_ibv_api fake_api;
extern const rr_rail_events no_events; /* nothing completes on a fake CQ */

int f_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int f_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int f_poll_cq(struct ibv_cq *c, int n, struct ibv_wc *wc);
void push_wc_to(struct ibv_cq *c, struct ibv_wc wc);
/* A completion goes to the CQ of the QP it names. */
void push_wc(struct ibv_wc wc);
void fake_reset(void);

/* ---- a world: one fake device, two endpoints ---------------------------------- */

typedef struct world {
  verbs_hca *h;
  rr_rail_ep *ep[2];
} world;

/* Two endpoints of the fake device, each connected to a peer that does not exist. */
int setup(void **state);
int teardown(void **state);
rr_status progress(world *w, int i);
rr_rail_dev_event_kind read_events(world *w);
rr_status post_write(world *w, int i, size_t len);
rr_status flush(world *w, int i);

/* ---- a loopback pair ------------------------------------------------------------- */

/* What the engines of the pair were told, in order. */
enum { EV_DONE = 1, EV_WRITE, EV_CTRL, EV_DRAIN };
#define MAX_LOG 1024
typedef struct pair_event {
  int ep, kind;
  uint32_t value;          /* imm, epoch, or the first 4 bytes of a control message */
  uint32_t len;            /* a write's length as the arrival reports it */
} pair_event;
extern pair_event evlog[MAX_LOG];
extern int nlog;

void set_qps(const char *n);
/* The world's endpoints replaced by two of one fake device, opened with `qps` QPs each and
 * connected to each other. */
void open_pair(world *w, const char *qps);
/* Two endpoints of one fake device, each connected to the other: one QP each ... */
int setup_pair(void **state);
/* ... or two (ep0: QPs 0x100, 0x101; ep1: 0x102, 0x103). */
int setup_pair2(void **state);
rr_status ctrl(world *w, int i, uint32_t v);
void expect(int k, int ep, int kind, uint32_t value);
rr_status write_imm(world *w, int i, uint32_t imm);

#endif
