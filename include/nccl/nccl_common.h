/* NCCL's plugin ABI as rerail declares it: what every plugin kind shares.
 *
 * NCCL fixes the interface (values, field order, field types); the names and
 * the words here are rerail's. Only the files that export plugin tables (the
 * ABI shims) include these headers, and the engine's profiler events
 * (engine_prof.c), which hand NCCL its own descriptors: the rest of rerail
 * speaks rr_status.
 * abi_layout_checks.h pins every layout, so a wrong field breaks the build
 * instead of corrupting memory inside NCCL. */
#ifndef RERAIL_NCCL_COMMON_H
#define RERAIL_NCCL_COMMON_H
#include <stddef.h>
#include <stdint.h>

/* Make one object visible outside a library built with -fvisibility=hidden.
 * The version scripts (exports.map) then keep only the plugin tables. */
#define NCCL_ABI_EXPORT __attribute__((visibility("default")))

/* ---- Result codes ------------------------------------------------------- */

/* What every plugin entry returns. NCCL treats anything but success from a
 * data-path call (isend, irecv, test) as fatal for the communicator. */
typedef enum nccl_result {
  NCCL_RESULT_SUCCESS = 0,
  NCCL_RESULT_UNHANDLED_CUDA_ERROR = 1,
  NCCL_RESULT_SYSTEM_ERROR = 2,      /* a system call or allocation failed */
  NCCL_RESULT_INTERNAL_ERROR = 3,    /* a bug or an unexpected state */
  NCCL_RESULT_INVALID_ARGUMENT = 4,
  NCCL_RESULT_INVALID_USAGE = 5,     /* the caller asked for something unsupported */
  NCCL_RESULT_REMOTE_ERROR = 6,      /* the peer failed */
  NCCL_RESULT_IN_PROGRESS = 7,
  NCCL_RESULT_TIMEOUT = 8,
} nccl_result_t;

/* ---- Logging ------------------------------------------------------------ */

typedef enum nccl_log_level {
  NCCL_LEVEL_NONE = 0,
  NCCL_LEVEL_VERSION = 1,
  NCCL_LEVEL_WARN = 2,
  NCCL_LEVEL_INFO = 3,
  NCCL_LEVEL_ABORT = 4,
  NCCL_LEVEL_TRACE = 5,
} nccl_log_level_t;

/* Subsystem bits; NCCL_DEBUG_SUBSYS filters on them. */
enum nccl_log_subsys {
  NCCL_SUBSYS_INIT = 0x1,
  NCCL_SUBSYS_COLL = 0x2,
  NCCL_SUBSYS_P2P = 0x4,
  NCCL_SUBSYS_SHM = 0x8,
  NCCL_SUBSYS_NET = 0x10,
  NCCL_SUBSYS_GRAPH = 0x20,
  NCCL_SUBSYS_TUNING = 0x40,
  NCCL_SUBSYS_ENV = 0x80,
  NCCL_SUBSYS_ALLOC = 0x100,
  NCCL_SUBSYS_CALL = 0x200,
  NCCL_SUBSYS_PROXY = 0x400,
  NCCL_SUBSYS_NVLS = 0x800,
  NCCL_SUBSYS_BOOTSTRAP = 0x1000,
  NCCL_SUBSYS_REG = 0x2000,
  NCCL_SUBSYS_PROFILE = 0x4000,
  NCCL_SUBSYS_RAS = 0x8000,
  NCCL_SUBSYS_DESTROY = 0x10000,
  NCCL_SUBSYS_ALLOC_HOST = 0x20000,
  NCCL_SUBSYS_ALL = ~0,
};

/* NCCL's logger, handed to every init(). printf-style. A WARN logged while
 * NCCL probes something (e.g. NIC fusion) may be downgraded by NCCL to INFO. */
typedef void (*nccl_logger_t)(nccl_log_level_t level, unsigned long flags, const char *file,
                              int line, const char *fmt, ...);

/* ---- Profiler callback (net v10+) --------------------------------------- */

/* Event kinds a net plugin reports through the callback. */
enum nccl_profiler_net_event {
  NCCL_PROFILER_NET_EVENT_START = 0,
  NCCL_PROFILER_NET_EVENT_STOP = 1,
  NCCL_PROFILER_NET_EVENT_UPDATE = 2,
  NCCL_PROFILER_NET_EVENT_UPDATE_AND_STOP = 3,
};

/* event_handle: in/out handle of the plugin-defined event; parent: the
 * phandle NCCL passed to isend/irecv; plugin_id identifies the event schema;
 * ext_data: plugin-defined payload. */
typedef nccl_result_t (*nccl_profiler_cb_t)(void **event_handle, int type, void *parent,
                                            int64_t plugin_id, void *ext_data);

/* ---- Net plugin constants shared by every net version ------------------ */

/* Memory kinds for ptrSupport and regMr's type argument. */
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4

