/* The rail contract test (rail.h is the spec): one set of cases, written
 * once (rail_contract_core.c: what every rail promises; rail_contract_caps.c:
 * what each capability flag adds), run by the harness in rail_contract.c
 * over every transport through a fixture that opens two connected
 * endpoints of it, as UCX instantiates its uct tests over every transport.
 * A new transport is done when its fixture passes.
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
  uint16_t epoch_tag; /* its epoch tag (rr_write_wr.epoch_tag) */
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
  int sink_epoch_tag;           /* on_write_begin sinks writes with this epoch tag (-1: none) */
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

/* The harness the cases drive (rail_contract.c, where each is described):
 * progress both ends, post from side A (or either, for control messages)
 * waiting out RR_AGAIN, and the checks every case shares. */
typedef int (*rc_pred)(rc_env *env);
uint64_t rc_wall_ms(void);
void rc_progress_side(rc_side *s);
void rc_round_once(rc_env *env);
int rc_pump_until(rc_env *env, rc_pred done);
void rc_pump_rounds(rc_env *env, int rounds);
int rc_post_write_split(rc_env *env, size_t src_off, size_t dst_off, uint32_t len, uint32_t bulk, uint32_t imm_flags,
                        uint16_t epoch_tag);
int rc_post_write(rc_env *env, size_t src_off, size_t dst_off, uint32_t len, uint32_t imm_flags, uint16_t epoch_tag);
int rc_post_eager(rc_env *env, size_t src_off, size_t dst_off, uint32_t len, rr_eager_name name, int resolve,
                  uint16_t epoch_tag);
void rc_post_ctrl(rc_env *env, int from);
void rc_post_drain(rc_env *env, uint32_t epoch);
void rc_destroy_ep(rc_side *s);
uint32_t rc_write_len(int i);
void rc_assert_clean(rc_env *env);
void rc_assert_all_landed(rc_env *env, int n);
int rc_all_done_and_landed(rc_env *env);
int rc_b_failed(rc_env *env);

/* Every case, in the order each executable runs them, each on a fresh pair
 * of endpoints: X(name) for a void name(void **state) of
 * rail_contract_core.c or rail_contract_caps.c. */
#define RC_CASES(X)                          \
  X(test_ops_and_path_stats)                 \
  X(test_caps_that_need_each_other)          \
  X(test_epoch_tags_delivered)               \
  X(test_eager_writes)                       \
  X(test_writes_land)                        \
  X(test_flush_ends_a_pass)                  \
  X(test_done_means_placed)                  \
  X(test_split_writes_land)                  \
  X(test_drain_follows_writes)               \
  X(test_drains_back_to_back)                \
  X(test_ctrl_in_order)                      \
  X(test_ordered_delivery)                   \
  X(test_write_begin_sink)                   \
  X(test_write_begin_refusal)                \
  X(test_callback_failure_stops_progress)    \
  X(test_invalidate_sender)                       \
  X(test_invalidate_receiver_midway)              \
  X(test_invalidate_both_midway)                  \
  X(test_invalidate_keeps_endpoint)               \
  X(test_flushed)                            \
  X(test_peer_gone_is_reported)              \
  X(test_destroy_busy_writer_first)          \
  X(test_destroy_busy_receiver_first)        \
  X(test_probe_write)
#define RC_DECLARE_CASE(name) void name(void **state);
RC_CASES(RC_DECLARE_CASE)

#endif
