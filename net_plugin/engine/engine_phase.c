/* The rollback protocol's phases (docs/protocol.md, "Rollback"), one
 * machine per end, each moved by one function that checks the transition
 * and takes its cause.
 *
 * Sender (rr_send_phase). While it is not STREAMING nothing is posted.
 *
 *   streaming       --(rail-lost)-->     rollback-asked   FAIL{epoch} owed
 *   rollback-asked  --(rail-lost)-->     rollback-asked   FAIL{epoch} owed again
 *   awaiting-resume --(rail-lost)-->     rollback-asked   one failed here meanwhile: a new rollback
 *   streaming       --(new-epoch)-->     awaiting-resume  the receiver rolled back first
 *   rollback-asked  --(new-epoch)-->     awaiting-resume  the answer to our FAIL
 *   awaiting-resume --(new-epoch)-->     awaiting-resume  it rolled back again meanwhile
 *   rollback-asked  --(no-answer)-->     rollback-asked   δ/2 without one: FAIL{epoch} again
 *   awaiting-resume --(no-answer)-->     awaiting-resume  FAIL{epoch - 1} again: announce again
 *   awaiting-resume --(resume-end)-->    streaming        every named slot heard: replay
 *
 * fail_epoch is what the FAIL names: the epoch something was lost in
 * (rollback-asked), or the one we wait to leave (awaiting-resume).
 * A rail the receiver itself reports down while we are not streaming is no
 * rail-lost: the rollback it is announcing covers it (engine_send_rail_lost).
 *
 * Receiver (rr_recv_phase). Its announcement is FAIL{epoch, down} (owed on
 * entering ANNOUNCING, posted first), a RESUME_SLOT per receive posted
 * before the rollback began and not complete, then RESUME_END.
 *
 *   streaming       --(rail-lost)-->     announcing       a new epoch
 *   announcing      --(rail-lost)-->     announcing       a new epoch; starts over
 *   end-owed        --(rail-lost)-->     announcing
 *   streaming       --(sender-asked)-->  announcing       its FAIL named our epoch: a new one
 *   announcing      --(sender-asked)-->  announcing
 *   end-owed        --(sender-asked)-->  announcing
 *   streaming       --(sender-behind)--> announcing       its FAIL named an older epoch: same epoch again
 *   announcing      --(slots-named)-->   end-owed         announce_slot went past the last slot
 *   end-owed        --(end-posted)-->    streaming
 *
 * docs/protocol.md draws the same diagrams; test/unit/test_engine_phase.c
 * compares them with the tables below. A transition not in a table is a
 * bug in the engine: it fails the connection (RR_ERR_INTERNAL) rather than
 * run a protocol nobody checked, and is counted for the simulation. */
#include "engine_internal.h"
#include "rr_log.h"

static const char *const send_phase_names[RR_SEND_NPHASES] = {
    [RR_SEND_STREAMING] = "streaming",
    [RR_SEND_ROLLBACK_ASKED] = "rollback-asked",
    [RR_SEND_AWAITING_RESUME] = "awaiting-resume",
};
_Static_assert(sizeof send_phase_names / sizeof *send_phase_names == RR_SEND_NPHASES,
               "a name for every sender phase");

static const char *const send_cause_names[RR_SEND_NCAUSES] = {
    [RR_SEND_RAIL_LOST] = "rail-lost",
    [RR_SEND_NEW_EPOCH] = "new-epoch",
    [RR_SEND_NO_ANSWER] = "no-answer",
    [RR_SEND_RESUME_END] = "resume-end",
};
_Static_assert(sizeof send_cause_names / sizeof *send_cause_names == RR_SEND_NCAUSES,
               "a name for every sender cause");

static const char *const recv_phase_names[RR_RECV_NPHASES] = {
    [RR_RECV_STREAMING] = "streaming",
    [RR_RECV_ANNOUNCING] = "announcing",
    [RR_RECV_END_OWED] = "end-owed",
};
_Static_assert(sizeof recv_phase_names / sizeof *recv_phase_names == RR_RECV_NPHASES,
               "a name for every receiver phase");

