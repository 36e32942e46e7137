/* What the six ncclNet shims share.
 *
 * Most entries have the same signature in every version from v7 to v12:
 * those are implemented once here, with NCCL's types, and every version's
 * table points straight at them. A version file (net_vN.c) only holds the
 * entries whose arguments changed, and its table. Nothing here holds state
 * of its own except the process-wide context of the context-less versions
 * (v7-v10), which lives in the core (rr_net_default_ctx). */
#ifndef RERAIL_NET_ABI_UTIL_H
#define RERAIL_NET_ABI_UTIL_H
#include "nccl/abi_layout_checks.h"
#include "nccl/nccl_common.h"
#include "net_core.h"

_Static_assert(RR_NET_MAX_BYTES == (size_t)NCCL_NET_MAX_SIZE_BYTES, "the core's size limit is NCCL's");

/* The name NCCL logs and NCCL_NET / a comm config's netName select. */
#define RR_ABI_NET_NAME "rerail"

/* rr_status -> NCCL's result. "Try again" is success: the caller sees a NULL
 * comm or request and calls again. */
nccl_result_t rr_abi_result(rr_status s);

/* ---- Init / finalize ---------------------------------------------------- */

/* v7-v10: NCCL calls init once per process (again after every comm has been
 * destroyed, without a finalize in between). Sets up the core's process
 * context; repeated calls are harmless. profiler may be NULL. */
nccl_result_t rr_abi_init_process(nccl_logger_t logger, nccl_profiler_cb_t profiler);
/* v11+: one context per communicator; traffic_class may be
 * NCCL_NET_TRAFFIC_CLASS_UNDEF. */
nccl_result_t rr_abi_init_comm(void **ctx, uint64_t comm_id, int traffic_class,
                               nccl_logger_t logger, nccl_profiler_cb_t profiler);
nccl_result_t rr_abi_finalize(void *ctx);
/* The context behind v7-v10 calls (NULL, with a warning, if the core has
 * none). */
rr_net_ctx *rr_abi_process_ctx(void);

/* ---- Devices ------------------------------------------------------------ */

nccl_result_t rr_abi_devices(int *ndev);
/* Core properties of dev; the version files copy what they carry into dst,
 * the version's struct NCCL passed (checked here for NULL). */
nccl_result_t rr_abi_dev_props(int dev, const void *dst, rr_dev_props *props);

/* Fill the fields every properties version shares (v7 to v12): the ones
 * up to net_device_version, except reg_is_global (v8+) and force_flush (v9+). */
#define RR_ABI_FILL_PROPS_V7(dst, src)                      \
  do {                                                      \
    (dst)->name = (char *)(src)->name;                      \
    (dst)->pci_path = (char *)(src)->pci_path;              \
    (dst)->guid = (src)->guid;                              \
    (dst)->ptr_support = (src)->ptr_support;                \
    (dst)->speed = (src)->speed_mbps;                       \
    (dst)->port = (src)->port;                              \
    (dst)->latency = (src)->latency_us;                     \
    (dst)->max_comms = (src)->max_comms;                    \
    (dst)->max_recvs = (src)->max_recvs;                    \
    (dst)->net_device_type = NCCL_NET_DEVICE_HOST;          \
    (dst)->net_device_version = NCCL_NET_DEVICE_INVALID_VERSION; \
  } while (0)

/* v8+: the v7 fields and reg_is_global. */
#define RR_ABI_FILL_PROPS_COMMON(dst, src)                  \
  do {                                                      \
    RR_ABI_FILL_PROPS_V7(dst, src);                         \
    (dst)->reg_is_global = (src)->reg_is_global;            \
  } while (0)

/* v9+: the rest up to max_coll_bytes; a physical device is its own vNIC. */
#define RR_ABI_FILL_PROPS_V9(dst, src, dev)                 \
  do {                                                      \
    RR_ABI_FILL_PROPS_COMMON(dst, src);                     \
    (dst)->force_flush = (src)->force_flush;                \
    (dst)->vprops.ndevs = 1;                                \
    (dst)->vprops.devs[0] = (dev);                          \
    (dst)->max_p2p_bytes = (src)->max_p2p_bytes;            \
    (dst)->max_coll_bytes = (src)->max_coll_bytes;          \
  } while (0)

/* ---- Connections (ctx is the core context; NULL is refused) ------------- */

nccl_result_t rr_abi_listen(rr_net_ctx *ctx, int dev, void *handle, void **listen_comm);
nccl_result_t rr_abi_connect(rr_net_ctx *ctx, int dev, void *handle, void **send_comm,
                             nccl_net_device_handle_t **dev_handle);
nccl_result_t rr_abi_accept(void *listen_comm, void **recv_comm,
                            nccl_net_device_handle_t **dev_handle);
nccl_result_t rr_abi_close_send(void *send_comm);
nccl_result_t rr_abi_close_recv(void *recv_comm);
nccl_result_t rr_abi_close_listen(void *listen_comm);

/* v7-v10 listen and connect: the process context. */
nccl_result_t rr_abi_listen_process(int dev, void *handle, void **listen_comm);
nccl_result_t rr_abi_connect_process(int dev, void *handle, void **send_comm,
                                     nccl_net_device_handle_t **dev_handle);
/* v7-v9 init: the process context, no profiler. */
nccl_result_t rr_abi_init_process_no_profiler(nccl_logger_t logger);

/* ---- Memory ------------------------------------------------------------- */

nccl_result_t rr_abi_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
nccl_result_t rr_abi_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                   uint64_t offset, int fd, void **mhandle);
nccl_result_t rr_abi_dereg_mr(void *comm, void *mhandle);
/* Device offload is never offered, so NCCL never calls this; if something
 * does, it gets an internal error and a warning, and *dptr is set to NULL. */
nccl_result_t rr_abi_get_device_mr(void *comm, void *mhandle, void **dptr_mhandle);

/* ---- Data path ---------------------------------------------------------- */

/* v10+ forms (size_t sizes, profiler handles); v7-v9 adapt to these. */
nccl_result_t rr_abi_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                           void *phandle, void **request);
nccl_result_t rr_abi_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                           void **mhandles, void **phandles, void **request);
/* v7/v8: int sizes; a negative size is refused. */
nccl_result_t rr_abi_isend_int(void *send_comm, void *data, int size, int tag, void *mhandle,
                               void **request);
nccl_result_t rr_abi_irecv_int(void *recv_comm, int n, void **data, int *sizes, int *tags,
                               void **mhandles, void **request);
nccl_result_t rr_abi_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                            void **request);
nccl_result_t rr_abi_test(void *request, int *done, int *sizes);
/* A no-op: only device offload needs it, and the request may already be
 * freed when NCCL calls it (after test() reported it done). */
nccl_result_t rr_abi_irecv_consumed(void *recv_comm, int n, void *request);

#endif
