/* RERAIL_* environment variables: read once, validated, with safe defaults.
 *
 * A bad value never stops the plugin: it is reported once through the logger
 * and the default is used instead. */
#ifndef RERAIL_COMMON_PARAMS_H
#define RERAIL_COMMON_PARAMS_H
#include <stddef.h>
#include <stdint.h>

enum rr_transport { RR_TRANSPORT_AUTO = 0, RR_TRANSPORT_TCP, RR_TRANSPORT_VERBS, RR_TRANSPORT_MIXED };

typedef struct rr_params {
  char socket_ifname[256];   /* RERAIL_SOCKET_IFNAME, NCCL_SOCKET_IFNAME syntax; "" = default */
  int transport;             /* RERAIL_TRANSPORT=auto|tcp|verbs|mixed */
  int tcp_streams;           /* RERAIL_TCP_STREAMS: sockets per rail, 1..8 */
  char tcp_congestion[16];   /* RERAIL_TCP_CONGESTION: the rails' TCP congestion control; "" = the system's */
  size_t chunk_size;         /* RERAIL_CHUNK_SIZE: bytes per chunk, 4 KiB..64 MiB */
  size_t tcp_eager_max;      /* RERAIL_TCP_EAGER_MAX: messages this small leave before their clear-to-send, 0..4096 */
  uint64_t connect_timeout_ms; /* RERAIL_CONNECT_TIMEOUT: give up connecting after this */
  int backups;               /* RERAIL_BACKUPS: warm backup rails per connection, 0..7 */
  int failover;              /* RERAIL_FAILOVER=chain|balance (0|1) */
  uint64_t progress_timeout_ms; /* RERAIL_PROGRESS_TIMEOUT: silence before a rail is blamed */
  uint64_t failback_hold_ms; /* RERAIL_FAILBACK_HOLD: healthy this long before fail-back */
  uint32_t degraded_pct;     /* RERAIL_DEGRADED_PCT: demote below this % of the healthy level, 0 = never */
  uint64_t degraded_ms;      /* RERAIL_DEGRADED_MS: ... for this long, under load */
  uint32_t degraded_restore_pct; /* RERAIL_DEGRADED_RESTORE_PCT: probes at this % bring it back */
  uint32_t degraded_retrans_pct; /* RERAIL_DEGRADED_RETRANS_PCT: demote when this % of what it sends is retransmitted */
  uint32_t degraded_latency_x;   /* RERAIL_DEGRADED_LATENCY_X: demote when requests take this many times the
                                  * healthiest path's latency, 0 = never */
  uint64_t degraded_latency_min_us; /* RERAIL_DEGRADED_LATENCY_MIN_US: ... and at least this much more */
  /* Verbs rails (NCCL_IB_* names and meanings). */
  char ib_hca[256];          /* RERAIL_IB_HCA, NCCL_IB_HCA syntax; "" = every device */
  int ib_gid_index;          /* RERAIL_IB_GID_INDEX: 0..1023, -1 = choose as NCCL does */
  int ib_timeout;            /* RERAIL_IB_TIMEOUT: QP ACK timeout exponent, 4.096 us x 2^N, 1..31 */
  int ib_retry_cnt;          /* RERAIL_IB_RETRY_CNT: QP retry count, 0..7 */
  int ib_qps_per_rail;       /* RERAIL_IB_QPS_PER_RAIL: QPs per rail, 1..16 */
  int ib_tc;                 /* RERAIL_IB_TC (default NCCL_IB_TC): GRH traffic class, 0..255, -1 = unset */
  int ib_sl;                 /* RERAIL_IB_SL (default NCCL_IB_SL): service level, 0..15, -1 = unset */
  int ib_adaptive_routing;   /* RERAIL_IB_ADAPTIVE_ROUTING (default NCCL_IB_ADAPTIVE_ROUTING): 0 off, 1 on,
                              * -1 = NCCL's rule (on for InfiniBand ports, off for RoCE) */
  uint64_t ib_ar_threshold;  /* RERAIL_IB_AR_THRESHOLD (default NCCL_IB_AR_THRESHOLD, else 8192): where
                              * adaptive routing is on, writes above this go split */
  int gdr_flush_disable;     /* RERAIL_GDR_FLUSH_DISABLE: no RDMA-read flush after receives into GPU memory */
  int ib_relaxed_ordering;   /* RERAIL_IB_PCI_RELAXED_ORDERING (default NCCL_IB_PCI_RELAXED_ORDERING, else 2):
                              * 0 off, 1 on, 2 auto; on and auto both mean "where ibv_reg_mr_iova2 exists" */
  int test_force_gpu_flush;  /* RERAIL_TEST_FORCE_GPU_FLUSH: tests only, flush host memory as if it were GPU memory */
  uint64_t test_forge_write;  /* RERAIL_TEST_FORGE_WRITE=N: tests only, this process's Nth data write
                               * names a chunk no receive has (a hostile peer) */
  int test_host_as_gpu;      /* RERAIL_TEST_HOST_AS_GPU: tests only, verbs devices take host memory
                              * registered as NCCL_PTR_CUDA and treat it as GPU memory */
  uint64_t test_refuse_proof; /* RERAIL_TEST_REFUSE_PROOF=N: tests only, this process's listeners refuse
                               * the Nth new connection's commit socket at its PROOF (crowded out) */
} rr_params;

/* The process-wide parameters (parsed on first call, thread safe). */
const rr_params *rr_params_get(void);

/* Re-read the environment: tests only. */
void rr_params_reload(void);

/* Parse helpers, exposed for unit tests and other modules' own variables.
 * They return the default (and warn) when the value is malformed or out of range. */
uint64_t rr_param_parse_u64(const char *name, const char *value, uint64_t dflt, uint64_t min,
                            uint64_t max);
/* choices: NULL-terminated list; returns the index of the match or dflt. */
int rr_param_parse_choice(const char *name, const char *value, const char *const *choices, int dflt);

#endif
