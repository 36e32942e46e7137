/* NCCL's network profiler event descriptors (net v10+), as rerail declares them.
 *
 * A net plugin reports an event through the profiler callback NCCL hands to
 * init (nccl_profiler_cb_t): plugin_id says which descriptor ext_data points
 * at, as (type << 16) | version; a profiler plugin decodes ext_data with
 * NCCL's own declaration of that descriptor, so every byte must sit where
 * NCCL puts it. Both descriptors are a one-byte type followed by a union
 * whose members hold 8-byte fields: the union starts at byte 8.
 * abi_layout_checks.h pins every offset. */
#ifndef RERAIL_NCCL_PROFILER_NET_H
#define RERAIL_NCCL_PROFILER_NET_H
#include <stddef.h>
#include <stdint.h>

/* plugin_id = NCCL_PROFILER_NET_TYPE_* | version. */
#define NCCL_PROFILER_NET_VER_BITS 16
#define NCCL_PROFILER_NET_TYPE_IB (1u << NCCL_PROFILER_NET_VER_BITS)
#define NCCL_PROFILER_NET_TYPE_SOCK (2u << NCCL_PROFILER_NET_VER_BITS)
#define NCCL_PROFILER_NET_IB_VER 1
#define NCCL_PROFILER_NET_SOCK_VER 1

/* ---- Socket descriptor, version 1 (NCCL's socket transport) ------------- */

#define NCCL_PROFILE_SOCKET 1     /* type: one socket operation */
#define NCCL_PROFILER_SOCK_OP_SEND 0
#define NCCL_PROFILER_SOCK_OP_RECV 1

typedef struct nccl_profiler_net_sock_descr_v1 {
  uint8_t type;                   /* NCCL_PROFILE_SOCKET */
  union {
    struct {
      int fd;                     /* the socket */
      int op;                     /* NCCL_PROFILER_SOCK_OP_* */
      size_t length;              /* bytes of the operation */
    } sock;
  };
} nccl_profiler_net_sock_descr_v1_t;

/* ---- IB descriptor, version 1 (NCCL's IB transport, 2.26+) -------------- */

#define NCCL_PROFILE_QP 1         /* type: one work request on a queue pair */

typedef struct nccl_profiler_net_ib_descr_v1 {
  uint8_t type;                   /* NCCL_PROFILE_QP */
  union {
    struct {
      int device;                 /* the plugin's device index */
      uint64_t wr_id;             /* work request id */
      int opcode;                 /* libibverbs opcode */
      int qp_num;                 /* queue pair number */
      size_t length;              /* bytes of the work request */
    } qp;
  };
} nccl_profiler_net_ib_descr_v1_t;

#endif
