#include "rr_params.h"
#include "rr_counters.h"
#include "rr_log.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static rr_params params;
static pthread_once_t params_once = PTHREAD_ONCE_INIT;

uint64_t rr_param_parse_u64(const char *name, const char *value, uint64_t dflt, uint64_t min,
                            uint64_t max) {
  if (!value || !*value) return dflt;
  const char *p = value;
  while (isspace((unsigned char)*p)) p++;
  if (*p == '-' || !isdigit((unsigned char)*p)) goto bad;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(p, &end, 0);
  if (errno) goto bad;
  /* Accept binary size suffixes: 512K, 4M, 1G. */
  unsigned long long mult = 1;
  if (*end == 'k' || *end == 'K') mult = 1ull << 10, end++;
  else if (*end == 'm' || *end == 'M') mult = 1ull << 20, end++;
  else if (*end == 'g' || *end == 'G') mult = 1ull << 30, end++;
  while (isspace((unsigned char)*end)) end++;
  if (*end) goto bad;
  if (v > UINT64_MAX / mult) goto bad;
  v *= mult;
  if (v < min || v > max) {
    rr_counter_inc(RR_CTR_SETTINGS_REFUSED);
    RR_WARN("%s=%s is out of range [%llu, %llu]; using %llu", name, value, (unsigned long long)min,
            (unsigned long long)max, (unsigned long long)dflt);
    return dflt;
  }
  return v;
bad:
  rr_counter_inc(RR_CTR_SETTINGS_REFUSED);
  RR_WARN("%s=%s is not a number; using %llu", name, value, (unsigned long long)dflt);
  return dflt;
}

int rr_param_parse_choice(const char *name, const char *value, const char *const *choices, int dflt) {
  if (!value || !*value) return dflt;
  for (int i = 0; choices[i]; i++)
    if (!strcasecmp(value, choices[i])) return i;
  rr_counter_inc(RR_CTR_SETTINGS_REFUSED);
  RR_WARN("%s=%s is not one of the accepted values; using %s", name, value, choices[dflt]);
  return dflt;
}

/* An optional integer 0..max: `name` when set, else `nccl_name` (NCCL's own
 * variable of the same meaning), else -1 (unset: the device's default). */
static int param_int_or_nccl(const char *name, const char *nccl_name, uint64_t max) {
  const char *v = getenv(name);
  if (!v || !*v) {
    v = getenv(nccl_name);
    name = nccl_name;
  }
  if (!v || !*v) return -1;
  uint64_t bad = max + 1;
  uint64_t x = rr_param_parse_u64(name, v, bad, 0, max);
  return x == bad ? -1 : (int)x;
}

/* A number in [min, max]: `name` when set, else `nccl_name`, else dflt; a
 * bad value warns (naming the variable that had it) and gives dflt. */
static uint64_t param_u64_or_nccl(const char *name, const char *nccl_name, uint64_t dflt, uint64_t min,
                                  uint64_t max) {
  const char *v = getenv(name);
  if (!v || !*v) {
    v = getenv(nccl_name);
    name = nccl_name;
  }
  return rr_param_parse_u64(name, v, dflt, min, max);
}

