/* ncclNetPlugin_v10: NCCL 2.26-2.27. Like v9 plus the profiler callback at
 * init, profiler handles on isend/irecv, and a comm config on connect. */
#include "net_abi_util.h"
#include "nccl/net_v10.h"

static nccl_result_t v10_init(nccl_logger_t logger, nccl_profiler_cb_t profiler) {
  return rr_abi_init_process(logger, profiler);
}

static nccl_result_t v10_get_properties(int dev, nccl_net_props_v10_t *props) {
  rr_dev_props p;
  nccl_result_t r = rr_abi_dev_props(dev, props, &p);
  if (r != NCCL_RESULT_SUCCESS) return r;
  nccl_net_props_v10_t out = {0};
  RR_ABI_FILL_PROPS_V9(&out, &p, dev);
  *props = out;
  return NCCL_RESULT_SUCCESS;
}

/* The config (may be NULL) only carries a traffic class. rerail's
 * connections take the communicator's class from their context (v11+),
 * and v10 has one context for the whole process, created before any comm:
 * the class is ignored here. RERAIL_IB_TC / NCCL_IB_TC still apply. */
static nccl_result_t v10_connect(int dev, nccl_net_comm_config_v10_t *config, void *handle,
                                 void **send_comm, nccl_net_device_handle_t **dev_handle) {
  (void)config;
  return rr_abi_connect_process(dev, handle, send_comm, dev_handle);
}

NCCL_ABI_EXPORT const nccl_net_v10_t ncclNetPlugin_v10 = {
    .name = RR_ABI_NET_NAME,
    .init = v10_init,
    .devices = rr_abi_devices,
    .get_properties = v10_get_properties,
    .listen = rr_abi_listen_process,
    .connect = v10_connect,
    .accept = rr_abi_accept,
    .reg_mr = rr_abi_reg_mr,
    .reg_mr_dmabuf = rr_abi_reg_mr_dmabuf,
    .dereg_mr = rr_abi_dereg_mr,
    .isend = rr_abi_isend,
    .irecv = rr_abi_irecv,
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
