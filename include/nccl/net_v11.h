/* ncclNet v11 (NCCL 2.28-2.29): exported as ncclNetPlugin_v11.
 *
 * Changes from v10: init runs once per communicator and returns a context
 * that listen, connect, finalize and setNetAttr receive; the comm config
 * moved from connect to init; properties gained maxMultiRequestSize; new
 * finalize and setNetAttr entries. Communicators created by a split that
 * shares resources reuse their parent's context without a new init, and
 * NCCL finalizes a context once, from whichever sharing comm goes last. */
#ifndef RERAIL_NCCL_NET_V11_H
#define RERAIL_NCCL_NET_V11_H
#include "nccl_common.h"

typedef struct nccl_net_vdev_props_v11 {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V9];
} nccl_net_vdev_props_v11_t;

typedef struct nccl_net_comm_config_v11 {
  int traffic_class;
} nccl_net_comm_config_v11_t;

typedef struct nccl_net_props_v11 {
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
  nccl_net_vdev_props_v11_t vprops;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
  int max_multi_request_size; /* requests one multi-request may hold; 1 = none */
} nccl_net_props_v11_t;

/* Concurrency hints for one direction of a comm. */
typedef struct nccl_net_comm_attr_v11 {
  int32_t max_concurrent_peers;
  int32_t min_concurrent_peers;
  int32_t max_flows_per_peer;
  int32_t min_flows_per_peer;
} nccl_net_comm_attr_v11_t;

/* What NCCL is about to run over the network: hints only, fields may be
 * NCCL_NET_ATTR_UNDEF. op/algo/proto are NCCL's function, algorithm and
 * protocol ids. */
typedef struct nccl_net_attr_v11 {
  nccl_net_comm_attr_v11_t send;
  nccl_net_comm_attr_v11_t recv;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} nccl_net_attr_v11_t;

typedef struct nccl_net_v11 {
  const char *name;
  /* Per communicator. config may be NULL for callers other than NCCL. */
  nccl_result_t (*init)(void **ctx, uint64_t comm_id, nccl_net_comm_config_v11_t *config,
                        nccl_logger_t logger, nccl_profiler_cb_t profiler);
  nccl_result_t (*devices)(int *ndev);
  nccl_result_t (*get_properties)(int dev, nccl_net_props_v11_t *props);
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
  nccl_result_t (*make_vdevice)(int *d, nccl_net_vdev_props_v11_t *props);
  /* Release the context init returned. */
  nccl_result_t (*finalize)(void *ctx);
  /* Hints before connections and transfers; called on the proxy threads. */
  nccl_result_t (*set_net_attr)(void *ctx, nccl_net_attr_v11_t *attr);
} nccl_net_v11_t;

#endif
