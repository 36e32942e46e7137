/* A connector's rail and its setup sockets (conn_rail.c): opened, their
 * handshakes stepped, closed. Callers hold the lock that guards the comm's
 * setup state (connect_lock while connect() builds it, the confirm lock after). */
#ifndef RERAIL_CORE_CONN_RAIL_H
#define RERAIL_CORE_CONN_RAIL_H
#include "core_internal.h"

/* The failure of a TCP connect that got no answer in time: connect() tells
 * it by this pointer (each such attempt of a rail waits longer). */
extern const char rr_conn_no_answer[];

/* One rail's handshakes a step on: RR_OK (RAIL_READY once every socket has
 * its ACCEPT), or the failure of one socket, closed, with *why. */
rr_status rr_conn_rail_advance(connect_state *c, connect_rail *cr, int r, uint64_t now, uint64_t stuck_ns,
                               const char **why);
/* Poll every pending rail's setup sockets at once (one system call, not
 * one per rail); each rail's next rr_conn_rail_advance uses the answer. */
void rr_conn_rails_poll(connect_state *c);
/* A rail that belongs to the connection, down for now: sockets closed,
 * its unconnected endpoint kept for the engine to reopen. */
void rr_conn_rail_defer(connect_state *c, connect_rail *cr);
/* A rail left out of the connection: sockets and endpoint closed, why kept. */
void rr_conn_rail_give_up(connect_state *c, connect_rail *cr, const char *why);
/* A rail's sockets closed and its endpoint abandoned. */
void rr_conn_rail_close(const connect_state *c, connect_rail *cr);
/* One setup socket closed, its handshake freed, ready to be opened again. */
void rr_conn_stream_close(setup_stream *st);

/* The listener authenticated itself: its peer process answered
 * (conn_connect.c, which keeps the table of peer processes). */
void rr_conn_peer_answered(const connect_state *c);
#endif
