/* The one core behind every exported ncclNet version.
 *
 * The ABI shims in net_plugin/abi/ translate each NCCL version's table into
 * these calls and rr_status into NCCL's result type; nothing below this header
 * knows about NCCL versions. Every entry is safe to call from several threads
 * (NCCL's proxy service thread connects and registers, its progress thread
 * sends, receives and tests). */
#ifndef RERAIL_NET_CORE_H
#define RERAIL_NET_CORE_H
#include <stddef.h>
#include <stdint.h>

#include "rr_log.h"
#include "rr_status.h"

#define RR_NET_HANDLE_SIZE 128   /* NCCL_NET_HANDLE_MAXSIZE */
#define RR_NET_MAX_REQUESTS 32   /* NCCL_NET_MAX_REQUESTS: requests in flight per comm */
#define RR_NET_MAX_RECVS 8       /* grouped receives per irecv */
/* Largest maxP2pBytes / maxCollBytes NCCL accepts (NCCL_MAX_NET_SIZE_BYTES,
 * 1 TiB): NCCL 2.24+ refuses every connection of a device that reports more. */
#define RR_NET_MAX_BYTES ((size_t)1 << 40)

/* Pointer types, NCCL's values. */
#define RR_PTR_HOST 0x1
#define RR_PTR_CUDA 0x2
#define RR_PTR_DMABUF 0x4

typedef struct rr_net_ctx rr_net_ctx;       /* per communicator (net v11+), else process default */
typedef struct rr_listen_comm rr_listen_comm;
typedef struct rr_send_comm rr_send_comm;
typedef struct rr_recv_comm rr_recv_comm;

/* Version-neutral device properties; shims copy into their version's struct. */
typedef struct rr_dev_props {
  const char *name;       /* interface name, stable for the process lifetime */
  const char *pci_path;   /* sysfs PCI path or NULL */
  uint64_t guid;
  int ptr_support;        /* RR_PTR_* */
  int reg_is_global;
  int force_flush;
  int speed_mbps;
  int port;
  float latency_us;
  int max_comms;
  int max_recvs;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
  int max_multi_request_size;
  int rail_id;            /* the NIC's rail (rr_netif_rail_id), -1 when unknown */
} rr_dev_props;

/* NCCL's profiler callback (net v10+), in the core's own terms: report a
 * network event under NCCL's per-request handle. */
typedef int (*rr_profiler_fn)(void **event, int type, void *phandle, int64_t plugin_id, void *ext);

typedef struct rr_init_args {
  rr_logger_fn logger;     /* NCCL's logger, may be NULL */
  uint64_t comm_id;        /* 0 for versions before v11 */
  int traffic_class;       /* -1 = undefined */
  rr_profiler_fn profiler; /* NCCL's profiler callback (v10+), may be NULL */
} rr_init_args;

/* Process-wide state (devices) is reference counted across contexts. */
rr_status rr_net_init(const rr_init_args *args, rr_net_ctx **ctx);
rr_status rr_net_finalize(rr_net_ctx *ctx);
/* The context used by v7-v10, whose calls carry none. Created by the
 * first rr_net_init with comm_id 0. */
rr_net_ctx *rr_net_default_ctx(void);

rr_status rr_net_devices(int *ndev);
rr_status rr_net_get_properties(int dev, rr_dev_props *props);

/* handle points at RR_NET_HANDLE_SIZE bytes. */
rr_status rr_net_listen(rr_net_ctx *ctx, int dev, void *handle, rr_listen_comm **listen);
/* Non-blocking: RR_OK with *send == NULL means "call again". */
rr_status rr_net_connect(rr_net_ctx *ctx, int dev, const void *handle, rr_send_comm **send);
rr_status rr_net_accept(rr_listen_comm *listen, rr_recv_comm **recv);

/* comm is a send or a receive comm. type is RR_PTR_*. */
rr_status rr_net_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
rr_status rr_net_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                               int fd, void **mhandle);
rr_status rr_net_dereg_mr(void *comm, void *mhandle);

/* Non-blocking: RR_OK with *request == NULL means "cannot post now". */
rr_status rr_net_isend(rr_send_comm *comm, void *data, size_t size, int tag, void *mhandle,
                       void *phandle, void **request);
rr_status rr_net_irecv(rr_recv_comm *comm, int n, void **data, const size_t *sizes,
                       const int *tags, void **mhandles, void **phandles, void **request);
/* Receives into GPU memory (registered as CUDA or DMA-BUF) are flushed by an
 * RDMA read through the connection's verbs NICs (core/flush.c): *request is a
 * flush request for rr_net_test. Host memory needs none: *request is NULL. */
rr_status rr_net_iflush(rr_recv_comm *comm, int n, void **data, const int *sizes,
                        void **mhandles, void **request);
/* sizes (may be NULL) receives one size per grouped receive, as sent. */
rr_status rr_net_test(void *request, int *done, size_t *sizes);

/* The connection id of a live send or receive comm (the connector draws it;
 * both ends carry it): RR_ERR_INVALID for anything else. Only read, so a
 * test program may ask from any thread while the comm is in use. */
rr_status rr_net_conn_id(const void *comm, uint64_t *id);

rr_status rr_net_close_send(rr_send_comm *comm);
rr_status rr_net_close_recv(rr_recv_comm *comm);
rr_status rr_net_close_listen(rr_listen_comm *comm);

#endif