/* Bytes of the connection handle listen() fills and connect() reads. */
#define NCCL_NET_HANDLE_MAXSIZE 128
/* Requests a plugin must be able to hold in flight per comm. */
#define NCCL_NET_MAX_REQUESTS 32
/* v9+: irecv may find this value in *request: a hint that the receive needs
 * no completion (LL/LL128 with one sub). The plugin must overwrite *request. */
#define NCCL_NET_OPTIONAL_RECV_COMPLETION ((void *)0x1)
/* Largest maxP2pBytes / maxCollBytes NCCL accepts (1 TiB). */
#define NCCL_NET_MAX_SIZE_BYTES (1024LL * 1024 * 1024 * 1024)
/* Size limit NCCL assumes for v8 plugins, which cannot report one (1 GiB). */
#define NCCL_NET_LEGACY_MAX_BYTES (1024LL * 1024 * 1024)
/* "Unset" for trafficClass (v10+ comm config). */
#define NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)
/* "Unset" for the fields of the v11+ net attributes. */
#define NCCL_NET_ATTR_UNDEF (-1)
/* "Unknown" for railId / planeId (v12 properties). */
#define NCCL_NET_ID_UNDEF (-1)
/* Physical NICs one virtual NIC may merge: v9-v11, then v12. */
#define NCCL_NET_MAX_DEVS_PER_NIC_V9 4
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8

/* Where the data path of a connection runs. Anything but HOST asks NCCL to
 * hand device-side handles around (GPU-initiated networking). */
typedef enum nccl_net_device_type {
  NCCL_NET_DEVICE_HOST = 0,
  NCCL_NET_DEVICE_UNPACK = 1,
  NCCL_NET_DEVICE_GIN_PROXY = 2,
  NCCL_NET_DEVICE_GIN_GDAKI = 3,
} nccl_net_device_type_t;

/* netDeviceVersion to report with NCCL_NET_DEVICE_HOST. */
#define NCCL_NET_DEVICE_INVALID_VERSION 0x0

/* Device-offload handle of a connection (unchanged from net v7 to v12).
 * connect/accept receive a pointer to NCCL's pointer: NULL there means "no
 * offload", which is all rerail ever answers. */
typedef struct nccl_net_device_handle {
  nccl_net_device_type_t net_device_type;
  int net_device_version;
  void *handle;
  size_t size;
  int needs_proxy_progress;
} nccl_net_device_handle_t;

/* ---- Collectives and the tuner's vocabulary ----------------------------- */

/* Operation kinds. NCCL 2.28 stops at GATHER (11 kinds); 2.30 adds the rest.
 * A tuner only ever sees the first NCCL_NUM_COLL_FUNCS. */
typedef enum nccl_func {
  NCCL_FUNC_BROADCAST = 0,
  NCCL_FUNC_REDUCE = 1,
  NCCL_FUNC_ALL_GATHER = 2,
  NCCL_FUNC_REDUCE_SCATTER = 3,
  NCCL_FUNC_ALL_REDUCE = 4,
  NCCL_FUNC_SEND_RECV = 5,
  NCCL_FUNC_SEND = 6,
  NCCL_FUNC_RECV = 7,
  NCCL_FUNC_ALL_TO_ALL = 8,
  NCCL_FUNC_SCATTER = 9,
  NCCL_FUNC_GATHER = 10,
  NCCL_FUNC_ALL_GATHER_V = 11,
  NCCL_FUNC_PUT_SIGNAL = 12,
  NCCL_FUNC_SIGNAL = 13,
  NCCL_FUNC_WAIT_SIGNAL = 14,
} nccl_func_t;
#define NCCL_NUM_COLL_FUNCS 5

/* Algorithm ids: rows of the tuner's cost table. */
#define NCCL_ALGO_UNDEF (-1)
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6
#define NCCL_NUM_ALGORITHMS 7

/* Protocol ids: columns of the tuner's cost table. */
#define NCCL_PROTO_UNDEF (-1)
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2
#define NCCL_NUM_PROTOCOLS 3

/* Bytes a protocol moves per grain (NCCL's ncclProtoGrainSize): NCCL rounds
 * every chunk size down to a multiple of it and divides by the result. LL128:
 * 32 threads x 8 elements / 16 per line x 15 data elements x 8 bytes. */
#define NCCL_PROTO_GRAIN_LL 16
#define NCCL_PROTO_GRAIN_LL128 1920
#define NCCL_PROTO_GRAIN_SIMPLE 512

/* A cost-table cell NCCL ruled out (the pair is unusable for this call). */
#define NCCL_ALGO_PROTO_IGNORE (-1.0f)

/* Dimensions of the tuner constants (tuner v5/v6). */
#define NCCL_HW_NVLINK 0
#define NCCL_HW_PCI 1
#define NCCL_HW_NET 2
#define NCCL_NUM_HW_LINKS 3
#define NCCL_NUM_COMPCAPS 4       /* Volta, Ampere, Hopper, Blackwell */
#define NCCL_NUM_TUNING_SCALES 3  /* 1 node, 2 nodes, 4+ nodes */

#endif