static const char *const recv_cause_names[RR_RECV_NCAUSES] = {
    [RR_RECV_RAIL_LOST] = "rail-lost",
    [RR_RECV_SENDER_ASKED] = "sender-asked",
    [RR_RECV_SENDER_BEHIND] = "sender-behind",
    [RR_RECV_SLOTS_NAMED] = "slots-named",
    [RR_RECV_END_POSTED] = "end-posted",
};
_Static_assert(sizeof recv_cause_names / sizeof *recv_cause_names == RR_RECV_NCAUSES,
               "a name for every receiver cause");

#define EDGE(f, c, t) {(uint8_t)(f), (uint8_t)(c), (uint8_t)(t)}
const engine_phase_edge engine_send_edges[] = {
    EDGE(RR_SEND_STREAMING, RR_SEND_RAIL_LOST, RR_SEND_ROLLBACK_ASKED),
    EDGE(RR_SEND_ROLLBACK_ASKED, RR_SEND_RAIL_LOST, RR_SEND_ROLLBACK_ASKED),
    EDGE(RR_SEND_AWAITING_RESUME, RR_SEND_RAIL_LOST, RR_SEND_ROLLBACK_ASKED),
    EDGE(RR_SEND_STREAMING, RR_SEND_NEW_EPOCH, RR_SEND_AWAITING_RESUME),
    EDGE(RR_SEND_ROLLBACK_ASKED, RR_SEND_NEW_EPOCH, RR_SEND_AWAITING_RESUME),
    EDGE(RR_SEND_AWAITING_RESUME, RR_SEND_NEW_EPOCH, RR_SEND_AWAITING_RESUME),
    EDGE(RR_SEND_ROLLBACK_ASKED, RR_SEND_NO_ANSWER, RR_SEND_ROLLBACK_ASKED),
    EDGE(RR_SEND_AWAITING_RESUME, RR_SEND_NO_ANSWER, RR_SEND_AWAITING_RESUME),
    EDGE(RR_SEND_AWAITING_RESUME, RR_SEND_RESUME_END, RR_SEND_STREAMING),
};
const int engine_send_nedges = (int)(sizeof engine_send_edges / sizeof *engine_send_edges);

const engine_phase_edge engine_recv_edges[] = {
    EDGE(RR_RECV_STREAMING, RR_RECV_RAIL_LOST, RR_RECV_ANNOUNCING),
    EDGE(RR_RECV_ANNOUNCING, RR_RECV_RAIL_LOST, RR_RECV_ANNOUNCING),
    EDGE(RR_RECV_END_OWED, RR_RECV_RAIL_LOST, RR_RECV_ANNOUNCING),
    EDGE(RR_RECV_STREAMING, RR_RECV_SENDER_ASKED, RR_RECV_ANNOUNCING),
    EDGE(RR_RECV_ANNOUNCING, RR_RECV_SENDER_ASKED, RR_RECV_ANNOUNCING),
    EDGE(RR_RECV_END_OWED, RR_RECV_SENDER_ASKED, RR_RECV_ANNOUNCING),
    EDGE(RR_RECV_STREAMING, RR_RECV_SENDER_BEHIND, RR_RECV_ANNOUNCING),
    EDGE(RR_RECV_ANNOUNCING, RR_RECV_SLOTS_NAMED, RR_RECV_END_OWED),
    EDGE(RR_RECV_END_OWED, RR_RECV_END_POSTED, RR_RECV_STREAMING),
};
const int engine_recv_nedges = (int)(sizeof engine_recv_edges / sizeof *engine_recv_edges);
#undef EDGE

static const char *name_of(const char *const *names, int n, int i) { return i >= 0 && i < n ? names[i] : "?"; }
const char *engine_send_phase_name(int phase) { return name_of(send_phase_names, RR_SEND_NPHASES, phase); }
const char *engine_send_cause_name(int cause) { return name_of(send_cause_names, RR_SEND_NCAUSES, cause); }
const char *engine_recv_phase_name(int phase) { return name_of(recv_phase_names, RR_RECV_NPHASES, phase); }
const char *engine_recv_cause_name(int cause) { return name_of(recv_cause_names, RR_RECV_NCAUSES, cause); }

