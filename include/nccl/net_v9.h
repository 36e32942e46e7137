/* ncclNet v9: exported as ncclNetPlugin_v9.
 *
 * Changes from v8 (see net_v8.h for every entry): size_t sizes in isend and
 * irecv, forceFlush and virtual-NIC fields in the properties, a transfer size
 * limit per operation kind, and makeVDevice for NCCL's NIC fusion. */
#ifndef RERAIL_NCCL_NET_V9_H
#define RERAIL_NCCL_NET_V9_H
#include "nccl_common.h"

/* The physical devices a (virtual) device is made of. */
typedef struct nccl_net_vdev_props_v9 {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V9];
} nccl_net_vdev_props_v9_t;

typedef struct nccl_net_props_v9 {
  char *name;
  char *pci_path;
  uint64_t guid;
  int ptr_support;
  int reg_is_global;
  int force_flush;            /* 1: NCCL must iflush every receive into GPU memory */
  int speed;
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  nccl_net_device_type_t net_device_type;
  int net_device_version;
  nccl_net_vdev_props_v9_t vprops;  /* a physical device is {1, {dev}} */
  size_t max_p2p_bytes;       /* largest single send/recv for point-to-point */
  size_t max_coll_bytes;      /* largest single send/recv for collectives */
} nccl_net_props_v9_t;

typedef struct nccl_net_v9 {
  const char *name;
  nccl_result_t (*init)(nccl_logger_t logger);
  nccl_result_t (*devices)(int *ndev);
  nccl_result_t (*get_properties)(int dev, nccl_net_props_v9_t *props);
  nccl_result_t (*listen)(int dev, void *handle, void **listen_comm);
  nccl_result_t (*connect)(int dev, void *handle, void **send_comm,
                           nccl_net_device_handle_t **dev_handle);
  nccl_result_t (*accept)(void *listen_comm, void **recv_comm,
                          nccl_net_device_handle_t **dev_handle);
  nccl_result_t (*reg_mr)(void *comm, void *data, size_t size, int type, void **mhandle);
  nccl_result_t (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                                 int fd, void **mhandle);
  nccl_result_t (*dereg_mr)(void *comm, void *mhandle);
  nccl_result_t (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                         void **request);
  /* *request may hold NCCL_NET_OPTIONAL_RECV_COMPLETION on entry. */
  nccl_result_t (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                         void **mhandles, void **request);
  nccl_result_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                          void **request);
  nccl_result_t (*test)(void *request, int *done, int *sizes);
  nccl_result_t (*close_send)(void *send_comm);
  nccl_result_t (*close_recv)(void *recv_comm);
  nccl_result_t (*close_listen)(void *listen_comm);
  nccl_result_t (*get_device_mr)(void *comm, void *mhandle, void **dptr_mhandle);
  nccl_result_t (*irecv_consumed)(void *recv_comm, int n, void *request);
  /* Merge the physical devices in props into a new virtual device; return its
   * index in *d. NCCL never asks for a single-device merge. Optional (every
   * version up to v12): NULL makes NCCL use the physical devices as they
   * are, with no NIC fusion; a refusal instead makes NCCL try (and log)
   * every merge it considers. */
  nccl_result_t (*make_vdevice)(int *d, nccl_net_vdev_props_v9_t *props);
} nccl_net_v9_t;

#endif
