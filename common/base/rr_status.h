/* One internal status type for all of rerail.
 *
 * RR_AGAIN ("try again later") is deliberately distinct from every failure:
 * a full queue, a connection still in progress or a missing clear-to-send are
 * normal and become a NULL request/comm towards NCCL, never an error.
 * Only the ABI shims translate rr_status into NCCL's result type. */
#ifndef RERAIL_COMMON_STATUS_H
#define RERAIL_COMMON_STATUS_H

typedef enum rr_status {
  RR_OK = 0,
  RR_AGAIN = 1,             /* not now; call again */
  RR_ERR_INVALID = -1,      /* bad argument or malformed input (handle, env value) */
  RR_ERR_SYSTEM = -2,       /* a system call failed unexpectedly */
  RR_ERR_NOMEM = -3,
  RR_ERR_PEER = -4,         /* the peer closed or died */
  RR_ERR_RAIL = -5,         /* a rail (NIC, port, cable) failed */
  RR_ERR_UNSUPPORTED = -6,
  RR_ERR_INTERNAL = -7,     /* a bug in rerail: an invariant broke */
  RR_ERR_PROTOCOL = -8,     /* the peer sent something that breaks the wire protocol */
} rr_status;

static inline int rr_failed(rr_status s) { return s < 0; }

const char *rr_status_str(rr_status s);

#endif
