/* ncclNetPlugin_v8: the table NCCL 2.20-2.23 bind (and later ones when no
 * newer symbol exists; 2.19 knows only v7). No context: every call runs on
 * the process context created by init. Sizes are int. */
#include "net_abi_util.h"
#include "nccl/net_v8.h"

static nccl_result_t v8_get_properties(int dev, nccl_net_props_v8_t *props) {
  rr_dev_props p;
  nccl_result_t r = rr_abi_dev_props(dev, props, &p);
  if (r != NCCL_RESULT_SUCCESS) return r;
  nccl_net_props_v8_t out = {0};
  RR_ABI_FILL_PROPS_COMMON(&out, &p);
  *props = out;
  return NCCL_RESULT_SUCCESS;
}

NCCL_ABI_EXPORT const nccl_net_v8_t ncclNetPlugin_v8 = {
    .name = RR_ABI_NET_NAME,
    .init = rr_abi_init_process_no_profiler,
    .devices = rr_abi_devices,
    .get_properties = v8_get_properties,
    .listen = rr_abi_listen_process,
    .connect = rr_abi_connect_process,
    .accept = rr_abi_accept,
    .reg_mr = rr_abi_reg_mr,
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
