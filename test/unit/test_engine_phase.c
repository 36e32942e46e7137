/* The rollback protocol's phases: docs/protocol.md draws each end's machine
 * ("Rollback phases"), the engine's tables (engine_phase.c) define it, and
 * they must be the same machine: every phase, cause and edge of one is in
 * the other. Then the transition functions: an edge of the table does what
 * entering its phase means, a change that is not an edge fails the
 * connection and is counted, and a rail the peer names down asks for a
 * rollback only while the sender streams.
 *
 * usage: test_engine_phase PATH/docs/protocol.md */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine_internal.h" /* the phases are the engine's internals */
#include "rr_clock.h"

static const char *doc_path;

#define MAX_EDGES 64
typedef struct doc_edge {
  char from[32], cause[32], to[32];
} doc_edge;

/* The edges of the fenced block that follows `marker` in the doc, one per
 * line: "FROM --(CAUSE)--> TO  what it means". Any other line in the block
 * fails the test: the diagram is read, not skimmed. */
static int read_diagram(const char *marker, doc_edge *out) {
  FILE *f = fopen(doc_path, "r");
  if (!f) fail_msg("cannot open %s", doc_path);
  char line[512];
  int state = 0, n = 0; /* 0: before the marker, 1: before the fence, 2: inside */
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (state == 0) {
      if (strstr(line, marker)) state = 1;
      continue;
    }
    if (state == 1) {
      if (strncmp(line, "```", 3) == 0) state = 2;
      else if (line[0]) fail_msg("%s: text between the marker and its diagram: '%s'", marker, line);
      continue;
    }
    if (strncmp(line, "```", 3) == 0) {
      state = 3;
      break;
    }
    if (!line[0]) continue;
    if (n == MAX_EDGES) fail_msg("%s: more than %d edges", marker, MAX_EDGES);
    doc_edge *d = &out[n];
    if (sscanf(line, "%31s --(%31[^)])--> %31s", d->from, d->cause, d->to) != 3)
      fail_msg("%s: not an edge: '%s'", marker, line);
    n++;
  }
  fclose(f);
  if (state != 3) fail_msg("%s: no diagram in %s", marker, doc_path);
  return n;
}

typedef const char *(*name_fn)(int);

static int name_index(name_fn name, int count, const char *s) {
  for (int i = 0; i < count; i++)
    if (strcmp(name(i), s) == 0) return i;
  return -1;
}

/* The doc's diagram and the engine's table are the same set of edges, and
 * between them they name every phase and every cause. */
static void compare(const char *marker, const engine_phase_edge *edges, int nedges, name_fn phase_name,
                    int nphases, name_fn cause_name, int ncauses) {
  doc_edge doc[MAX_EDGES];
  int n = read_diagram(marker, doc);
  int phase_seen[16] = {0}, cause_seen[16] = {0}, table_seen[MAX_EDGES] = {0};
  assert_true(nphases <= 16 && ncauses <= 16 && nedges <= MAX_EDGES);
  for (int i = 0; i < n; i++) {
    int f = name_index(phase_name, nphases, doc[i].from), t = name_index(phase_name, nphases, doc[i].to);
    int c = name_index(cause_name, ncauses, doc[i].cause);
    if (f < 0 || t < 0 || c < 0)
      fail_msg("%s: '%s --(%s)--> %s' names a phase or cause the engine lacks", marker, doc[i].from, doc[i].cause,
               doc[i].to);
    int k = 0;
    while (k < nedges && !(edges[k].from == f && edges[k].cause == c && edges[k].to == t)) k++;
    if (k == nedges) fail_msg("%s: '%s --(%s)--> %s' is not in the engine's table", marker, doc[i].from,
                              doc[i].cause, doc[i].to);
    if (table_seen[k]++) fail_msg("%s: '%s --(%s)--> %s' drawn twice", marker, doc[i].from, doc[i].cause, doc[i].to);
    phase_seen[f] = phase_seen[t] = cause_seen[c] = 1;
  }
  for (int k = 0; k < nedges; k++)
    if (!table_seen[k])
      fail_msg("%s: the engine's %s --(%s)--> %s is not drawn", marker, phase_name(edges[k].from),
               cause_name(edges[k].cause), phase_name(edges[k].to));
  for (int i = 0; i < nphases; i++)
    if (!phase_seen[i]) fail_msg("%s: phase %s is not drawn", marker, phase_name(i));
  for (int i = 0; i < ncauses; i++)
    if (!cause_seen[i]) fail_msg("%s: cause %s is not drawn", marker, cause_name(i));
}

static void sender_doc_matches_engine(void **state) {
  (void)state;
  compare("<!-- rollback phases: sender -->", engine_send_edges, engine_send_nedges, engine_send_phase_name,
          RR_SEND_NPHASES, engine_send_cause_name, RR_SEND_NCAUSES);
}

