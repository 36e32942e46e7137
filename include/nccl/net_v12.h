/* ncclNet v12 (NCCL 2.30): exported as ncclNetPlugin_v12.
 *
 * Changes from v11: a virtual NIC may merge up to 8 devices, and properties
 * end with railId / planeId (NCCL_NET_ID_UNDEF when unknown), which NCCL's
 * rail-aware NIC fusion reads. NCCL 2.30 uses this table as its own: it calls
 * the entries directly, with no compatibility layer in between. */
#ifndef RERAIL_NCCL_NET_V12_H
#define RERAIL_NCCL_NET_V12_H
#include "nccl_common.h"

typedef struct nccl_net_vdev_props_v12 {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} nccl_net_vdev_props_v12_t;

typedef struct nccl_net_comm_config_v12 {
  int traffic_class;
} nccl_net_comm_config_v12_t;

typedef struct nccl_net_props_v12 {
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
  nccl_net_vdev_props_v12_t vprops;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
  int max_multi_request_size;
  int16_t rail_id;            /* which rail (network plane group) the NIC serves */
  int16_t plane_id;           /* which plane within the rail */
} nccl_net_props_v12_t;

typedef struct nccl_net_comm_attr_v12 {
  int32_t max_concurrent_peers;
  int32_t min_concurrent_peers;
  int32_t max_flows_per_peer;
  int32_t min_flows_per_peer;
} nccl_net_comm_attr_v12_t;

typedef struct nccl_net_attr_v12 {
  nccl_net_comm_attr_v12_t send;
  nccl_net_comm_attr_v12_t recv;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} nccl_net_attr_v12_t;

/* Entries as in v11 (net_v11.h), with the v12 structs. */
typedef struct nccl_net_v12 {
  const char *name;
  nccl_result_t (*init)(void **ctx, uint64_t comm_id, nccl_net_comm_config_v12_t *config,
                        nccl_logger_t logger, nccl_profiler_cb_t profiler);
  nccl_result_t (*devices)(int *ndev);
  nccl_result_t (*get_properties)(int dev, nccl_net_props_v12_t *props);
  nccl_result_t (*listen)(void *ctx, int dev, void *handle, void **listen_comm);
  nccl_result_t (*connect)(void *ctx, int dev, void *handle, void **send_comm,
                           nccl_net_device_handle_t **dev_handle);
  nccl_result_t (*accept)(void *listen_comm, void **recv_comm,
                          nccl_net_device_handle_t **dev_handle);
  nccl_result_t (*reg_mr)(void *comm, void *data, size_t size, int type, void **mhandle);
  nccl_result_t (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                 int fd, void **mhandle);
  nccl_result_t (*dereg_mr)(void *comm, void *mhandle);
  nccl_result_t (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                         void *phandle, void **request);
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
  nccl_result_t (*make_vdevice)(int *d, nccl_net_vdev_props_v12_t *props);
  nccl_result_t (*finalize)(void *ctx);
  nccl_result_t (*set_net_attr)(void *ctx, nccl_net_attr_v12_t *attr);
} nccl_net_v12_t;

#endif
