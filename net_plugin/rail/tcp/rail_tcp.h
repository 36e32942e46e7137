/* The TCP rail: one endpoint is a set of connected stream sockets over one
 * local NIC (the core's authenticated setup sockets, adopted at connect).
 * Writes become framed messages whose payload the receiver places straight
 * into the receive buffer the engine names (one kernel copy per side, no
 * staging copy for bulk data). */
#ifndef RERAIL_RAIL_TCP_H
#define RERAIL_RAIL_TCP_H
#include "rail.h"

#define RR_TCP_MAX_STREAMS 8

extern const rr_rail_ops rr_tcp_rail_ops;
extern const rr_rail_transport rr_tcp_transport;

rr_status rr_tcp_dev_open(int index, rr_rail_dev **dev);

/* Device layer (tcp_dev.c), entries of rr_tcp_rail_ops. */
rr_status tcp_reg_mr(rr_rail_dev *dev, void *base, size_t len, uint32_t kind, int dmabuf_fd,
                     uint64_t dmabuf_offset, rr_rail_mr **mr);
void tcp_dereg_mr(rr_rail_mr *mr);
rr_status tcp_dev_progress(rr_rail_dev *dev);
rr_rail_dev_event_kind tcp_dev_event(rr_rail_dev *dev, rr_rail_dev_event *ev);
void tcp_dev_close(rr_rail_dev *dev);

/* One socket's running totals from TCP_INFO (tcp_path_stats.c): payload
 * bytes sent, retransmissions included, and of them retransmitted; and the
 * packets it has in flight that the peer has not acknowledged yet.
 * RR_ERR_UNSUPPORTED on a kernel that does not count them (before 4.19). */
rr_status tcp_socket_path_stats(int fd, uint64_t *sent_bytes, uint64_t *retrans_bytes, uint32_t *unacked);

#endif
