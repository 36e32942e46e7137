/* ncclNetPlugin_v7: the table NCCL 2.19 binds (2.20+ find v8 first). No
 * context, int sizes: the v8 shim's entries, except the properties (no
 * reg_is_global: NCCL 2.19 registers per communicator whatever we say) and
 * reg_mr, whose size is an int. */
#include "net_abi_util.h"
#include "nccl/net_v7.h"
#include "rr_log.h"

static nccl_result_t v7_get_properties(int dev, nccl_net_props_v7_t *props) {
  rr_dev_props p;
  nccl_result_t r = rr_abi_dev_props(dev, props, &p);
  if (r != NCCL_RESULT_SUCCESS) return r;
  nccl_net_props_v7_t out = {0};
  RR_ABI_FILL_PROPS_V7(&out, &p);
  *props = out;
  return NCCL_RESULT_SUCCESS;
}

static nccl_result_t v7_reg_mr(void *comm, void *data, int size, int type, void **mhandle) {
  if (size < 0) {
    RR_WARN("regMr of a negative size (%d)", size);
    return NCCL_RESULT_INVALID_ARGUMENT;
  }
  return rr_abi_reg_mr(comm, data, (size_t)size, type, mhandle);
}

NCCL_ABI_EXPORT const nccl_net_v7_t ncclNetPlugin_v7 = {
    .name = RR_ABI_NET_NAME,
    .init = rr_abi_init_process_no_profiler,
    .devices = rr_abi_devices,
    .get_properties = v7_get_properties,
    .listen = rr_abi_listen_process,
    .connect = rr_abi_connect_process,
    .accept = rr_abi_accept,
    .reg_mr = v7_reg_mr,
    .reg_mr_dmabuf = rr_abi_reg_mr_dmabuf,
    .dereg_mr = rr_abi_dereg_mr,
    .isend = rr_abi_isend_int,
    .irecv = rr_abi_irecv_int,
    .iflush = rr_abi_iflush,
    .test = rr_abi_test,
    .close_send = rr_abi_close_send,
    .close_recv = rr_abi_close_recv,
    .close_listen = rr_abi_close_listen,
    .get_device_mr = rr_abi_get_device_mr,
    .irecv_consumed = rr_abi_irecv_consumed,
};
