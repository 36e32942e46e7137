/* The ncclNet entries every version shares, and the conversions between
 * NCCL's arguments and the core's. See net_abi_util.h. */
#include "net_abi_util.h"

#include <limits.h>
#include <stdint.h>

#include "rr_log.h"

nccl_result_t rr_abi_result(rr_status s) {
  switch (s) {
  case RR_OK:
  case RR_AGAIN:
    return NCCL_RESULT_SUCCESS;
  case RR_ERR_INVALID:
    return NCCL_RESULT_INVALID_ARGUMENT;
  case RR_ERR_SYSTEM:
  case RR_ERR_RAIL:
  case RR_ERR_NOMEM:  /* NCCL reports failed allocations as system errors */
    return NCCL_RESULT_SYSTEM_ERROR;
  case RR_ERR_PEER:
  case RR_ERR_PROTOCOL:  /* the peer broke the wire protocol: its fault, not ours */
    return NCCL_RESULT_REMOTE_ERROR;
  case RR_ERR_UNSUPPORTED:
  case RR_ERR_INTERNAL:
    break;
  }
  return NCCL_RESULT_INTERNAL_ERROR;
}

/* ---- Init / finalize ---------------------------------------------------- */

static rr_init_args make_init_args(uint64_t comm_id, int traffic_class, nccl_logger_t logger,
                                   nccl_profiler_cb_t profiler) {
  rr_init_args args = {
      /* Same function, NCCL's enum level vs the int level rr_log uses: the
       * two are passed identically. */
      .logger = (rr_logger_fn)logger,
      .comm_id = comm_id,
      .traffic_class = traffic_class,
      /* Kept opaque in the core; only a shim knows its type. */
      /* nccl_result_t is an int-sized enum: the same calling convention. */
      .profiler = (rr_profiler_fn)profiler,
  };
  return args;
}

nccl_result_t rr_abi_init_process(nccl_logger_t logger, nccl_profiler_cb_t profiler) {
  /* comm_id 0 selects the core's process context; the core makes repeated
   * calls (NCCL re-inits after the last comm went away) idempotent. */
  rr_init_args args = make_init_args(0, NCCL_NET_TRAFFIC_CLASS_UNDEF, logger, profiler);
  rr_net_ctx *ctx = NULL;
  return rr_abi_result(rr_net_init(&args, &ctx));
}

