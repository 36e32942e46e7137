/* Memory registration: every buffer NCCL registers is registered at once on
 * every NIC rerail pools — a superset of any connection's failover chain —
 * so a failover registers and exchanges nothing (the receiver's
 * clear-to-sends already carry the buffer's key on every rail), and the
 * handle is valid on every connection (NCCL may share it: regIsGlobal).
 * Transports cache registrations, so NCCL registering a buffer again costs
 * no new registration. */
#include "core_internal.h"
#include "rr_log.h"

#include <stdlib.h>

static int comm_is_ours(const void *comm) {
  if (!comm) return 0;
  uint32_t magic = *(const uint32_t *)comm;
  return magic == RR_MAGIC_SEND || magic == RR_MAGIC_RECV;
}

static void mr_release(rr_mr *mr) {
  for (int d = 0; d < RR_MAX_DEVS; d++)
    if (mr->reg[d]) mr->reg[d]->dev->ops->dereg_mr(mr->reg[d]);
  free(mr);
}

static uint32_t mem_kind(int type) {
  return type == RR_PTR_CUDA ? RR_MEM_CUDA : type == RR_PTR_DMABUF ? RR_MEM_DMABUF : RR_MEM_HOST;
}

static rr_status reg_on_every_device(void *comm, void *data, size_t size, int type, int fd, uint64_t offset,
                              void **mhandle) {
  if (!mhandle || !comm_is_ours(comm)) {
    RR_WARN("regMr: not a rerail comm");
    return RR_ERR_INVALID;
  }
  if (!data && size) return RR_ERR_INVALID;
  rr_mr *mr = calloc(1, sizeof *mr);
  if (!mr) return RR_ERR_NOMEM;
  mr->base = data;
  mr->size = size;
  mr->type = type;
  const rr_devices *d = rr_core_devices();
  rr_status st = RR_OK;
  for (int i = 0; i < d->count && st == RR_OK; i++) {
    rr_rail_dev *dev = d->rail[i];
    st = dev->ops->reg_mr(dev, data, size, mem_kind(type), fd, offset, &mr->reg[i]);
    if (st != RR_OK)
      RR_WARN("regMr: %zu bytes of memory type %d on device %d (%s): %s", size, type, dev->index,
              dev->ops->name, rr_status_str(st));
  }
  if (st != RR_OK) {
    mr_release(mr);
    return st;
  }
  *mhandle = mr;
  return RR_OK;
}

rr_status rr_net_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  if (type != RR_PTR_HOST) {
    RR_WARN("regMr: memory type %d is not supported by the rails of this build (host memory only)", type);
    return RR_ERR_UNSUPPORTED;
  }
  return reg_on_every_device(comm, data, size, type, -1, 0, mhandle);
}

rr_status rr_net_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                               int fd, void **mhandle) {
  /* A DMA-BUF of host memory is still host memory to a socket. */
  if (type != RR_PTR_HOST) return rr_net_reg_mr(comm, data, size, type, mhandle);
  return reg_on_every_device(comm, data, size, type, fd, offset, mhandle);
}

rr_status rr_net_dereg_mr(void *comm, void *mhandle) {
  (void)comm;
  if (!mhandle) return RR_OK;
  mr_release(mhandle);
  return RR_OK;
}
