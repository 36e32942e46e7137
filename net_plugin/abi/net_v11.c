/* ncclNetPlugin_v11: NCCL 2.28-2.29. One context per communicator, passed
 * to listen/connect/finalize/setNetAttr; the comm config moved to init. */
#include "net_abi_util.h"
#include "nccl/net_v11.h"

static nccl_result_t v11_init(void **ctx, uint64_t comm_id, nccl_net_comm_config_v11_t *config,
                              nccl_logger_t logger, nccl_profiler_cb_t profiler) {
  int traffic_class = config != NULL ? config->traffic_class : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  return rr_abi_init_comm(ctx, comm_id, traffic_class, logger, profiler);
}

static nccl_result_t v11_get_properties(int dev, nccl_net_props_v11_t *props) {
  rr_dev_props p;
  nccl_result_t r = rr_abi_dev_props(dev, props, &p);
  if (r != NCCL_RESULT_SUCCESS) return r;
  nccl_net_props_v11_t out = {0};
  RR_ABI_FILL_PROPS_V9(&out, &p, dev);
  /* 1 means "no multi-request", the value NCCL assumes for older plugins. */
  out.max_multi_request_size = p.max_multi_request_size > 0 ? p.max_multi_request_size : 1;
  *props = out;
  return NCCL_RESULT_SUCCESS;
}

static nccl_result_t v11_listen(void *ctx, int dev, void *handle, void **listen_comm) {
  return rr_abi_listen(ctx, dev, handle, listen_comm);
}

static nccl_result_t v11_connect(void *ctx, int dev, void *handle, void **send_comm,
                                 nccl_net_device_handle_t **dev_handle) {
  return rr_abi_connect(ctx, dev, handle, send_comm, dev_handle);
}

/* Hints about the coming transfers. NCCL calls this on its proxy threads,
 * possibly per operation, so it must stay free; rerail's rails are chosen
 * by health, not by these hints, so they are accepted and ignored. */
static nccl_result_t v11_set_net_attr(void *ctx, nccl_net_attr_v11_t *attr) {
  (void)ctx;
  (void)attr;
  return NCCL_RESULT_SUCCESS;
}

NCCL_ABI_EXPORT const nccl_net_v11_t ncclNetPlugin_v11 = {
    .name = RR_ABI_NET_NAME,
    .init = v11_init,
    .devices = rr_abi_devices,
    .get_properties = v11_get_properties,
    .listen = v11_listen,
    .connect = v11_connect,
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
    .finalize = rr_abi_finalize,
    .set_net_attr = v11_set_net_attr,
};