static void receiver_doc_matches_engine(void **state) {
  (void)state;
  compare("<!-- rollback phases: receiver -->", engine_recv_edges, engine_recv_nedges, engine_recv_phase_name,
          RR_RECV_NPHASES, engine_recv_cause_name, RR_RECV_NCAUSES);
}

/* Names are what the doc and the log match on: distinct, and "?" only out of range. */
static void names_distinct(name_fn name, int count) {
  for (int i = 0; i < count; i++) {
    assert_string_not_equal(name(i), "?");
    for (int j = 0; j < i; j++) assert_string_not_equal(name(i), name(j));
  }
  assert_string_equal(name(count), "?");
  assert_string_equal(name(-1), "?");
}

static void names_are_distinct(void **state) {
  (void)state;
  names_distinct(engine_send_phase_name, RR_SEND_NPHASES);
  names_distinct(engine_send_cause_name, RR_SEND_NCAUSES);
  names_distinct(engine_recv_phase_name, RR_RECV_NPHASES);
  names_distinct(engine_recv_cause_name, RR_RECV_NCAUSES);
}

static rr_engine *engine_of(int role) {
  rr_engine *e = malloc(sizeof *e);
  assert_non_null(e);
  rr_engine_config cfg = {.role = role, .chunk_size = 1u << 16, .progress_timeout_ns = 1000000000ull};
  snprintf(cfg.peer, sizeof cfg.peer, "phase-test");
  assert_int_equal(rr_engine_init(e, &cfg), RR_OK);
  return e;
}

static void engine_done(rr_engine *e) {
  rr_engine_fini(e);
  free(e);
}

/* A sender's walk through a rollback: what each entry sets. */
static void sender_walk(void **state) {
  (void)state;
  rr_engine *e = engine_of(RR_ENGINE_SEND);
  assert_int_equal(engine_snd(e)->send_phase, RR_SEND_STREAMING);
  e->epoch = 7;
  engine_send_set_phase(e, RR_SEND_ROLLBACK_ASKED, RR_SEND_RAIL_LOST, 1000);
  assert_int_equal(engine_snd(e)->send_phase, RR_SEND_ROLLBACK_ASKED);
  assert_true(engine_send_holding(e));
  assert_int_equal(engine_snd(e)->fail_epoch, 7); /* FAIL{7}: lost something in 7 */
  assert_int_equal(e->fail_notice_pending, 1);
  assert_int_equal(engine_snd(e)->stall_start_ns, 1000);
  assert_int_equal(engine_snd(e)->resume_wait_since_ns, 1000);
  /* The FAIL went; the receiver answers with epoch 8. */
  e->fail_notice_pending = 0;
  engine_snd(e)->resume_got = 0x5;
  e->epoch = 8;
  engine_send_set_phase(e, RR_SEND_AWAITING_RESUME, RR_SEND_NEW_EPOCH, 2000);
  assert_int_equal(engine_snd(e)->send_phase, RR_SEND_AWAITING_RESUME);
  assert_int_equal(engine_snd(e)->fail_epoch, 7); /* a re-ask now says "I wait to leave 7" */
  assert_int_equal(engine_snd(e)->resume_got, 0);
  assert_int_equal(e->fail_notice_pending, 0);
  assert_int_equal(engine_snd(e)->stall_start_ns, 1000);       /* the stall began at the failure */
  assert_int_equal(engine_snd(e)->resume_wait_since_ns, 1000); /* not restarted while waiting */
  engine_send_set_phase(e, RR_SEND_AWAITING_RESUME, RR_SEND_NO_ANSWER, 3000);
  assert_int_equal(e->fail_notice_pending, 1);
  assert_int_equal(engine_snd(e)->resume_wait_since_ns, 3000);
  engine_send_set_phase(e, RR_SEND_STREAMING, RR_SEND_RESUME_END, 4000);
  assert_int_equal(engine_snd(e)->send_phase, RR_SEND_STREAMING);
  assert_false(engine_send_holding(e));
  assert_int_equal(engine_snd(e)->stall_start_ns, 0);
  assert_int_equal(e->failed, RR_OK);
  assert_int_equal(e->stats.bad_transitions, 0);
  engine_done(e);
}

