/* Memory registration: every buffer NCCL registers is registered at once on
 * every NIC rerail pools that can register its kind (GPU memory: the RDMA
 * NICs) — a superset of any connection's failover chain —
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

/* The memory kinds device i registers, as its transport says (only a NIC
 * that places bytes itself, RDMA, says GPU memory). */
static uint32_t dev_mem_kinds(int i) {
  const rr_devices *d = rr_core_devices();
  if (i < 0 || i >= d->count) return 0;
  return d->rail[i]->attr.mem_kinds;
}

/* The kinds some pooled device registers. */
static uint32_t any_mem_kinds(void) {
  uint32_t kinds = RR_MEM_HOST;
  for (int i = 0; i < rr_core_devices()->count; i++) kinds |= dev_mem_kinds(i);
  return kinds;
}

static int kinds_to_ptr(uint32_t kinds) {
  return RR_PTR_HOST | (kinds & RR_MEM_CUDA ? RR_PTR_CUDA : 0) | (kinds & RR_MEM_DMABUF ? RR_PTR_DMABUF : 0);
}

/* Per device (issue 23): a TCP device in the pool does not turn GPUDirect
 * off for the verbs devices; GPU memory is registered on the devices that
 * can, and only their rails carry it (engine_send.c, rail_carries). */
int rr_core_ptr_support(int dev) { return kinds_to_ptr(dev < 0 ? any_mem_kinds() : dev_mem_kinds(dev)); }

/* kind: the rr_mem_kind it is registered as, on every device that
 * registers that kind (GPU memory: RDMA NICs only; the others get NULL and
 * carry none of it); at least one must. */
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
  int nreg = 0;
  for (int i = 0; i < d->count && st == RR_OK; i++) {
    rr_rail_dev *dev = d->rail[i];
    if (!(dev_mem_kinds(i) & kind)) continue;
    nreg++;
    st = dev->ops->reg_mr(dev, data, size, kind, fd, offset, &mr->reg[i]);
    if (st != RR_OK)
      RR_WARN("regMr: %zu bytes of memory type %d on device %d (%s): %s", size, type, dev->index,
              dev->ops->name, rr_status_str(st));
  }
  if (st == RR_OK && !nreg) {
    RR_WARN("regMr: no NIC rerail pools registers memory type %d", type);
    st = RR_ERR_UNSUPPORTED;
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
   * ibv_reg_mr pin it, on every NIC of the pool that has it. */
  if (type == RR_PTR_CUDA && (any_mem_kinds() & RR_MEM_CUDA))
    return reg_on_every_device(comm, data, size, type, RR_MEM_CUDA, -1, 0, mhandle);
  RR_WARN("regMr: memory type %d is not supported by any NIC rerail pools (ptrSupport 0x%x)", type,
          rr_core_ptr_support(-1));
  return RR_ERR_UNSUPPORTED;
}

rr_status rr_net_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                               int fd, void **mhandle) {
  /* A DMA-BUF of host memory is still host memory: its address serves every rail. */
  if (type == RR_PTR_HOST) return reg_on_every_device(comm, data, size, type, RR_MEM_HOST, -1, 0, mhandle);
  /* GPU memory with a descriptor: ibv_reg_dmabuf_mr on every NIC (NCCL
   * passes NCCL_PTR_CUDA with the descriptor); without one, by address. */
  if (fd >= 0 && (type == RR_PTR_CUDA || type == RR_PTR_DMABUF)) {
    if (!(any_mem_kinds() & RR_MEM_DMABUF)) {
      RR_WARN("regMrDmaBuf: no NIC rerail pools can register DMA-BUF memory (ptrSupport 0x%x)",
              rr_core_ptr_support(-1));
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
