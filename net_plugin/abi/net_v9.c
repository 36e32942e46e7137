/* ncclNetPlugin_v9: NCCL 2.24-2.25. Like v8 but size_t send/recv sizes,
 * transfer limits and virtual NICs in the properties, and makeVDevice. */
#include "net_abi_util.h"
#include "nccl/net_v9.h"

static nccl_result_t v9_get_properties(int dev, nccl_net_props_v9_t *props) {
  rr_dev_props p;
  nccl_result_t r = rr_abi_dev_props(dev, props, &p);
  if (r != NCCL_RESULT_SUCCESS) return r;
  nccl_net_props_v9_t out = {0};
  RR_ABI_FILL_PROPS_V9(&out, &p, dev);
  *props = out;
  return NCCL_RESULT_SUCCESS;
}

static nccl_result_t v9_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                              void **request) {
  return rr_abi_isend(send_comm, data, size, tag, mhandle, NULL, request);
}

static nccl_result_t v9_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                              void **mhandles, void **request) {
  return rr_abi_irecv(recv_comm, n, data, sizes, tags, mhandles, NULL, request);
}

NCCL_ABI_EXPORT const nccl_net_v9_t ncclNetPlugin_v9 = {
    .name = RR_ABI_NET_NAME,
    .init = rr_abi_init_process_no_profiler,
    .devices = rr_abi_devices,
    .get_properties = v9_get_properties,
    .listen = rr_abi_listen_process,
    .connect = rr_abi_connect_process,
    .accept = rr_abi_accept,
    .reg_mr = rr_abi_reg_mr,
    .reg_mr_dmabuf = rr_abi_reg_mr_dmabuf,
    .dereg_mr = rr_abi_dereg_mr,
    .isend = v9_isend,
    .irecv = v9_irecv,
    .iflush = rr_abi_iflush,
    .test = rr_abi_test,
    .close_send = rr_abi_close_send,
    .close_recv = rr_abi_close_recv,
    .close_listen = rr_abi_close_listen,
    .get_device_mr = rr_abi_get_device_mr,
    .irecv_consumed = rr_abi_irecv_consumed,
    /* NULL: NCCL then fuses no NICs (rerail pools them itself) instead of
     * trying every merge and logging each refusal. */
    .make_vdevice = NULL,
};
