/* The rail contract test (rail.h is the spec): one set of cases, written
 * once in rail_contract.c, run over every transport through a fixture that
 * opens two connected endpoints of it, as UCX instantiates its uct tests
 * over every transport. A new transport is done when its fixture passes.
 *
 * Side 0 ("A") and side 1 ("B") each hold one endpoint and one registered
 * buffer; the cases write from A's buffer into B's and send control
 * messages both ways. The harness plays the engine: rc_events record what
 * each endpoint delivers and check it on the spot (bytes placed, order,
 * contents), into counters the cases assert on. */
#ifndef RERAIL_RAIL_CONTRACT_H
#define RERAIL_RAIL_CONTRACT_H
#include <stddef.h>
#include <stdint.h>

#include "rail.h"

#define RC_BUF_BYTES (8u << 20)
#define RC_MAX_WRITES 1024
#define RC_LOG_MAX 8192
#define RC_MAX_EPOCHS 64

enum rc_ev_kind { RC_EV_RECV = 1, RC_EV_CTRL, RC_EV_DRAIN };

typedef struct rc_event {
  int kind;      /* enum rc_ev_kind */
  uint64_t id;   /* RECV: imm; CTRL: sequence number; DRAIN: epoch */
} rc_event;

/* A write as its writer posted it. */
typedef struct rc_write {
  const char *src;
  char *dst;
  uint32_t len;
  uint32_t bulk; /* of len, bytes sent as a plain write ahead of the immediate (adaptive routing) */
  uint32_t imm;
  uint16_t fence; /* its epoch tag (rr_write_wr.fence) */
  int done;      /* on_write_done seen */
  int recvd;     /* on_write_recv seen */
  /* An eager write (post_eager): what it named, and whether the engine the
   * harness plays resolves it into an ordinary write at on_write_begin
   * (else it keeps it eager, as for an early buffer). */
  int eager, resolve;
  rr_eager_name name;
} rc_write;

struct rc_env;

typedef struct rc_side {
  struct rc_env *env;
  int idx;
  rr_rail_dev *dev;
  rr_rail_ep *ep;
  char *buf;
  rr_rail_mr *mr;
  rr_status failed;             /* the first failure progress or a post returned */
  /* as writer */
  rc_write w[RC_MAX_WRITES];
  int nposted;
  int posted_at_drain[RC_MAX_EPOCHS]; /* writes posted before drain epoch e */
  uint32_t ctrl_sent;
  /* as receiver, in delivery order */
  rc_event log[RC_LOG_MAX];
  int nlog;
  int nrecv, nbegin, ndone, ndrain;
  int nprobe_begin;              /* RR_WRITE_PROBE writes on_write_begin saw (and sank) */
  int neager_begin;              /* RR_WRITE_EAGER writes on_write_begin saw */
  uint32_t ctrl_next;           /* sequence number expected next */
  uint32_t last_drain;
  /* what the checks in the callbacks found */
  int bad_ctrl;                 /* out of order or not intact */
  int bad_write;                /* a write reported that was not posted, or twice, or not placed */
  int bad_done;                 /* an unknown or repeated wr_id */
  int placed_checked, placed_bad; /* RR_RAIL_CAP_WRITE_DONE_PLACED: bytes there at on_write_done */
  int drain_early;              /* on_drain before the writes posted ahead of it were in memory */
  int begin_uncapable;          /* on_write_begin on a rail without RR_RAIL_CAP_WRITE_BEGIN */
  int after_failure;            /* callbacks after one returned a failure */
  /* what the engine the harness plays answers */
  int sink_fence_tag;           /* on_write_begin sinks writes with this fence tag (-1: none) */
  int64_t refuse_ctrl_seq;      /* on_ctrl fails this message with RR_ERR_PROTOCOL (-1: none) */
  int refused;                  /* a callback returned a failure */
} rc_side;

/* RR_WRITE imm bits the harness gives meaning to. */
#define RC_IMM_SINK 0x40000000u   /* WRITE_BEGIN rails: the engine discards it */
#define RC_IMM_REFUSE 0x20000000u /* WRITE_BEGIN rails: the engine refuses it */

typedef struct rc_fixture {
  const char *name;
  /* Open the devices (env->side[i].dev) and two endpoints connected to each
   * other (env->side[i].ep), each with rc_events and &env->side[i]. */
  rr_status (*open)(struct rc_env *env);
  /* Between progress rounds: what time does in this world (the simulation
   * advances its virtual clock; real transports need nothing). */
  void (*tick)(struct rc_env *env);
  /* The transport's own checker (the simulation's oracles): NULL when it
   * saw nothing wrong, else what. NULL entry: none. */
  const char *(*violation)(struct rc_env *env);
  /* Close what open made beyond the endpoints and registrations, which the
   * harness has released. */
  void (*close)(struct rc_env *env);
} rc_fixture;

typedef struct rc_env {
  const rc_fixture *fx;
  void *fx_state;
  uint32_t caps;                /* side 0's device caps (both sides' are the same transport) */
  int mark;                     /* writes from this index on are the ones a case waits for */
  rc_side side[2];
} rc_env;

extern const rr_rail_events rc_events;
/* The fixture this executable runs the cases over (fixture_*.c). */
extern const rc_fixture rc_fixture_under_test;

#endif
