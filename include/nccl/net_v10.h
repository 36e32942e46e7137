/* ncclNet v10: exported as ncclNetPlugin_v10.
 *
 * Changes from v9: init also receives NCCL's profiler callback, connect
 * receives a per-communicator config (traffic class), and isend/irecv carry
 * profiler parent handles. Still no context: init runs once per process. */
#ifndef RERAIL_NCCL_NET_V10_H
#define RERAIL_NCCL_NET_V10_H
#include "nccl_common.h"

typedef struct nccl_net_vdev_props_v10 {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V9];
} nccl_net_vdev_props_v10_t;

typedef struct nccl_net_comm_config_v10 {
  int traffic_class;          /* plugin-defined QoS class, or NCCL_NET_TRAFFIC_CLASS_UNDEF */
} nccl_net_comm_config_v10_t;

/* Same layout as v9. */
typedef struct nccl_net_props_v10 {
  char *name;
  char *pci_path;
  uint64_t guid;
  int ptr_support;
  int reg_is_global;
  int force_flush;
  int speed;
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  nccl_net_device_type_t net_device_type;
  int net_device_version;
  nccl_net_vdev_props_v10_t vprops;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
} nccl_net_props_v10_t;

typedef struct nccl_net_v10 {
  const char *name;
  nccl_result_t (*init)(nccl_logger_t logger, nccl_profiler_cb_t profiler);
  nccl_result_t (*devices)(int *ndev);
  nccl_result_t (*get_properties)(int dev, nccl_net_props_v10_t *props);
  nccl_result_t (*listen)(int dev, void *handle, void **listen_comm);
  /* config may be NULL. */
  nccl_result_t (*connect)(int dev, nccl_net_comm_config_v10_t *config, void *handle,
                           void **send_comm, nccl_net_device_handle_t **dev_handle);
  nccl_result_t (*accept)(void *listen_comm, void **recv_comm,
                          nccl_net_device_handle_t **dev_handle);
  nccl_result_t (*reg_mr)(void *comm, void *data, size_t size, int type, void **mhandle);
  nccl_result_t (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                 int fd, void **mhandle);
  nccl_result_t (*dereg_mr)(void *comm, void *mhandle);
  /* phandle: profiler parent for events of this send; may be NULL. */
  nccl_result_t (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                         void *phandle, void **request);
  /* phandles: one profiler parent per grouped receive; the array may be NULL. */
  nccl_result_t (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                         void **mhandles, void **phandles, void **request);
  nccl_result_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                          void **request);
  nccl_result_t (*test)(void *request, int *done, int *sizes);
  nccl_result_t (*close_send)(void *send_comm);
  nccl_result_t (*close_recv)(void *recv_comm);
  nccl_result_t (*close_listen)(void *listen_comm);
  nccl_result_t (*get_device_mr)(void *comm, void *mhandle, void **dptr_mhandle);
  nccl_result_t (*irecv_consumed)(void *recv_comm, int n, void *request);
  nccl_result_t (*make_vdevice)(int *d, nccl_net_vdev_props_v10_t *props);
} nccl_net_v10_t;

#endif
