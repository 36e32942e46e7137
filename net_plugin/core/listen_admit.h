/* The listener's admission of sockets that have not yet proved the handle's
 * secret: pending slots under the caps, how long each is held, refusals
 * (listen_admit.c). The handshake that follows is conn_accept.c's. */
#ifndef RERAIL_CORE_LISTEN_ADMIT_H
#define RERAIL_CORE_LISTEN_ADMIT_H
#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "core_internal.h"
#include "rr_counters.h"

/* RERAIL_CONNECT_TIMEOUT in ns. */
uint64_t rr_connect_timeout_ns(void);
/* Refuse a pending socket: counted under reason, logged once a minute per
 * reason and source, closed (ps->fd becomes -1; the slot is let go of by
 * rr_listen_drop_expired). */
void rr_listen_refuse(rr_listen_comm *l, pending_sock *ps, rr_counter reason, const char *why);
/* The reason a handshake message that did not arrive whole and sound is
 * counted under (st and why from RR_SETUP_RECV_MSG). */
rr_counter rr_listen_recv_refusal(rr_status st, const char *why);
/* A handshake message read in part starts the 1 s clock; a whole one stops it. */
void rr_listen_note_partial(pending_sock *ps);
/* Refuse the pending sockets whose time is up, and compact the table. */
void rr_listen_drop_expired(rr_listen_comm *l, uint64_t now);
/* Take every new socket the kernel has on the listening sockets that pfd
 * (one per l->fds[], from poll) marks: a pending slot each, within the caps.
 * RR_OK, or RR_ERR_SYSTEM when a listening socket is broken. */
rr_status rr_listen_take_new(rr_listen_comm *l, const struct pollfd *pfd);
/* Room for slot n of an array grown by doubling up to max elements of
 * size bytes (*arr, *cap updated). 0 when out of memory. */
int rr_slots_room(void **arr, int *cap, int n, int max, size_t size);

#endif
