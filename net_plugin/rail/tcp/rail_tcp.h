/* The TCP rail: one endpoint is a set of connected stream sockets over one
 * local NIC. Writes become framed messages whose payload the receiver places
 * straight into the registered buffer the frame names (one kernel copy per
 * side, no staging copy for bulk data). */
#ifndef RERAIL_RAIL_TCP_H
#define RERAIL_RAIL_TCP_H
#include "rail.h"

#define RR_TCP_MAX_STREAMS 8

extern const rr_rail_ops rr_tcp_rail_ops;

/* Take ownership of nfds connected, non-blocking sockets (closed on destroy,
 * and on failure). Control messages always use fds[0]. */
rr_status rr_tcp_ep_create(int dev, const int *fds, int nfds, const rr_rail_events *events,
                           void *events_arg, rr_rail_ep **ep);

/* Registrations are process wide (TCP has no protection domains): any TCP
 * endpoint of this process accepts writes into any live registration, after
 * checking the frame's (rkey, address, length) against it. */
rr_status rr_tcp_reg_mr(void *base, size_t len, rr_rail_mr **mr);
void rr_tcp_dereg_mr(rr_rail_mr *mr);
/* The local address a write to (rkey, addr, len) lands at, or NULL when the
 * range is not inside a live registration. */
void *rr_tcp_mr_resolve(uint32_t rkey, uint64_t addr, uint64_t len);

#endif
