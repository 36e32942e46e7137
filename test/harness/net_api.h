/* A version-neutral view of a loaded ncclNet plugin, as the harness and the
 * benchmarks drive it. plugin_loader.c fills it from whichever exported
 * ncclNetPlugin_vN it finds, converting sizes and arguments per version the way
 * NCCL itself does. Return values are NCCL's ncclResult_t values (0 = success).
 *
 * Conventions shared by every entry:
 * - request pointers are passed through untouched: whatever the caller left in
 *   *request is what the plugin sees. NCCL leaves a stale pointer there for
 *   isend and NULL (or HNET_OPTIONAL_RECV_COMPLETION, v9+) for irecv; the
 *   plugin must always overwrite it. For a v7/v8 plugin the loader clears the
 *   optional-completion hint first, as NCCL does.
 * - test(): sizes may be NULL; otherwise it must have room for one entry per
 *   receive of the request (1 for a send). The loader calls the plugin with
 *   NCCL's int array and copies back exactly the entries the plugin wrote.
 *   test_raw() hands the plugin's int array through unchanged, so a caller can
 *   see how many entries were written. */
#ifndef RERAIL_HARNESS_NET_API_H
#define RERAIL_HARNESS_NET_API_H
#include <stddef.h>
#include <stdint.h>

#define HNET_HANDLE_SIZE 128
#define HNET_MAX_RECVS 8             /* grouped receives per irecv NCCL ever posts */
#define HNET_TEST_SIZES 32           /* entries of NCCL's test() size array (NCCL_PROXY_MAX_SUBS) */
#define HNET_PTR_HOST 0x1
#define HNET_PTR_CUDA 0x2
#define HNET_PTR_DMABUF 0x4
#define HNET_OPTIONAL_RECV_COMPLETION ((void *)0x1)
#define HNET_V8_MAX_BYTES (1024L * 1024 * 1024)  /* NCCL's limit for int-sized (v7/v8) plugins */

/* ncclResult_t values */
enum { HNET_SUCCESS = 0, HNET_SYSTEM_ERROR = 2, HNET_INTERNAL_ERROR = 3,
       HNET_INVALID_ARGUMENT = 4, HNET_INVALID_USAGE = 5, HNET_REMOTE_ERROR = 6 };

typedef struct hnet_props {
  char name[64];
  char pci_path[256];
  int ptr_support;
  int speed_mbps;
  float latency;
  int max_comms;
  int max_recvs;
  /* appended: the remaining fields of NCCL's properties (0 where the bound
   * version has none) */
  uint64_t guid;
  int reg_is_global;
  int force_flush;
  int port;
  int net_device_type;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
  int max_multi_request_size;
} hnet_props;

/* NCCL's net attributes (v11+ setNetAttr): hints about coming transfers.
 * Per direction: max/min concurrent peers, max/min flows per peer;
 * HNET_ATTR_UNDEF (-1) where unknown. op/algo/proto are bit masks. */
#define HNET_ATTR_UNDEF (-1)
typedef struct hnet_net_attr {
  int32_t send[4];
  int32_t recv[4];
  uint32_t op, algo, proto;
} hnet_net_attr;