static void params_parse(void) {
  memset(&params, 0, sizeof params);
  const char *ifname = getenv("RERAIL_SOCKET_IFNAME");
  if (ifname) {
    if (strlen(ifname) >= sizeof params.socket_ifname)
      RR_WARN("RERAIL_SOCKET_IFNAME is longer than %zu characters; ignoring it",
              sizeof params.socket_ifname - 1);
    else
      strcpy(params.socket_ifname, ifname);
  }
  static const char *const transports[] = {"auto", "tcp", "verbs", "mixed", NULL};
  params.transport = rr_param_parse_choice("RERAIL_TRANSPORT", getenv("RERAIL_TRANSPORT"),
                                           transports, RR_TRANSPORT_AUTO);
  /* Two sockets per rail, 128 KiB chunks: the second socket lets bulk
   * chunks overlap in the kernel (bench/RESULTS.md: +10-25 % at 2-64 MiB
   * on loopback), and messages stay on the first until it backs up, so
   * the round trip and mid-size messages do not pay for it. */
  params.tcp_streams = (int)rr_param_parse_u64("RERAIL_TCP_STREAMS", getenv("RERAIL_TCP_STREAMS"),
                                               2, 1, 8);
  params.tcp_congestion[0] = 0;
  const char *cc = getenv("RERAIL_TCP_CONGESTION");
  if (cc && *cc) {
    /* A kernel algorithm name (TCP_CONGESTION takes at most 15 characters). */
    size_t n = strspn(cc, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
    if (n != strlen(cc) || n >= sizeof params.tcp_congestion)
      RR_WARN("RERAIL_TCP_CONGESTION=\"%s\" is not a congestion control name; the rails keep the system's",
              cc);
    else
      strcpy(params.tcp_congestion, cc);
  }
  params.chunk_size = rr_param_parse_u64("RERAIL_CHUNK_SIZE", getenv("RERAIL_CHUNK_SIZE"),
                                         128 << 10, 4 << 10, 64 << 20);
  /* A small message on a TCP rail leaves at once, before the receiver's
   * clear-to-send: the receiver places it, so the round trip pays for one
   * frame each way instead of a frame and a clear-to-send (bench/RESULTS.md
   * section 8). 0 turns it off. */
  params.tcp_eager_max = rr_param_parse_u64("RERAIL_TCP_EAGER_MAX", getenv("RERAIL_TCP_EAGER_MAX"),
                                            4096, 0, 4096);
  params.connect_timeout_ms = rr_param_parse_u64(
      "RERAIL_CONNECT_TIMEOUT", getenv("RERAIL_CONNECT_TIMEOUT"), 30000, 10, 3600000);
  params.backups = (int)rr_param_parse_u64("RERAIL_BACKUPS", getenv("RERAIL_BACKUPS"), 1, 0, 7);
  static const char *const modes[] = {"chain", "balance", NULL};
  params.failover = rr_param_parse_choice("RERAIL_FAILOVER", getenv("RERAIL_FAILOVER"), modes, 0);
  params.progress_timeout_ms = rr_param_parse_u64(
      "RERAIL_PROGRESS_TIMEOUT", getenv("RERAIL_PROGRESS_TIMEOUT"), 1000, 20, 600000);
  params.failback_hold_ms = rr_param_parse_u64("RERAIL_FAILBACK_HOLD",
                                               getenv("RERAIL_FAILBACK_HOLD"), 500, 0, 600000);
  /* Gray failures (docs/failover.md, "Degraded rails"): ordinary noise (a
   * busy receiver, CPU contention on a shared host) moves a healthy rail's
   * rate by a factor of two or three for moments; a rail must stay under
   * RERAIL_DEGRADED_PCT of its healthy level for a whole second, with data
   * waiting for it all along, and with no rail towards that peer changing
   * state for a second before, ahead of it being demoted: 20 %, a fifth,
   * twice what noise does (the chaos run and the 60 s healthy run in the
   * lab demote nothing at it). 0 turns demotion off. */
  params.degraded_pct = (uint32_t)rr_param_parse_u64("RERAIL_DEGRADED_PCT", getenv("RERAIL_DEGRADED_PCT"),
                                                     20, 0, 90);
  params.degraded_ms = rr_param_parse_u64("RERAIL_DEGRADED_MS", getenv("RERAIL_DEGRADED_MS"), 1000, 100,
                                          600000);
  params.degraded_restore_pct = (uint32_t)rr_param_parse_u64(
      "RERAIL_DEGRADED_RESTORE_PCT", getenv("RERAIL_DEGRADED_RESTORE_PCT"), 50, 1, 100);
  /* Loss: a rail retransmitting this percent of the bytes it sends, for
   * RERAIL_DEGRADED_MS, when the peer's other rails do not (then the loss
   * is the peer's or the fabric's, and moving helps nothing), is demoted
   * too: TCP hides a 10 % loss as a rate of 30-50 % of the level, which the
   * rate criterion leaves alone. A healthy path in a data centre
   * retransmits well under 1 %. */
  params.degraded_retrans_pct = (uint32_t)rr_param_parse_u64(
      "RERAIL_DEGRADED_RETRANS_PCT", getenv("RERAIL_DEGRADED_RETRANS_PCT"), 3, 1, 100);
  /* Latency: a rail whose requests, timed from an idle rail to the peer's
   * acknowledgement less what its rate accounts for, take 10 times what the
   * healthiest path to that peer takes (its own healthy level, its
   * siblings'), and 20 ms more, in most samples for RERAIL_DEGRADED_MS.
   * A data-centre path's excess is microseconds; 20 ms is far beyond what
   * a busy host's scheduling adds to a sample (the sender's tick timing
   * it), which the chaos and healthy runs check. 0 turns it off. */
  params.degraded_latency_x = (uint32_t)rr_param_parse_u64(
      "RERAIL_DEGRADED_LATENCY_X", getenv("RERAIL_DEGRADED_LATENCY_X"), 10, 0, 1000);
  params.degraded_latency_min_us = rr_param_parse_u64(
      "RERAIL_DEGRADED_LATENCY_MIN_US", getenv("RERAIL_DEGRADED_LATENCY_MIN_US"), 20000, 100, 10000000);
  /* Operators set NCCL_IB_HCA cluster-wide: rerail takes the same ports. */
  const char *hca = getenv("RERAIL_IB_HCA");
  if (!hca) hca = getenv("NCCL_IB_HCA");
  if (hca) {
    if (strlen(hca) >= sizeof params.ib_hca)
      RR_WARN("RERAIL_IB_HCA is longer than %zu characters; ignoring it", sizeof params.ib_hca - 1);
    else
      strcpy(params.ib_hca, hca);
  }
  /* Unset (or bad) means "choose the GID as NCCL does": -1. */
  params.ib_gid_index = -1;
  const char *gid = getenv("RERAIL_IB_GID_INDEX");
  if (gid && *gid) {
    size_t n = strspn(gid, "0123456789");
    if (n == 0 || n > 4 || gid[n] != '\0' || atoi(gid) > 1023)
      RR_WARN("RERAIL_IB_GID_INDEX=%s is not an index in [0, 1023]; choosing the GID as NCCL does", gid);
    else
      params.ib_gid_index = atoi(gid);
  }
  /* 4.096 us x 2^16 = 268 ms per try, 6 retries: the hardware gives up after ~1.9 s, after
   * rerail's own progress timeout (1 s) has moved traffic to a backup QP. One try must stay
   * well under that timeout: a lost packet with nothing behind it (the tail of a burst: no
   * later packet draws a sequence NAK) waits one try, and while it waits the busy rail shows
   * no life (its probe queues behind the data). At 2^18 (1.07 s) such a loss is the likely
   * cause of the Soft-RoCE lab's only rail going "silent" and failing the connection. 7 would
   * mean "retry forever" on Soft-RoCE. */
  params.ib_timeout = (int)rr_param_parse_u64("RERAIL_IB_TIMEOUT", getenv("RERAIL_IB_TIMEOUT"), 16,
                                              1, 31);
  params.ib_retry_cnt = (int)rr_param_parse_u64("RERAIL_IB_RETRY_CNT",
                                                getenv("RERAIL_IB_RETRY_CNT"), 6, 0, 7);
  params.ib_qps_per_rail = (int)rr_param_parse_u64("RERAIL_IB_QPS_PER_RAIL",
                                                   getenv("RERAIL_IB_QPS_PER_RAIL"), 1, 1, 16);
  /* The fabric's QoS, as NCCL takes it into a QP's address vector (GRH
   * traffic class, service level): RERAIL_IB_* wins, NCCL_IB_* is the default. */
  params.ib_tc = param_int_or_nccl("RERAIL_IB_TC", "NCCL_IB_TC", 255);
  params.ib_sl = param_int_or_nccl("RERAIL_IB_SL", "NCCL_IB_SL", 15);
  /* Adaptive routing (NCCL's net_ib rule): on for InfiniBand ports, off for
   * RoCE, unless RERAIL_IB_ADAPTIVE_ROUTING (NCCL_IB_ADAPTIVE_ROUTING) says
   * 0 or 1 (-1: by link layer). Where it is on, a write of more than
   * RERAIL_IB_AR_THRESHOLD bytes (NCCL_IB_AR_THRESHOLD, default 8192 as
   * NCCL's) goes as a plain write and a small write with immediate. */
  params.ib_adaptive_routing = param_int_or_nccl("RERAIL_IB_ADAPTIVE_ROUTING", "NCCL_IB_ADAPTIVE_ROUTING", 1);
  params.ib_ar_threshold = param_u64_or_nccl("RERAIL_IB_AR_THRESHOLD", "NCCL_IB_AR_THRESHOLD", 8192, 0,
                                             (uint64_t)1 << 40);
  /* NCCL_GDR_FLUSH_DISABLE's meaning. The test knob makes receives into host
   * memory flushed as GPU memory would be (the Soft-RoCE lab has no GPU): it
   * only adds reads, never changes where bytes go. */
  params.gdr_flush_disable = (int)rr_param_parse_u64("RERAIL_GDR_FLUSH_DISABLE",
                                                     getenv("RERAIL_GDR_FLUSH_DISABLE"), 0, 0, 1);
  /* NCCL_IB_PCI_RELAXED_ORDERING's values and default (2, auto). */
  params.ib_relaxed_ordering = param_int_or_nccl("RERAIL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_PCI_RELAXED_ORDERING", 2);
  if (params.ib_relaxed_ordering < 0) params.ib_relaxed_ordering = 2;
  params.test_force_gpu_flush = (int)rr_param_parse_u64("RERAIL_TEST_FORCE_GPU_FLUSH",
                                                        getenv("RERAIL_TEST_FORCE_GPU_FLUSH"), 0, 0, 1);
  /* Tests only: the Soft-RoCE lab's hostile-peer case makes one sender forge
   * one write's immediate, so the receiver's checks of what a NIC placed run
   * against a real verbs stack. 0 (unset) forges nothing. */
  /* Tests only: the Soft-RoCE lab has no GPU; with this, verbs devices
   * advertise GPU memory and register host memory typed NCCL_PTR_CUDA with
   * the ordinary call, and everything else treats it as GPU memory (the CPU
   * never touches it), so a test can take the CPU's access away from it. */
  params.test_host_as_gpu = (int)rr_param_parse_u64("RERAIL_TEST_HOST_AS_GPU", getenv("RERAIL_TEST_HOST_AS_GPU"),
                                                    0, 0, 1);
  params.test_forge_write = rr_param_parse_u64("RERAIL_TEST_FORGE_WRITE", getenv("RERAIL_TEST_FORGE_WRITE"), 0, 0,
                                               UINT64_MAX);
  /* Tests only: a listener refusing the socket an early COMMIT rides on,
   * after the connector handed its comm out, is rare (a full listener);
   * this makes one, so a test can see the connection start over behind
   * NCCL's back. 0 (unset) refuses nothing. */
  params.test_refuse_proof = rr_param_parse_u64("RERAIL_TEST_REFUSE_PROOF", getenv("RERAIL_TEST_REFUSE_PROOF"), 0, 0,
                                                UINT64_MAX);
}

const rr_params *rr_params_get(void) {
  pthread_once(&params_once, params_parse);
  return &params;
}

void rr_params_reload(void) {
  pthread_once(&params_once, params_parse);
  params_parse();
}