/* The receiver's announcement: a rollback starts it from slot 0 with a FAIL owed. */
static void receiver_walk(void **state) {
  (void)state;
  rr_engine *e = engine_of(RR_ENGINE_RECV);
  assert_int_equal(engine_rcv(e)->recv_phase, RR_RECV_STREAMING);
  engine_rcv(e)->recv_seq = 40;
  engine_rcv(e)->announce_slot = 9;
  engine_rcv(e)->resume_mask = 0xff;
  engine_recv_set_phase(e, RR_RECV_ANNOUNCING, RR_RECV_RAIL_LOST);
  assert_int_equal(engine_rcv(e)->recv_phase, RR_RECV_ANNOUNCING);
  assert_int_equal(engine_rcv(e)->resume_recv_seq, 40);
  assert_int_equal(engine_rcv(e)->announce_slot, 0);
  assert_int_equal(engine_rcv(e)->resume_mask, 0);
  assert_int_equal(e->fail_notice_pending, 1);
  engine_recv_set_phase(e, RR_RECV_END_OWED, RR_RECV_SLOTS_NAMED);
  engine_recv_set_phase(e, RR_RECV_STREAMING, RR_RECV_END_POSTED);
  /* Announcing the same epoch again keeps the receives it names. */
  engine_rcv(e)->recv_seq = 45;
  e->fail_notice_pending = 0;
  engine_recv_set_phase(e, RR_RECV_ANNOUNCING, RR_RECV_SENDER_BEHIND);
  assert_int_equal(engine_rcv(e)->resume_recv_seq, 40);
  assert_int_equal(e->fail_notice_pending, 1);
  assert_int_equal(e->failed, RR_OK);
  assert_int_equal(e->stats.bad_transitions, 0);
  engine_done(e);
}

/* A change that is not an edge changes nothing, fails the connection, and is counted. */
static void non_edges_refused(void **state) {
  (void)state;
  rr_engine *e = engine_of(RR_ENGINE_SEND);
  engine_send_set_phase(e, RR_SEND_STREAMING, RR_SEND_RESUME_END, 1); /* no announcement awaited */
  assert_int_equal(engine_snd(e)->send_phase, RR_SEND_STREAMING);
  assert_int_equal(engine_snd(e)->stall_start_ns, 0);
  assert_int_equal(e->failed, RR_ERR_INTERNAL);
  assert_int_equal(e->stats.bad_transitions, 1);
  engine_done(e);

  e = engine_of(RR_ENGINE_SEND);
  engine_send_set_phase(e, RR_SEND_STREAMING, RR_SEND_RAIL_LOST, 1); /* the right cause, the wrong phase */
  assert_int_equal(engine_snd(e)->send_phase, RR_SEND_STREAMING);
  assert_int_equal(e->fail_notice_pending, 0);
  assert_int_equal(e->stats.bad_transitions, 1);
  engine_done(e);

  e = engine_of(RR_ENGINE_RECV);
  engine_recv_set_phase(e, RR_RECV_END_OWED, RR_RECV_SLOTS_NAMED); /* no announcement under way */
  assert_int_equal(engine_rcv(e)->recv_phase, RR_RECV_STREAMING);
  assert_int_equal(e->failed, RR_ERR_INTERNAL);
  assert_int_equal(e->stats.bad_transitions, 1);
  engine_done(e);

  e = engine_of(RR_ENGINE_RECV);
  engine_rcv(e)->recv_phase = RR_RECV_ANNOUNCING;
  engine_recv_set_phase(e, RR_RECV_ANNOUNCING, RR_RECV_SENDER_BEHIND); /* it announces already */
  assert_int_equal(e->fail_notice_pending, 0);
  assert_int_equal(e->stats.bad_transitions, 1);
  engine_done(e);
}

/* A rail the receiver names down: a rollback request while the sender
 * streams (it may have swallowed chunks of this epoch), nothing while it
 * waits for the announcement that covers it. A rail seen failing here asks
 * in every phase. */
static void rail_lost_by_whom(void **state) {
  (void)state;
  rr_engine *e = engine_of(RR_ENGINE_SEND);
  e->epoch = 3;
  engine_send_rail_lost(e, ENGINE_SEEN_BY_PEER);
  assert_int_equal(engine_snd(e)->send_phase, RR_SEND_ROLLBACK_ASKED);
  assert_int_equal(engine_snd(e)->fail_epoch, 3);
  e->epoch = 4;
  engine_send_set_phase(e, RR_SEND_AWAITING_RESUME, RR_SEND_NEW_EPOCH, rr_now_ns());
  e->fail_notice_pending = 0;
  engine_send_rail_lost(e, ENGINE_SEEN_BY_PEER);
  assert_int_equal(engine_snd(e)->send_phase, RR_SEND_AWAITING_RESUME);
  assert_int_equal(engine_snd(e)->fail_epoch, 3);
  assert_int_equal(e->fail_notice_pending, 0);
  engine_send_rail_lost(e, ENGINE_SEEN_HERE);
  assert_int_equal(engine_snd(e)->send_phase, RR_SEND_ROLLBACK_ASKED);
  assert_int_equal(engine_snd(e)->fail_epoch, 4);
  assert_int_equal(e->fail_notice_pending, 1);
  assert_int_equal(e->stats.bad_transitions, 0);
  engine_done(e);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PATH/docs/protocol.md\n", argv[0]);
    return 2;
  }
  doc_path = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sender_doc_matches_engine),
      cmocka_unit_test(receiver_doc_matches_engine),
      cmocka_unit_test(names_are_distinct),
      cmocka_unit_test(sender_walk),
      cmocka_unit_test(receiver_walk),
      cmocka_unit_test(non_edges_refused),
      cmocka_unit_test(rail_lost_by_whom),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
