/* ncclNet v8 (NCCL 2.20 onwards): exported as ncclNetPlugin_v8.
 *
 * No per-communicator context: init runs once per process, and message
 * sizes are int. This header documents every entry once; the other versions
 * only note what differs (v7, for NCCL 2.19, in two places: net_v7.h). */
#ifndef RERAIL_NCCL_NET_V8_H
#define RERAIL_NCCL_NET_V8_H
#include "nccl_common.h"

typedef struct nccl_net_props_v8 {
  char *name;                 /* for logs; NCCL also matches NCCL_SOCKET_IFNAME-like lists on it */
  char *pci_path;             /* sysfs path of the PCI function, or NULL; drives topology */
  uint64_t guid;              /* same guid = same physical NIC (several PCI functions) */
  int ptr_support;            /* NCCL_PTR_* the device can register */
  int reg_is_global;          /* 1: a registration is usable by every comm of the device */
  int speed;                  /* Mbit/s */
  int port;                   /* port number on the NIC */
  float latency;              /* microseconds; 0 = unknown */
  int max_comms;              /* comms the device can hold */
  int max_recvs;              /* receives irecv may group */
  nccl_net_device_type_t net_device_type;
  int net_device_version;
} nccl_net_props_v8_t;

typedef struct nccl_net_v8 {
  /* Plugin name: logs, and the value NCCL_NET / the comm config's netName select. */
  const char *name;
  /* Once per process, before anything else. */
  nccl_result_t (*init)(nccl_logger_t logger);
  /* Number of devices (NICs) the plugin drives. */
  nccl_result_t (*devices)(int *ndev);
  nccl_result_t (*get_properties)(int dev, nccl_net_props_v8_t *props);
  /* Open a listening endpoint on dev; fill handle (NCCL_NET_HANDLE_MAXSIZE
   * bytes) with what the peer needs to connect. */
  nccl_result_t (*listen)(int dev, void *handle, void **listen_comm);
  /* Connect to a peer's handle. Must not block: success with *send_comm ==
   * NULL means "not yet", and NCCL calls again. *dev_handle non-NULL on entry
   * means NCCL asks for device offload. */
  nccl_result_t (*connect)(int dev, void *handle, void **send_comm,
                           nccl_net_device_handle_t **dev_handle);
  /* Complete a connection that reached listen_comm. Same non-blocking rule. */
  nccl_result_t (*accept)(void *listen_comm, void **recv_comm,
                          nccl_net_device_handle_t **dev_handle);
  /* Register memory for a send or receive comm; type is NCCL_PTR_*. */
  nccl_result_t (*reg_mr)(void *comm, void *data, size_t size, int type, void **mhandle);
  /* Same, from a DMA-BUF file descriptor. */
  nccl_result_t (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                 int fd, void **mhandle);
  nccl_result_t (*dereg_mr)(void *comm, void *mhandle);
  /* Post a send. *request == NULL on success means "cannot post now". */
  nccl_result_t (*isend)(void *send_comm, void *data, int size, int tag, void *mhandle,
                         void **request);
  /* Post n grouped receives (n <= max_recvs), matched to sends by tag.
   * *request == NULL on success means "cannot post now". */
  nccl_result_t (*irecv)(void *recv_comm, int n, void **data, int *sizes, int *tags,
                         void **mhandles, void **request);
  /* Make data received into GPU memory visible to the GPU. A NULL request
   * on success means nothing to wait for. */
  nccl_result_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                          void **request);
  /* Poll a request. When *done, sizes (if not NULL) receives the size of each
   * grouped receive as sent (one int for a send), and the request is freed. */
  nccl_result_t (*test)(void *request, int *done, int *sizes);
  nccl_result_t (*close_send)(void *send_comm);
  nccl_result_t (*close_recv)(void *recv_comm);
  nccl_result_t (*close_listen)(void *listen_comm);
  /* Device offload only: translate mhandle for device code. */
  nccl_result_t (*get_device_mr)(void *comm, void *mhandle, void **dptr_mhandle);
  /* Device offload bookkeeping: the device consumed a completed receive.
   * NCCL calls it for every plugin that provides it, after test() reported
   * the request done, so the request pointer may be stale. */
  nccl_result_t (*irecv_consumed)(void *recv_comm, int n, void *request);
} nccl_net_v8_t;

#endif
