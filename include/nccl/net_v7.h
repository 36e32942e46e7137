/* ncclNet v7: exported as ncclNetPlugin_v7.
 *
 * The only table NCCL 2.19 binds (it looks up v7, then v6 and v5); 2.20 and
 * later look it up only when no newer one is exported, so rerail's v8+ tables
 * win there. Same entries in the same places as v8 (see net_v8.h for what
 * each does), with two differences:
 *  - the properties have no reg_is_global: NCCL 2.19 registers memory per
 *    communicator, so everything after ptr_support sits 4 bytes earlier;
 *  - reg_mr takes an int size (reg_mr_dmabuf already took size_t). */
#ifndef RERAIL_NCCL_NET_V7_H
#define RERAIL_NCCL_NET_V7_H
#include "nccl_common.h"

typedef struct nccl_net_props_v7 {
  char *name;
  char *pci_path;
  uint64_t guid;
  int ptr_support;
  int speed;                  /* Mbit/s */
  int port;
  float latency;              /* microseconds; 0 = unknown */
  int max_comms;
  int max_recvs;
  nccl_net_device_type_t net_device_type;
  int net_device_version;
} nccl_net_props_v7_t;

typedef struct nccl_net_v7 {
  const char *name;
  nccl_result_t (*init)(nccl_logger_t logger);
  nccl_result_t (*devices)(int *ndev);
  nccl_result_t (*get_properties)(int dev, nccl_net_props_v7_t *props);
  nccl_result_t (*listen)(int dev, void *handle, void **listen_comm);
  nccl_result_t (*connect)(int dev, void *handle, void **send_comm,
                           nccl_net_device_handle_t **dev_handle);
  nccl_result_t (*accept)(void *listen_comm, void **recv_comm,
                          nccl_net_device_handle_t **dev_handle);
  nccl_result_t (*reg_mr)(void *comm, void *data, int size, int type, void **mhandle);
  nccl_result_t (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                 int fd, void **mhandle);
  nccl_result_t (*dereg_mr)(void *comm, void *mhandle);
  nccl_result_t (*isend)(void *send_comm, void *data, int size, int tag, void *mhandle,
                         void **request);
  nccl_result_t (*irecv)(void *recv_comm, int n, void **data, int *sizes, int *tags,
                         void **mhandles, void **request);
  nccl_result_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                          void **request);
  nccl_result_t (*test)(void *request, int *done, int *sizes);
  nccl_result_t (*close_send)(void *send_comm);
  nccl_result_t (*close_recv)(void *recv_comm);
  nccl_result_t (*close_listen)(void *listen_comm);
  nccl_result_t (*get_device_mr)(void *comm, void *mhandle, void **dptr_mhandle);
  nccl_result_t (*irecv_consumed)(void *recv_comm, int n, void *request);
} nccl_net_v7_t;

#endif
