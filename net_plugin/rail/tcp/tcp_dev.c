/* The TCP rail's device layer: a pooled NIC as sockets see it.
 *
 * Registrations: TCP has no protection domains and needs no local keys, but
 * every registration still gets a key per device, random, which the engine
 * advertises in its clear-to-sends and checks on every frame that arrives:
 * a peer cannot guess its way into a buffer, and the engine, not the rail,
 * decides where bytes land (nothing is looked up in a process-wide table). */
#include "rail_tcp.h"
#include "rr_clock.h"
#include "rr_log.h"

#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

typedef struct tcp_dev {
  rr_rail_dev base;
} tcp_dev;

static uint32_t random_key(void) {
  uint32_t k = 0;
  while (k == 0) {
    if (getrandom(&k, sizeof k, 0) != (ssize_t)sizeof k)
      k = (uint32_t)(rr_now_ns() * 2654435761u) ^ (uint32_t)getpid();
  }
  return k;
}

rr_status tcp_reg_mr(rr_rail_dev *dev, void *base, size_t len, uint32_t kind, int dmabuf_fd,
                            uint64_t dmabuf_offset, rr_rail_mr **out) {
  (void)dmabuf_fd;
  (void)dmabuf_offset;
  /* Sockets read and write host memory only (a DMA-BUF of host memory is
   * still host memory to them; the core maps it before asking). */
  if (!(kind & (RR_MEM_HOST | RR_MEM_DMABUF))) return RR_ERR_UNSUPPORTED;
  rr_rail_mr *mr = calloc(1, sizeof *mr);
  if (!mr) return RR_ERR_NOMEM;
  *mr = (rr_rail_mr){.dev = dev, .base = base, .len = len};
  mr->lkey = mr->rkey = random_key();
  *out = mr;
  return RR_OK;
}

void tcp_dereg_mr(rr_rail_mr *mr) { free(mr); }

/* Every socket is driven by its own endpoint's progress: nothing is shared. */
rr_status tcp_dev_progress(rr_rail_dev *dev) {
  (void)dev;
  return RR_OK;
}

/* Link state comes from netlink in the core's monitor, for every transport. */
rr_rail_dev_event_kind tcp_dev_event(rr_rail_dev *dev, rr_rail_dev_event *ev) {
  (void)dev;
  ev->kind = RR_RAIL_DEV_EV_NONE;
  return RR_RAIL_DEV_EV_NONE;
}

void tcp_dev_close(rr_rail_dev *dev) { free(rr_container_of(dev, tcp_dev, base)); }

rr_status rr_tcp_dev_open(int index, rr_rail_dev **out) {
  tcp_dev *d = calloc(1, sizeof *d);
  if (!d) return RR_ERR_NOMEM;
  d->base.ops = &rr_tcp_rail_ops;
  d->base.index = index;
  /* Several streams per rail: writes of one endpoint are not ordered with
   * each other, only each stream's frames are. */
  d->base.attr = (rr_rail_dev_attr){.caps = RR_RAIL_CAP_WRITE | RR_RAIL_CAP_WRITE_IMM | RR_RAIL_CAP_WRITE_BEGIN |
                                              RR_RAIL_CAP_PATH_STATS,
                                    .mem_kinds = RR_MEM_HOST | RR_MEM_DMABUF,
                                    .inline_max = 0,
                                    .max_eps = 0,
                                    .addr_len = 0};
  *out = &d->base;
  return RR_OK;
}

const rr_rail_transport rr_tcp_transport = {.name = "tcp", .dev_open = rr_tcp_dev_open};