nccl_result_t rr_abi_init_comm(void **ctx, uint64_t comm_id, int traffic_class,
                               nccl_logger_t logger, nccl_profiler_cb_t profiler) {
  if (ctx == NULL) {
    if (logger) rr_log_set_logger((rr_logger_fn)logger);
    RR_WARN("init called without a context pointer");
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  rr_init_args args = make_init_args(comm_id, traffic_class, logger, profiler);
  rr_net_ctx *c = NULL;
  rr_status s = rr_net_init(&args, &c);
  if (rr_failed(s)) return rr_abi_result(s);
  *ctx = c;
  return NCCL_RESULT_SUCCESS;
}

nccl_result_t rr_abi_finalize(void *ctx) {
  if (ctx == NULL) {
    RR_WARN("finalize called with a NULL context");
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  return rr_abi_result(rr_net_finalize(ctx));
}

rr_net_ctx *rr_abi_process_ctx(void) {
  rr_net_ctx *ctx = rr_net_default_ctx();
  if (ctx == NULL) RR_WARN("called before init");
  return ctx;
}

/* ---- Devices ------------------------------------------------------------ */

nccl_result_t rr_abi_devices(int *ndev) {
  if (ndev == NULL) {
    RR_WARN("devices called with a NULL count pointer");
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  return rr_abi_result(rr_net_devices(ndev));
}

nccl_result_t rr_abi_dev_props(int dev, const void *dst, rr_dev_props *props) {
  if (dst == NULL) {
    RR_WARN("getProperties called with a NULL properties pointer");
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  return rr_abi_result(rr_net_get_properties(dev, props));
}

/* ---- Connections -------------------------------------------------------- */

nccl_result_t rr_abi_listen(rr_net_ctx *ctx, int dev, void *handle, void **listen_comm) {
  if (ctx == NULL || handle == NULL || listen_comm == NULL) {
    RR_WARN("listen called with a NULL %s",
            ctx == NULL ? "context" : handle == NULL ? "handle" : "listen comm pointer");
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  rr_listen_comm *lc = NULL;
  rr_status s = rr_net_listen(ctx, dev, handle, &lc);
  if (rr_failed(s)) return rr_abi_result(s);
  *listen_comm = lc;
  return NCCL_RESULT_SUCCESS;
}

nccl_result_t rr_abi_listen_process(int dev, void *handle, void **listen_comm) {
  rr_net_ctx *ctx = rr_abi_process_ctx();
  if (ctx == NULL) return NCCL_RESULT_INVALID_USAGE;
  return rr_abi_listen(ctx, dev, handle, listen_comm);
}

nccl_result_t rr_abi_connect_process(int dev, void *handle, void **send_comm,
                                     nccl_net_device_handle_t **dev_handle) {
  rr_net_ctx *ctx = rr_abi_process_ctx();
  if (ctx == NULL) return NCCL_RESULT_INVALID_USAGE;
  return rr_abi_connect(ctx, dev, handle, send_comm, dev_handle);
}

nccl_result_t rr_abi_init_process_no_profiler(nccl_logger_t logger) {
  return rr_abi_init_process(logger, NULL);
}

/* rerail never offloads to the device: NULL tells NCCL so. NCCL may pass no
 * pointer at all, or (bootstrap) a pointer to an uninitialised one. */
static void no_device_offload(nccl_net_device_handle_t **dev_handle) {
  if (dev_handle != NULL) *dev_handle = NULL;
}

nccl_result_t rr_abi_connect(rr_net_ctx *ctx, int dev, void *handle, void **send_comm,
                             nccl_net_device_handle_t **dev_handle) {
  if (ctx == NULL || handle == NULL || send_comm == NULL) {
    RR_WARN("connect called with a NULL %s",
            ctx == NULL ? "context" : handle == NULL ? "handle" : "send comm pointer");
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  rr_send_comm *sc = NULL;
  rr_status s = rr_net_connect(ctx, dev, handle, &sc);
  if (rr_failed(s)) return rr_abi_result(s);
  *send_comm = sc;  /* NULL while the connection is in progress */
  no_device_offload(dev_handle);
  return NCCL_RESULT_SUCCESS;
}

nccl_result_t rr_abi_accept(void *listen_comm, void **recv_comm,
                            nccl_net_device_handle_t **dev_handle) {
  if (listen_comm == NULL || recv_comm == NULL) {
    RR_WARN("accept called with a NULL %s",
            listen_comm == NULL ? "listen comm" : "recv comm pointer");
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  rr_recv_comm *rc = NULL;
  rr_status s = rr_net_accept(listen_comm, &rc);
  if (rr_failed(s)) return rr_abi_result(s);
  *recv_comm = rc;  /* NULL while the connection is in progress */
  no_device_offload(dev_handle);
  return NCCL_RESULT_SUCCESS;
}

nccl_result_t rr_abi_close_send(void *send_comm) {
  return rr_abi_result(rr_net_close_send(send_comm));
}

nccl_result_t rr_abi_close_recv(void *recv_comm) {
  return rr_abi_result(rr_net_close_recv(recv_comm));
}

nccl_result_t rr_abi_close_listen(void *listen_comm) {
  return rr_abi_result(rr_net_close_listen(listen_comm));
}

/* ---- Memory ------------------------------------------------------------- */

nccl_result_t rr_abi_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  return rr_abi_result(rr_net_reg_mr(comm, data, size, type, mhandle));
}

nccl_result_t rr_abi_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                   uint64_t offset, int fd, void **mhandle) {
  return rr_abi_result(rr_net_reg_mr_dmabuf(comm, data, size, type, offset, fd, mhandle));
}

nccl_result_t rr_abi_dereg_mr(void *comm, void *mhandle) {
  return rr_abi_result(rr_net_dereg_mr(comm, mhandle));
}

nccl_result_t rr_abi_get_device_mr(void *comm, void *mhandle, void **dptr_mhandle) {
  (void)comm;
  (void)mhandle;
  if (dptr_mhandle != NULL) *dptr_mhandle = NULL;
  RR_WARN("getDeviceMr called, but rerail never offers device offload "
          "(netDeviceType is HOST)");
  return NCCL_RESULT_INTERNAL_ERROR;
}

/* ---- Data path ---------------------------------------------------------- */

nccl_result_t rr_abi_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                           void *phandle, void **request) {
  if (request == NULL) {
    RR_WARN("isend called with a NULL request pointer");
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  void *req = NULL;
  rr_status s = rr_net_isend(send_comm, data, size, tag, mhandle, phandle, &req);
  if (rr_failed(s)) return rr_abi_result(s);
  *request = req;  /* NULL: cannot post now */
  return NCCL_RESULT_SUCCESS;
}

nccl_result_t rr_abi_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                           void **mhandles, void **phandles, void **request) {
  if (request == NULL) {
    RR_WARN("irecv called with a NULL request pointer");
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  /* *request may hold NCCL_NET_OPTIONAL_RECV_COMPLETION, a hint that the
   * completion could be skipped. rerail always completes receives (its
   * failover needs to know what landed), so the hint is dropped here; it must
   * never survive as a "request" when nothing was posted. */
  *request = NULL;
  void *req = NULL;
  rr_status s = rr_net_irecv(recv_comm, n, data, sizes, tags, mhandles, phandles, &req);
  if (rr_failed(s)) return rr_abi_result(s);
  *request = req;  /* NULL: cannot post now */
  return NCCL_RESULT_SUCCESS;
}

nccl_result_t rr_abi_isend_int(void *send_comm, void *data, int size, int tag, void *mhandle,
                               void **request) {
  if (size < 0) {
    RR_WARN("isend of a negative size (%d)", size);
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  return rr_abi_isend(send_comm, data, (size_t)size, tag, mhandle, NULL, request);
}

nccl_result_t rr_abi_irecv_int(void *recv_comm, int n, void **data, int *sizes, int *tags,
                               void **mhandles, void **request) {
  if (n < 1 || n > RR_NET_MAX_RECVS || sizes == NULL) {
    RR_WARN("irecv of %d grouped receives (1..%d, sizes %s)", n, RR_NET_MAX_RECVS,
            sizes == NULL ? "NULL" : "given");
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  size_t wide[RR_NET_MAX_RECVS];
  for (int i = 0; i < n; i++) {
    if (sizes[i] < 0) {
      RR_WARN("irecv of a negative size (%d) in receive %d", sizes[i], i);
      return NCCL_RESULT_INVALID_ARGUMENT;
    }
    wide[i] = (size_t)sizes[i];
  }
  return rr_abi_irecv(recv_comm, n, data, wide, tags, mhandles, NULL, request);
}

nccl_result_t rr_abi_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                            void **request) {
  if (request == NULL) {
    RR_WARN("iflush called with a NULL request pointer");
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  void *req = NULL;
  rr_status s = rr_net_iflush(recv_comm, n, data, sizes, mhandles, &req);
  if (rr_failed(s)) return rr_abi_result(s);
  *request = req;  /* NULL: nothing to wait for */
  return NCCL_RESULT_SUCCESS;
}

/* The core writes one size per grouped receive (one for a send) but does not
 * say how many; NCCL's array may hold a single int (send side) or more, and
 * NCCL sums every entry. Entries the core left at this marker were not
 * written and must not be copied. */
#define RR_ABI_SIZE_UNSET SIZE_MAX

nccl_result_t rr_abi_test(void *request, int *done, int *sizes) {
  if (request == NULL || done == NULL) {
    RR_WARN("test called with a NULL %s", request == NULL ? "request" : "done pointer");
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  size_t wide[RR_NET_MAX_RECVS];
  for (int i = 0; i < RR_NET_MAX_RECVS; i++) wide[i] = RR_ABI_SIZE_UNSET;
  int finished = 0;
  rr_status s = rr_net_test(request, &finished, sizes != NULL ? wide : NULL);
  if (rr_failed(s)) return rr_abi_result(s);
  if (finished && sizes != NULL) {
    for (int i = 0; i < RR_NET_MAX_RECVS && wide[i] != RR_ABI_SIZE_UNSET; i++) {
      /* NCCL's test() reports int sizes; a transfer past INT_MAX cannot be
       * described, and the properties keep transfers below that. */
      if (wide[i] > (size_t)INT_MAX) {
        RR_WARN("completed transfer of %zu bytes exceeds test()'s int size", wide[i]);
        return NCCL_RESULT_INTERNAL_ERROR;
      }
      sizes[i] = (int)wide[i];
    }
  }
  *done = finished;
  return NCCL_RESULT_SUCCESS;
}

nccl_result_t rr_abi_irecv_consumed(void *recv_comm, int n, void *request) {
  (void)recv_comm;
  (void)n;
  (void)request;
  return NCCL_RESULT_SUCCESS;
}
