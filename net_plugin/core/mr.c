/* Memory registration. The TCP rail advertises host memory only, so NCCL
 * stages GPU data through host buffers and never asks us to register CUDA or
 * DMA-BUF memory; if something does, it gets a clear "unsupported". */
#include "core_internal.h"
#include "rail_tcp.h"
#include "rr_log.h"

#include <stdlib.h>

static int comm_is_ours(const void *comm) {
  if (!comm) return 0;
  uint32_t magic = *(const uint32_t *)comm;
  return magic == RR_MAGIC_SEND || magic == RR_MAGIC_RECV;
}

rr_status rr_net_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  if (!mhandle || !comm_is_ours(comm)) {
    RR_WARN("regMr: not a rerail comm");
    return RR_ERR_INVALID;
  }
  if (type != RR_PTR_HOST) {
    RR_WARN("regMr: memory type %d is not supported by the TCP rail (host memory only)", type);
    return RR_ERR_UNSUPPORTED;
  }
  if (!data && size) return RR_ERR_INVALID;
  rr_mr *mr = calloc(1, sizeof *mr);
  if (!mr) return RR_ERR_NOMEM;
  rr_status st = rr_tcp_reg_mr(data, size, &mr->rail_mr);
  if (st != RR_OK) {
    free(mr);
    return st;
  }
  mr->base = data;
  mr->size = size;
  mr->type = type;
  *mhandle = mr;
  return RR_OK;
}

rr_status rr_net_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                               int fd, void **mhandle) {
  (void)offset;
  (void)fd;
  /* A DMA-BUF of host memory is still host memory to a socket. */
  return rr_net_reg_mr(comm, data, size, type, mhandle);
}

rr_status rr_net_dereg_mr(void *comm, void *mhandle) {
  (void)comm;
  if (!mhandle) return RR_OK;
  rr_mr *mr = mhandle;
  rr_tcp_dereg_mr(mr->rail_mr);
  free(mr);
  return RR_OK;
}
