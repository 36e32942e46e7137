/* The connector's steps that are taken again once its send comm went to
 * NCCL ahead of the listener's ACCEPTs (conn_confirm.c), all in
 * conn_connect.c (a rail's own steps: conn_rail.h). Callers hold the lock
 * that guards the comm's setup state (connect_lock while connect() builds
 * it, the confirm lock after). */
#ifndef RERAIL_CORE_CONN_CONFIRM_H
#define RERAIL_CORE_CONN_CONFIRM_H
#include "conn_rail.h"

/* The attempt again as a new connection (fresh id, fresh endpoints). */
void rr_conn_start_over(rr_send_comm *s, uint64_t now);
/* connect()'s state machine: RR_OK once the COMMIT is out (early: behind
 * the PROOFs, ACCEPTs still to come), RR_AGAIN, or the failure. */
rr_status rr_conn_advance(rr_send_comm *s);
/* The rails up and those kept for later, into the engine (magic set). */
rr_status rr_conn_install(rr_send_comm *s);
/* Hand the comm out now; it is confirmed behind (rr_connect_confirm). */
rr_status rr_conn_confirm_start(rr_send_comm *s);
#endif
