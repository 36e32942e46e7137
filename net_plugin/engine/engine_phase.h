/* The rollback protocol's phases, one machine per end: the enums, the
 * causes that move them, and the one function per end that moves them
 * (engine_phase.c has the diagrams and the tables; docs/protocol.md,
 * "Rollback phases", draws the same, and test_engine_phase compares them). */
#ifndef RERAIL_ENGINE_PHASE_H
#define RERAIL_ENGINE_PHASE_H
#include <stdint.h>

typedef enum rr_send_phase {
  RR_SEND_STREAMING = 0,    /* no rollback under way: sends are posted */
  RR_SEND_ROLLBACK_ASKED,   /* a rail carrying traffic failed here in `epoch`: nothing is posted,
                             * our FAIL{epoch} asks the receiver to roll back */
  RR_SEND_AWAITING_RESUME,  /* the receiver's new epoch adopted, the sends rewound: nothing is
                             * posted until its announcement is complete (RESUME_END) */
  RR_SEND_NPHASES
} rr_send_phase;
typedef enum rr_send_cause {
  RR_SEND_RAIL_LOST = 0,    /* a rail that carried traffic failed (engine_send_rail_lost) */
  RR_SEND_NEW_EPOCH,        /* a message of a later epoch came from the receiver */
  RR_SEND_NO_ANSWER,        /* δ/2 without the announcement: ask again */
  RR_SEND_RESUME_END,       /* the announcement is complete: replay */
  RR_SEND_NCAUSES
} rr_send_cause;
typedef enum rr_recv_phase {
  RR_RECV_STREAMING = 0,    /* no announcement under way */
  RR_RECV_ANNOUNCING,       /* RESUME_SLOTs being posted (after the FAIL): announce_slot is next */
  RR_RECV_END_OWED,         /* every slot looked at: RESUME_END waits to be posted */
  RR_RECV_NPHASES
} rr_recv_phase;
typedef enum rr_recv_cause {
  RR_RECV_RAIL_LOST = 0,    /* a rail that carried traffic failed: a new epoch */
  RR_RECV_SENDER_ASKED,     /* the sender's FAIL named our current epoch: a new epoch */
  RR_RECV_SENDER_BEHIND,    /* its FAIL named an older epoch: announce the current one again */
  RR_RECV_SLOTS_NAMED,      /* the announcement went past the last slot */
  RR_RECV_END_POSTED,       /* RESUME_END is posted: the announcement is complete */
  RR_RECV_NCAUSES
} rr_recv_cause;
/* One allowed transition: from --(cause)--> to. */
typedef struct engine_phase_edge {
  uint8_t from, cause, to;
} engine_phase_edge;

/* Who saw a rail fail, which decides whether its loss asks for a rollback
 * (engine_send_rail_lost). */
typedef enum engine_rail_seen { ENGINE_SEEN_HERE = 0, ENGINE_SEEN_BY_PEER } engine_rail_seen;

typedef struct rr_engine rr_engine;

/* engine_phase.c: the one place each end's rollback phase changes. A
 * transition not in the tables fails the connection (RR_ERR_INTERNAL).
 * now: the caller's clock reading (stall and re-ask timing). */
void engine_send_set_phase(rr_engine *e, rr_send_phase to, rr_send_cause cause, uint64_t now);
void engine_recv_set_phase(rr_engine *e, rr_recv_phase to, rr_recv_cause cause);
/* For logs and the test that compares them with docs/protocol.md ("?" when out of range). */
const char *engine_send_phase_name(int phase);
const char *engine_send_cause_name(int cause);
const char *engine_recv_phase_name(int phase);
const char *engine_recv_cause_name(int cause);
extern const engine_phase_edge engine_send_edges[], engine_recv_edges[];
extern const int engine_send_nedges, engine_recv_nedges;

#endif
