/* Setup progress shared by the connections to one peer process (pure: unit
 * tested in test/unit/test_peer_progress.c).
 *
 * A connection's setup deadline runs from its latest progress
 * (rr_setup_clock, connect_plan.h). That alone cannot tell a slow peer from
 * a dead one when the peer has thousands of connections under way: its
 * listener answers a connection only when NCCL's proxy calls accept() on
 * that listen comm, round-robin over all of them, and at 2,048 connections
 * one round outlasts RERAIL_CONNECT_TIMEOUT (bench/RESULTS.md §11). The
 * connections waiting for their turn saw nothing for a whole timeout and
 * failed, though the peer answered others all along.
 *
 * So an authenticated answer (a CHALLENGE or an ACCEPT whose MAC proves the
 * handle's secret) from a peer process counts as progress of every pending
 * connection to it. The process is the one its handle names (handle.h: a
 * random identity per listening process; the handle comes through NCCL's
 * bootstrap, as the secret does). Only answers that prove a secret count:
 * a stranger cannot keep a connection alive. A peer process that answers
 * nothing any more still fails each of its connections within one timeout
 * of its last answer; one that is alive and sweeping does not.
 *
 * The table is small and bounded: an entry per peer process some pending
 * connection refers to, dropped with the last reference. A connection that
 * finds the table full keeps its own progress only (the rule before). */
#ifndef RERAIL_CORE_PEER_PROGRESS_H
#define RERAIL_CORE_PEER_PROGRESS_H
#include <stdint.h>

#include "handle.h"

#define RR_PEER_TABLE_MAX 1024

typedef struct rr_peer_entry {
  uint8_t id[RR_HANDLE_PROCESS_LEN];
  uint32_t refs;    /* pending connections to it; 0: the entry is free */
  uint64_t answers; /* authenticated answers seen from it */
} rr_peer_entry;

typedef struct rr_peer_table {
  rr_peer_entry e[RR_PEER_TABLE_MAX];
} rr_peer_table;

/* The entry of process id, added if need be, with one more reference: its
 * slot, or -1 when the table is full (the caller then counts its own
 * progress alone). */
int rr_peer_table_ref(rr_peer_table *t, const uint8_t id[RR_HANDLE_PROCESS_LEN]);
/* Drop one reference (slot -1: none); the entry goes with the last one. */
void rr_peer_table_unref(rr_peer_table *t, int slot);
/* An authenticated answer from the process of slot (-1: none). */
void rr_peer_table_answered(rr_peer_table *t, int slot);
/* What a connection feeds its rr_setup_clock: its own progress counter
 * plus its peer's answers (both only grow, so the sum changes whenever
 * either does). */
uint64_t rr_peer_table_progress(const rr_peer_table *t, int slot, uint64_t own);

#endif
