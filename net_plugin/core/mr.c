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

/* The memory kinds every pooled device registers. Only RDMA NICs place
 * bytes in GPU memory: a TCP device (which reads and writes through the
 * CPU) never counts as one that can, whatever it accepts. */
static uint32_t pool_mem_kinds(void) {
  const rr_devices *d = rr_core_devices();
  uint32_t kinds = d->count > 0 ? ~0u : RR_MEM_HOST;
  for (int i = 0; i < d->count; i++)
    kinds &= d->verbs[i] ? d->rail[i]->attr.mem_kinds : RR_MEM_HOST;
  return kinds;
}

int rr_core_ptr_support(void) {
  uint32_t kinds = pool_mem_kinds();
  return RR_PTR_HOST | (kinds & RR_MEM_CUDA ? RR_PTR_CUDA : 0) | (kinds & RR_MEM_DMABUF ? RR_PTR_DMABUF : 0);
}

/* kind: the rr_mem_kind every device registers it as. */
static rr_status reg_on_every_device(void *comm, void *data, size_t size, int type, uint32_t kind, int fd,
                                     uint64_t offset, void **mhandle) {
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
    st = dev->ops->reg_mr(dev, data, size, kind, fd, offset, &mr->reg[i]);
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
  if (type == RR_PTR_HOST) return reg_on_every_device(comm, data, size, type, RR_MEM_HOST, -1, 0, mhandle);
  /* GPU memory by its address: GPUDirect RDMA (nvidia-peermem) lets
   * ibv_reg_mr pin it, on every NIC of the pool. */
  if (type == RR_PTR_CUDA && (pool_mem_kinds() & RR_MEM_CUDA))
    return reg_on_every_device(comm, data, size, type, RR_MEM_CUDA, -1, 0, mhandle);
  RR_WARN("regMr: memory type %d is not supported by every NIC rerail pools (ptrSupport 0x%x)", type,
          rr_core_ptr_support());
  return RR_ERR_UNSUPPORTED;
}

rr_status rr_net_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                               int fd, void **mhandle) {
  /* A DMA-BUF of host memory is still host memory: its address serves every rail. */
  if (type == RR_PTR_HOST) return reg_on_every_device(comm, data, size, type, RR_MEM_HOST, -1, 0, mhandle);
  /* GPU memory with a descriptor: ibv_reg_dmabuf_mr on every NIC (NCCL
   * passes NCCL_PTR_CUDA with the descriptor); without one, by address. */
  if (fd >= 0 && (type == RR_PTR_CUDA || type == RR_PTR_DMABUF)) {
    if (!(pool_mem_kinds() & RR_MEM_DMABUF)) {
      RR_WARN("regMrDmaBuf: not every NIC rerail pools can register DMA-BUF memory (ptrSupport 0x%x)",
              rr_core_ptr_support());
      return RR_ERR_UNSUPPORTED;
    }
    return reg_on_every_device(comm, data, size, type, RR_MEM_DMABUF, fd, offset, mhandle);
  }
  return rr_net_reg_mr(comm, data, size, type, mhandle);
}

rr_status rr_net_dereg_mr(void *comm, void *mhandle) {
  (void)comm;
  if (!mhandle) return RR_OK;
  mr_release(mhandle);
  return RR_OK;
}