static int edge_allowed(const engine_phase_edge *edges, int n, int from, int cause, int to) {
  for (int i = 0; i < n; i++)
    if (edges[i].from == from && edges[i].cause == cause && edges[i].to == to) return 1;
  return 0;
}

/* A transition the tables do not have: the engine's own bug. */
static void bad_transition(rr_engine *e, const char *side, const char *from, const char *to, const char *cause) {
  e->stats.bad_transitions++;
  engine_fail(e, RR_ERR_INTERNAL, "%s rollback phase %s -> %s (%s) is not a transition", side, from, to, cause);
}

void engine_send_set_phase(rr_engine *e, rr_send_phase to, rr_send_cause cause, uint64_t now) {
  rr_send_phase from = engine_snd(e)->send_phase;
  if (!edge_allowed(engine_send_edges, engine_send_nedges, from, cause, to)) {
    bad_transition(e, "send", engine_send_phase_name(from), engine_send_phase_name(to), engine_send_cause_name(cause));
    return;
  }
  /* A stall is timed from its first failure, however many follow. */
  if (from == RR_SEND_STREAMING && to != RR_SEND_STREAMING) {
    engine_snd(e)->resume_wait_since_ns = now;
    if (!engine_snd(e)->stall_start_ns) engine_snd(e)->stall_start_ns = now;
  }
  switch (cause) {
  case RR_SEND_RAIL_LOST:
    engine_snd(e)->fail_epoch = e->epoch;
    e->fail_notice_pending = 1;
    break;
  case RR_SEND_NEW_EPOCH:
    engine_snd(e)->resume_got = 0;
    /* Until the announcement is complete, a re-ask names the epoch we wait
     * to leave, which makes the receiver announce again, not roll back again. */
    engine_snd(e)->fail_epoch = e->epoch - 1;
    break;
  case RR_SEND_NO_ANSWER:
    e->fail_notice_pending = 1;
    engine_snd(e)->resume_wait_since_ns = now;
    break;
  case RR_SEND_RESUME_END:
    engine_snd(e)->stall_start_ns = 0;
    break;
  default:
    break;
  }
  engine_snd(e)->send_phase = to;
  RR_TRACE("send to %s: rollback phase %s -> %s (%s), epoch %u", e->cfg.peer, engine_send_phase_name(from),
           engine_send_phase_name(to), engine_send_cause_name(cause), e->epoch);
}

void engine_recv_set_phase(rr_engine *e, rr_recv_phase to, rr_recv_cause cause) {
  rr_recv_phase from = engine_rcv(e)->recv_phase;
  if (!edge_allowed(engine_recv_edges, engine_recv_nedges, from, cause, to)) {
    bad_transition(e, "recv", engine_recv_phase_name(from), engine_recv_phase_name(to), engine_recv_cause_name(cause));
    return;
  }
  switch (cause) {
  case RR_RECV_RAIL_LOST:
  case RR_RECV_SENDER_ASKED:
    /* The new epoch's announcement names the receives posted until now. */
    engine_rcv(e)->resume_recv_seq = engine_rcv(e)->recv_seq;
    /* fall through */
  case RR_RECV_SENDER_BEHIND:
    e->fail_notice_pending = 1;
    engine_rcv(e)->announce_slot = 0;
    engine_rcv(e)->resume_mask = 0;
    engine_rcv(e)->urgent = 1;
    break;
  default:
    break;
  }
  engine_rcv(e)->recv_phase = to;
  RR_TRACE("recv from %s: rollback phase %s -> %s (%s), epoch %u", e->cfg.peer, engine_recv_phase_name(from),
           engine_recv_phase_name(to), engine_recv_cause_name(cause), e->epoch);
}