typedef struct hnet {
  int version;          /* 7..12: which ncclNetPlugin_vN was bound */
  const char *name;     /* the plugin's own name field */
  void *dl;             /* dlopen handle */
  void *ctx;            /* v11+: the context init() returned (one per hnet) */
  int (*devices)(struct hnet *n, int *ndev);
  int (*get_properties)(struct hnet *n, int dev, hnet_props *props);
  int (*listen)(struct hnet *n, int dev, void *handle, void **listen_comm);
  int (*connect)(struct hnet *n, int dev, void *handle, void **send_comm);   /* may set NULL: retry */
  int (*accept)(struct hnet *n, void *listen_comm, void **recv_comm);        /* may set NULL: retry */
  int (*reg_mr)(struct hnet *n, void *comm, void *data, size_t size, int type, void **mhandle);
  int (*dereg_mr)(struct hnet *n, void *comm, void *mhandle);
  int (*isend)(struct hnet *n, void *send_comm, void *data, size_t size, int tag, void *mhandle,
               void **request);                                              /* may set NULL */
  int (*irecv)(struct hnet *n, void *recv_comm, int count, void **data, size_t *sizes, int *tags,
               void **mhandles, void **request);                             /* may set NULL */
  int (*iflush)(struct hnet *n, void *recv_comm, int count, void **data, int *sizes,
                void **mhandles, void **request);
  int (*test)(struct hnet *n, void *request, int *done, size_t *sizes);
  int (*close_send)(struct hnet *n, void *send_comm);
  int (*close_recv)(struct hnet *n, void *recv_comm);
  int (*close_listen)(struct hnet *n, void *listen_comm);
  int (*finalize)(struct hnet *n);                                           /* v11+ ctx; else no-op */
  /* appended */
  int (*test_raw)(struct hnet *n, void *request, int *done, int *sizes);    /* NCCL's int array as is */
  const void *table;    /* the bound ncclNetPlugin_vN table */
  char path[512];       /* the file dlopen() resolved, for messages */
  uint64_t comm_id;     /* v11+: the commId passed to init() */
  uintptr_t base;       /* load address of the library (decodes sanitizer traces after dlclose) */
  /* v11+ setNetAttr(ctx, attr); NULL when the bound version or plugin has none */
  int (*set_net_attr)(struct hnet *n, hnet_net_attr *attr);
  /* irecvConsumed(recvComm, n, request) after the receive's buffer was
   * consumed (the request may be stale); NULL when the plugin has none */
  int (*irecv_consumed)(struct hnet *n, void *recv_comm, int count, void *request);
} hnet;

/* Load a plugin by NCCL's naming rules: name_or_path as NCCL_NET_PLUGIN would
 * take it ("rerail" -> libnccl-net-rerail.so, or a path). version 0 binds the
 * newest ncclNetPlugin_vN (12..7) found; 7..12 forces that one. Calls init().
 * Returns 0 and fills *out, or prints why and returns -1.
 * Loading the same library again gives another hnet: v11+ gets a fresh init()
 * (another context, like a second NCCL communicator); v7-v10 are initialised
 * once per process, as NCCL's compatibility layer does.
 * "nccl-socket[:PATH]" or "nccl-ib[:PATH]" binds NCCL's own socket or IB
 * transport (the one NCCL_NET=Socket or NCCL_NET=IB selects) from
 * libnccl.so.2 instead (see nccl_builtin_loader.h). */
int hnet_load(const char *name_or_path, int version, hnet *out);
void hnet_unload(hnet *n);
/* The plugin's process-wide counters (rerail's rerailCounters_v1,
 * include/rerail/counters.h) as "name value\n" lines into buf. Returns the
 * length, or -1 when the plugin exports none (another plugin, NCCL's own
 * transport) or buf is too small. Call it before hnet_unload(). */
#define HNET_COUNTERS_MAX 4096 /* RERAIL_COUNTERS_MAX_TEXT */
int hnet_plugin_counters(const hnet *n, char *buf, size_t len);
/* The id of the connection a send or receive comm of this plugin carries
 * (rerail's rerailConnId_v1, include/rerail/conn_id.h): 0 and *id, or -1
 * when the plugin exports none or does not know the comm. */
int hnet_conn_id(const hnet *n, const void *comm, uint64_t *id);

/* The logger handed to init(): prints to stderr with the level, filtered by
 * NCCL_DEBUG (VERSION, WARN (default), INFO, TRACE; ABORT lines always print).
 * It counts the messages it receives per level, printed or not. */
void hnet_logger(int level, unsigned long flags, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
unsigned long hnet_log_count(int level);   /* level 2 = WARN, 3 = INFO, ... */
/* The last WARN the plugin logged (empty if none), for verdicts. */
void hnet_last_warning(char *buf, size_t len);
/* Profiler callback handed to init() for v10+: counts events. */
unsigned long hnet_profiler_events(void);

const char *hnet_result_str(int rc);

#endif
