/* The transports this build knows, in the order the core asks them for
 * devices: RDMA ports first, so that an interface an RDMA port sits on runs
 * verbs, and plain interfaces are weighed knowing whether the host has RDMA.
 * The only file that names every transport. */
#include "rail.h"
#include "rail_tcp.h"
#include "rail_verbs.h"

_Static_assert(RR_TCP_MAX_STREAMS <= RR_RAIL_SETUP_FDS_MAX, "a TCP rail's streams are its setup sockets");

const rr_rail_transport *const rr_rail_transports[] = {&rr_verbs_transport, &rr_tcp_transport};
const int rr_rail_ntransports = (int)(sizeof rr_rail_transports / sizeof rr_rail_transports[0]);
