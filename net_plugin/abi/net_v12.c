/* ncclNetPlugin_v12: NCCL 2.30, which calls this table directly as its own.
 * As v11, with 8-device virtual NICs and rail/plane ids in the properties. */
#include "net_abi_util.h"
#include "nccl/net_v12.h"

static nccl_result_t v12_init(void **ctx, uint64_t comm_id, nccl_net_comm_config_v12_t *config,
                              nccl_logger_t logger, nccl_profiler_cb_t profiler) {
  int traffic_class = config != NULL ? config->traffic_class : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  return rr_abi_init_comm(ctx, comm_id, traffic_class, logger, profiler);
}

static nccl_result_t v12_get_properties(int dev, nccl_net_props_v12_t *props) {
  rr_dev_props p;
  nccl_result_t r = rr_abi_dev_props(dev, props, &p);
  if (r != NCCL_RESULT_SUCCESS) return r;
  nccl_net_props_v12_t out = {0};
  RR_ABI_FILL_PROPS_V9(&out, &p, dev);
  out.max_multi_request_size = p.max_multi_request_size > 0 ? p.max_multi_request_size : 1;
  /* The rail is the NIC's subnet (rr_netif_rail_id), the same id on every
   * host: where NCCL keeps a channel on one rail (NCCL_CROSS_NIC=0, NIC
   * fusion by rail) it then pairs NICs that reach each other directly.
   * Planes (fabrics no other NIC reaches) are not something rerail sees. */
  out.rail_id = p.rail_id >= 0 && p.rail_id <= INT16_MAX ? (int16_t)p.rail_id : NCCL_NET_ID_UNDEF;
  out.plane_id = NCCL_NET_ID_UNDEF;
  *props = out;
  return NCCL_RESULT_SUCCESS;
}

static nccl_result_t v12_listen(void *ctx, int dev, void *handle, void **listen_comm) {
  return rr_abi_listen(ctx, dev, handle, listen_comm);
}

static nccl_result_t v12_connect(void *ctx, int dev, void *handle, void **send_comm,
                                 nccl_net_device_handle_t **dev_handle) {
  return rr_abi_connect(ctx, dev, handle, send_comm, dev_handle);
}

/* As in v11: hints on the proxy threads, accepted and ignored. */
static nccl_result_t v12_set_net_attr(void *ctx, nccl_net_attr_v12_t *attr) {
  (void)ctx;
  (void)attr;
  return NCCL_RESULT_SUCCESS;
}

NCCL_ABI_EXPORT const nccl_net_v12_t ncclNetPlugin_v12 = {
    .name = RR_ABI_NET_NAME,
    .init = v12_init,
    .devices = rr_abi_devices,
    .get_properties = v12_get_properties,
    .listen = v12_listen,
    .connect = v12_connect,
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
    .set_net_attr = v12_set_net_attr,
};
