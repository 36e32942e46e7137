/* Telemetry end to end inside one process: recorders -> exporter thread ->
 * files. The exporter lifecycle, the Prometheus text (structure, values,
 * escaping, idleness, merged connections), the event JSON lines, rotation of
 * the event log, the cap on anomaly snapshots, and what happens when the
 * directory cannot be written: not creatable, read-only, and a full disk
 * (a 64 KiB tmpfs this test mounts; needs root, as CI runs): one warning per
 * kind of file, recording goes on, the files come back when the disk does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "prom_check.h"
#include "rr_counters.h"
#include "rr_health_bus.h"
#include "rr_log.h"
#include "rr_tel_format.h"
#include "rr_tel_internal.h" /* a recorder's ring: when the exporter drains it */
#include "rr_tel_io.h"
#include "rr_telemetry.h"

#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#define T 1000000ull /* 1 ms */
#define MB 1000000u

static char g_dir[128];
static char g_host[64];
static _Atomic int g_warn_io, g_info_ok, g_warn_other;

static void counting_logger(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  (void)flags, (void)file, (void)line;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (level == RR_LOG_WARN && strstr(msg, "telemetry: cannot write")) atomic_fetch_add(&g_warn_io, 1);
  else if (level == RR_LOG_WARN && strstr(msg, "telemetry")) atomic_fetch_add(&g_warn_other, 1);
  if (level == RR_LOG_INFO && strstr(msg, "works again")) atomic_fetch_add(&g_info_ok, 1);
  if (getenv("TEST_TEL_VERBOSE")) fprintf(stderr, "log[%d] %s\n", level, msg);
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
  char cmd[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return system(cmd);
}

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/rerail-telexp-XXXXXX");
  if (!mkdtemp(g_dir)) return -1;
  rr_tel_hostname(g_host, sizeof g_host);
  setenv("RERAIL_TELEMETRY_DIR", g_dir, 1);
  /* Files are written on flushes (and when the exporter stops) only: the
   * test decides when. Rings are still drained every 10 ms. */
  setenv("RERAIL_TELEMETRY_INTERVAL", "3600000", 1);
  rr_log_set_logger(counting_logger);
  g_warn_io = g_info_ok = g_warn_other = 0;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  rr_tel_reset_for_tests();
  rr_log_set_logger(NULL);
  unsetenv("RERAIL_TELEMETRY_DIR");
  unsetenv("RERAIL_TELEMETRY_INTERVAL");
  unsetenv("RERAIL_TELEMETRY_EVENTS_MAX");
  unsetenv("RERAIL_TELEMETRY_WINDOW");
  run("umount %s/mnt 2>/dev/null; rm -rf %s", g_dir, g_dir);
  return 0;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strdup(buf);
}

static char *prom_text(const char *dir) {
  char path[1024];
  snprintf(path, sizeof path, "%s/" RR_TEL_PROM_PREFIX "%s-%d" RR_TEL_PROM_SUFFIX, dir, g_host, (int)getpid());
  return slurp(path);
}

static char *events_text(const char *dir, const char *suffix) {
  char path[1024];
  snprintf(path, sizeof path, "%s/" RR_TEL_EVENTS_PREFIX "%s-%d" RR_TEL_EVENTS_SUFFIX "%s", dir, g_host,
           (int)getpid(), suffix);
  return slurp(path);
}

static long file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* ---- lifecycle */

static void report_nic_down(const char *nic) {
  rr_health_event ev = {.kind = RR_HEV_NIC_STATE, .dev = 3, .to_dev = -1, .state = RR_LINK_DOWN};
  snprintf(ev.ifname, sizeof ev.ifname, "%s", nic);
  rr_health_report(&ev);
}

static void lifecycle(void **state) {
  (void)state;
  unsetenv("RERAIL_TELEMETRY_DIR");
  rr_tel_rail *off = rr_tel_rail_open(0, "eth0", "10.0.0.2", 0, RR_TEL_TX);
  assert_null(off);
  rr_tel_record(off, 1, 2, 3); /* telemetry off: a no-op */
  assert_false(rr_tel_running());
  assert_int_equal(rr_tel_flush(), RR_ERR_UNSUPPORTED);
  assert_int_equal(rr_tel_retain(), RR_ERR_UNSUPPORTED);

  setenv("RERAIL_TELEMETRY_DIR", g_dir, 1);
  rr_tel_rail *a = rr_tel_rail_open(0, "eth0", "10.0.0.2", 0, RR_TEL_TX);
  rr_tel_rail *b = rr_tel_rail_open(0, "eth0", "10.0.0.2", 0, RR_TEL_RX);
  assert_non_null(a);
  assert_non_null(b);
  assert_true(rr_tel_running());
  rr_tel_record(a, 0, T, MB);
  rr_tel_rail_close(a);
  assert_true(rr_tel_running()); /* one recorder still open */
  rr_tel_record(b, 0, T, MB);
  rr_tel_rail_close(b);
  assert_false(rr_tel_running()); /* joined with the last close */
  char *text = prom_text(g_dir);  /* the last cycle wrote what was left */
  assert_non_null(text);
  assert_int_equal(must_sample(text, RR_TEL_M_REQUESTS "{host=\""), 1);
  free(text);

  a = rr_tel_rail_open(0, "eth0", "10.0.0.2", 0, RR_TEL_TX); /* starts again */
  assert_true(rr_tel_running());
  rr_tel_record(a, T, 2 * T, MB);
  assert_int_equal(rr_tel_flush(), RR_OK);
  rr_tel_rail_figures f;
  assert_int_equal(rr_tel_rail_figures_get("eth0", "10.0.0.2", 0, RR_TEL_TX, &f), RR_OK);
  assert_int_equal(f.requests, 2); /* counters survive the restart */

  /* A retain (the plugin's init) keeps the exporter past the last close, and
   * the events in between are logged. */
  assert_int_equal(rr_tel_retain(), RR_OK);
  rr_tel_rail_close(a);
  assert_true(rr_tel_running());
  report_nic_down("eth3");
  assert_int_equal(rr_tel_flush(), RR_OK);
  char *ev = events_text(g_dir, "");
  assert_non_null(ev);
  assert_non_null(strstr(ev, "\"nic\":\"eth3\""));
  free(ev);
  rr_tel_release();
  assert_false(rr_tel_running());
  a = rr_tel_rail_open(0, "eth0", "10.0.0.2", 0, RR_TEL_TX);
  assert_non_null(a);

  rr_tel_shutdown(); /* what the destructor does at dlclose */
  assert_false(rr_tel_running());
  text = prom_text(g_dir);
  assert_null(text); /* out of the scrape */
  assert_null(rr_tel_rail_open(0, "eth0", "10.0.0.2", 1, RR_TEL_TX));
  assert_int_equal(rr_tel_retain(), RR_ERR_UNSUPPORTED);
  rr_tel_record(a, 2 * T, 3 * T, MB); /* a late record after shutdown is harmless */
  rr_tel_rail_close(a);
}

/* ---- the .prom file */

static void prom_file(void **state) {
  (void)state;
  /* Two connections on one rail (their rings are merged in completion order)
   * and a receive rail with an awkward peer name. */
  rr_tel_rail *a = rr_tel_rail_open(0, "eth0", "10.0.0.2", 1, RR_TEL_TX);
  rr_tel_rail *b = rr_tel_rail_open(0, "eth0", "10.0.0.2", 1, RR_TEL_TX);
  rr_tel_rail *c = rr_tel_rail_open(1, "eth1", "we\"ird\\peer\n", 0, RR_TEL_RX);
  assert_non_null(a);
  assert_non_null(b);
  assert_non_null(c);
  /* Each connection moves 1 MB per 2 ms, offset by 1 ms: the rail moves
   * 1 MB per ms = 1 GB/s; every request takes 2 ms. */
  for (uint64_t k = 0; k < 64; k++) {
    rr_tel_record(a, 2 * k * T, 2 * k * T + 2 * T, MB);
    rr_tel_record(b, 2 * k * T + T, 2 * k * T + 3 * T, MB);
  }
  for (uint64_t k = 0; k < 100; k++) rr_tel_record(c, k * T, k * T + (k + 1) * 1000, 4096); /* 1..100 us */
  /* Queue work of both connections' endpoints adds up on the rail; a second
   * publish adds only what grew since the first. c publishes nothing. */
  rr_tel_cost ca = {{0}}, pa = {{0}}, cb = {{0}}, pb = {{0}};
  ca.n[RR_TEL_COST_DOORBELLS_SEND] = 3, ca.n[RR_TEL_COST_CQES_RECV] = 5;
  rr_tel_cost_publish(a, &ca, &pa);
  ca.n[RR_TEL_COST_DOORBELLS_SEND] = 4;
  rr_tel_cost_publish(a, &ca, &pa);
  cb.n[RR_TEL_COST_DOORBELLS_SEND] = 10, cb.n[RR_TEL_COST_WRS_RECV] = 7;
  rr_tel_cost_publish(b, &cb, &pb);
  assert_int_equal(rr_tel_flush(), RR_OK);
  char *text = prom_text(g_dir);
  assert_non_null(text);
  check_structure(text);

  char pre[512];
  int pid = (int)getpid();
#define RAIL(name, nic, peer, rail, dir) \
  (snprintf(pre, sizeof pre, "%s{host=\"%s\",pid=\"%d\",nic=\"%s\",peer=\"%s\",rail=\"%s\",direction=\"%s\"", \
            name, g_host, pid, nic, peer, rail, dir), pre)
  assert_int_equal(must_sample(text, RAIL(RR_TEL_M_BYTES, "eth0", "10.0.0.2", "1", "tx")), 128.0 * MB);
  assert_int_equal(must_sample(text, RAIL(RR_TEL_M_REQUESTS, "eth0", "10.0.0.2", "1", "tx")), 128);
  double thr = must_sample(text, RAIL(RR_TEL_M_THROUGHPUT, "eth0", "10.0.0.2", "1", "tx"));
  assert_true(thr > 0.999e9 && thr < 1.001e9);
  char q[600];
  snprintf(q, sizeof q, "%s,quantile=\"0.5\"}", RAIL(RR_TEL_M_LATENCY, "eth0", "10.0.0.2", "1", "tx"));
  assert_true(must_sample(text, q) == 0.002);
  assert_true(must_sample(text, RAIL(RR_TEL_M_LATENCY "_sum", "eth0", "10.0.0.2", "1", "tx")) == 0.256);
  assert_int_equal(must_sample(text, RAIL(RR_TEL_M_LATENCY "_count", "eth0", "10.0.0.2", "1", "tx")), 128);
  assert_int_equal(must_sample(text, RAIL(RR_TEL_M_DROPPED, "eth0", "10.0.0.2", "1", "tx")), 0);
  char cq[600];
#define COST(name, nic, peer, rail, dir, queue) \
  (snprintf(cq, sizeof cq, "%s,queue=\"%s\"}", RAIL(name, nic, peer, rail, dir), queue), cq)
  assert_int_equal(must_sample(text, COST(RR_TEL_M_DOORBELLS, "eth0", "10.0.0.2", "1", "tx", "send")), 14);
  assert_int_equal(must_sample(text, COST(RR_TEL_M_DOORBELLS, "eth0", "10.0.0.2", "1", "tx", "recv")), 0);
  assert_int_equal(must_sample(text, COST(RR_TEL_M_WORK_REQUESTS, "eth0", "10.0.0.2", "1", "tx", "recv")), 7);
  assert_int_equal(must_sample(text, COST(RR_TEL_M_COMPLETIONS, "eth0", "10.0.0.2", "1", "tx", "recv")), 5);
  assert_int_equal(must_sample(text, COST(RR_TEL_M_COMPLETIONS, "eth0", "10.0.0.2", "1", "tx", "send")), 0);
  /* Label values escaped: backslash, quote, newline. */
  const char *peer = "we\\\"ird\\\\peer\\n";
  snprintf(q, sizeof q, "%s,quantile=\"0.99\"}", RAIL(RR_TEL_M_LATENCY, "eth1", peer, "0", "rx"));
  assert_true(must_sample(text, q) == 99e-6);
  snprintf(q, sizeof q, "%s,quantile=\"0.9\"}", RAIL(RR_TEL_M_LATENCY, "eth1", peer, "0", "rx"));
  assert_true(must_sample(text, q) == 90e-6);
  assert_int_equal(must_sample(text, RAIL(RR_TEL_M_BYTES, "eth1", peer, "0", "rx")), 409600);
  /* A rail that published nothing (TCP) reads 0 from the first export. */
  assert_int_equal(must_sample(text, COST(RR_TEL_M_DOORBELLS, "eth1", peer, "0", "rx", "send")), 0);
  snprintf(q, sizeof q, RR_TEL_M_WINDOW "{host=\"%s\",pid=\"%d\"}", g_host, pid);
  assert_int_equal(must_sample(text, q), 8);
  free(text);

  /* Times kept in ms or µs are given in seconds, to the unit's last digit, under
   * "_seconds_total" names (promtool refuses abbreviated units); counts stay
   * integers. Counters are process-wide: read what is there, add, compare. */
  uint64_t ms0 = rr_counter_get(RR_CTR_CONNECT_MS_FIRST_RAIL), us0 = rr_counter_get(RR_CTR_SETUP_CALL_US_ACCEPT);
  rr_counter_add(RR_CTR_CONNECT_MS_FIRST_RAIL, 1234);
  rr_counter_add(RR_CTR_SETUP_CALL_US_ACCEPT, 2000007);
  assert_int_equal(rr_tel_flush(), RR_OK);
  text = prom_text(g_dir);
  assert_non_null(text);
  check_structure(text);
  snprintf(q, sizeof q, "rerail_connect_time_seconds_total{host=\"%s\",pid=\"%d\",phase=\"first_rail\"}", g_host, pid);
  assert_true(must_sample(text, q) == (double)(ms0 + 1234) / 1e3);
  snprintf(q, sizeof q, "rerail_setup_call_seconds_total{host=\"%s\",pid=\"%d\",call=\"accept\"}", g_host, pid);
  assert_true(must_sample(text, q) == (double)(us0 + 2000007) / 1e6);
  free(text);
  char v[32];
  rr_counter_add(RR_CTR_CONNECT_MS_FIRST_RAIL, 5 - (ms0 + 1234) % 1000 + 1000); /* ends in .005 */
  rr_counter_format_value(v, sizeof v, RR_CTR_CONNECT_MS_FIRST_RAIL);
  assert_non_null(strstr(v, ".005"));
  rr_counter_format_value(v, sizeof v, RR_CTR_CONNECTS);
  assert_null(strchr(v, '.'));

  rr_tel_rail_figures f;
  assert_int_equal(rr_tel_rail_figures_get("eth0", "10.0.0.2", 1, RR_TEL_TX, &f), RR_OK);
  assert_int_equal(f.requests, 128);
  assert_int_equal(f.cost.n[RR_TEL_COST_DOORBELLS_SEND], 14);
  assert_int_equal(f.p50_ns, 2 * T);

  /* An interval without traffic: throughput 0, counters and quantiles kept. */
  assert_int_equal(rr_tel_flush(), RR_OK);
  text = prom_text(g_dir);
  assert_true(must_sample(text, RAIL(RR_TEL_M_THROUGHPUT, "eth0", "10.0.0.2", "1", "tx")) == 0);
  assert_int_equal(must_sample(text, RAIL(RR_TEL_M_REQUESTS, "eth0", "10.0.0.2", "1", "tx")), 128);
  snprintf(q, sizeof q, "%s,quantile=\"0.5\"}", RAIL(RR_TEL_M_LATENCY, "eth0", "10.0.0.2", "1", "tx"));
  assert_true(must_sample(text, q) == 0.002);
  free(text);
#undef RAIL
  rr_tel_rail_close(a);
  rr_tel_rail_close(b);
  rr_tel_rail_close(c);
  assert_int_equal(g_warn_io + g_warn_other, 0);
}

/* A sending recorder on eth0 towards peer whose ring has `slots` slots. */
static rr_tel_rail *open_tx_with_ring(const char *slots, const char *peer) {
  setenv("RERAIL_TELEMETRY_RING", slots, 1);
  rr_tel_rail *t = rr_tel_rail_open(0, "eth0", peer, 0, RR_TEL_TX);
  unsetenv("RERAIL_TELEMETRY_RING");
  assert_non_null(t);
  return t;
}

/* A full ring drops and counts, never blocks. */
static void ring_drops_counted(void **state) {
  (void)state;
  rr_tel_rail *a = open_tx_with_ring("64", "10.0.0.3");
  for (uint64_t k = 0; k < 100000; k++) rr_tel_record(a, k, k + 1, 1);
  assert_int_equal(rr_tel_flush(), RR_OK);
  rr_tel_rail_figures f;
  assert_int_equal(rr_tel_rail_figures_get("eth0", "10.0.0.3", 0, RR_TEL_TX, &f), RR_OK);
  assert_int_equal(f.requests + f.dropped, 100000);
  assert_true(f.dropped > 0);
  char *text = prom_text(g_dir);
  char pre[256];
  snprintf(pre, sizeof pre, RR_TEL_M_DROPPED "{host=\"%s\",pid=\"%d\",nic=\"eth0\",peer=\"10.0.0.3\"", g_host,
           (int)getpid());
  assert_true(must_sample(text, pre) == (double)f.dropped);
  free(text);
  rr_tel_rail_close(a);
}

static uint64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* A rail faster than the ring holds in the longest drain period: 100 000
 * requests a second into 4096 slots (41 ms of them; drains are 50 ms apart
 * when rings stay quiet). The exporter drains sooner as the ring fills
 * faster (every ~10 ms here), so nothing is dropped while it gets a core.
 *
 * What is asserted is that sooner: drains less than half the quiet period
 * apart, ten of them. How many samples are dropped depends on when the
 * exporter, at nice 19, gets a core, which a loaded machine decides (beside
 * two busy loops it waited long enough to drop over 5 % in one run of ten);
 * but load only ever delays a drain, so it cannot make a fixed 50 ms period
 * look shorter, and the adaptive one shows within a few hundred ms even
 * then. The gaps are measured from the producer's side, as an upper bound:
 * a drain lies between two polls of the ring's tail, so the time from the
 * poll before one drain to the poll that sees the next bounds their gap,
 * whatever delays the polls. The fixed period (which dropped 6 152 of 60 000
 * samples on a quiet machine) never has such a gap. */
static void ring_keeps_up_with_fast_rail(void **state) {
  (void)state;
  rr_tel_rail *a = open_tx_with_ring("4096", "10.0.0.4");
  const uint64_t early_ns = RR_TEL_DRAIN_MS * 1000000ull / 2;
  const int want_early = 10;
  uint64_t k = 0;
  uint32_t tail = atomic_load_explicit(&a->ring.tail, memory_order_acquire);
  uint64_t prev_poll = mono_ns(), before_last_drain = 0;
  int drains = 0, early = 0;
  /* Far longer than it takes even beside busy loops: only a period that does
   * not shorten runs into it. */
  uint64_t give_up = prev_poll + 20000000000ull;
  while (early < want_early && prev_poll < give_up) {
    for (int i = 0; i < 100; i++, k++) rr_tel_record(a, k * 10000, k * 10000 + 5000, 65536);
    struct timespec one_ms = {.tv_nsec = 1000000};
    nanosleep(&one_ms, NULL);
    uint64_t poll = mono_ns();
    uint32_t t = atomic_load_explicit(&a->ring.tail, memory_order_acquire);
    if (t != tail) {
      /* A drain (or more) since prev_poll. */
      if (drains > 0 && poll - before_last_drain < early_ns) early++;
      before_last_drain = prev_poll;
      tail = t;
      drains++;
    }
    prev_poll = poll;
  }
  print_message("%d drains, %d of them under %llu ms after the one before, %llu samples\n", drains, early,
                (unsigned long long)(early_ns / 1000000u), (unsigned long long)k);
  assert_true(early >= want_early);
  assert_int_equal(rr_tel_flush(), RR_OK);
  rr_tel_rail_figures f;
  assert_int_equal(rr_tel_rail_figures_get("eth0", "10.0.0.4", 0, RR_TEL_TX, &f), RR_OK);
  /* Every sample is either counted or counted as dropped. */
  assert_int_equal(f.requests + f.dropped, k);
  rr_tel_rail_close(a);
}

/* ---- events */

static void report(rr_health_event_kind kind, const char *nic, const char *to, const char *peer,
                   rr_link_state st, uint64_t stall_ns, const char *reason) {
  rr_health_event ev = {.kind = kind, .dev = 0, .to_dev = to ? 1 : -1, .state = st, .stall_ns = stall_ns};
  snprintf(ev.ifname, sizeof ev.ifname, "%s", nic ? nic : "");
  snprintf(ev.to_ifname, sizeof ev.to_ifname, "%s", to ? to : "");
  snprintf(ev.peer, sizeof ev.peer, "%s", peer ? peer : "");
  snprintf(ev.reason, sizeof ev.reason, "%s", reason);
  rr_health_report(&ev);
}

/* What serves each NIC: an info series per NIC whose transport the plugin set
 * (rr_health_nic_transport_set), and the transport and RDMA device of nic and
 * to_nic in every event; null where unknown. */
static void nic_transport(void **state) {
  (void)state;
  const char *names[] = {"eth0", "eth1", "eth2"};
  rr_health_nics_set(names, 3);
  rr_health_nic_transport_set(0, "verbs", "mlx5_0", 1);
  rr_health_nic_transport_set(1, "tcp", "", 0);
  /* device 2: never set */
  rr_tel_rail *a = rr_tel_rail_open(0, "eth0", "10.0.0.2", 0, RR_TEL_TX);
  assert_non_null(a);
  report(RR_HEV_FAILOVER, "eth0", "eth1", "10.0.0.2", RR_LINK_UP, 1000000, "resumed");
  rr_health_event ev = {.kind = RR_HEV_NIC_STATE, .dev = 2, .to_dev = -1, .state = RR_LINK_DOWN};
  snprintf(ev.ifname, sizeof ev.ifname, "eth2");
  rr_health_report(&ev);
  assert_int_equal(rr_tel_flush(), RR_OK);
  char *text = prom_text(g_dir);
  check_structure(text);
  char pre[256];
  int pid = (int)getpid();
  snprintf(pre, sizeof pre, RR_TEL_M_NIC_INFO "{host=\"%s\",pid=\"%d\",nic=\"eth0\",transport=\"verbs\","
           "rdma_device=\"mlx5_0\",rdma_port=\"1\"}", g_host, pid);
  assert_int_equal(must_sample(text, pre), 1);
  snprintf(pre, sizeof pre, RR_TEL_M_NIC_INFO "{host=\"%s\",pid=\"%d\",nic=\"eth1\",transport=\"tcp\","
           "rdma_device=\"\",rdma_port=\"0\"}", g_host, pid);
  assert_int_equal(must_sample(text, pre), 1);
  assert_null(strstr(text, "nic=\"eth2\",transport="));
  free(text);
  text = events_text(g_dir, "");
  assert_non_null(text);
  assert_non_null(strstr(text, "\"kind\":\"failover\""));
  assert_non_null(strstr(text, "\"dev\":0,\"to_dev\":1,\"transport\":\"verbs\",\"rdma_device\":\"mlx5_0\","
                               "\"to_transport\":\"tcp\",\"to_rdma_device\":null,\"where\":null}"));
  assert_non_null(strstr(text, "\"dev\":2,\"to_dev\":-1,\"transport\":null,\"rdma_device\":null,"
                               "\"to_transport\":null,\"to_rdma_device\":null,\"where\":null}"));
  free(text);
  rr_tel_rail_close(a);
  for (int i = 0; i < 3; i++) rr_health_nic_transport_set(i, "", "", 0);
  rr_health_nics_set(NULL, 0);
}

static void events_json(void **state) {
  (void)state;
  rr_tel_rail *a = rr_tel_rail_open(0, "eth0", "10.0.0.2", 0, RR_TEL_TX); /* the exporter runs */
  assert_non_null(a);
  report(RR_HEV_NIC_STATE, "eth0", NULL, NULL, RR_LINK_DOWN, 0, "carrier \"lost\"\n\xff");
  report(RR_HEV_RAIL_STATE, "eth0", NULL, "10.0.0.2", RR_LINK_DOWN, 0, "send rail0: timeout");
  report(RR_HEV_FAILOVER, "eth0", "eth1", "10.0.0.2", RR_LINK_UP, 12500000, "resumed in epoch 2");
  report(RR_HEV_FAILBACK, "eth1", "eth0", "10.0.0.2", RR_LINK_UP, 0, "healed");
  report(RR_HEV_ERROR, NULL, NULL, "10.0.0.9", RR_LINK_DOWN, 0, "no rail left");
  assert_int_equal(rr_tel_flush(), RR_OK);
  char *text = events_text(g_dir, "");
  assert_non_null(text);
  char *line[8];
  int n = 0;
  for (char *l = strtok(text, "\n"); l && n < 8; l = strtok(NULL, "\n")) line[n++] = l;
  assert_int_equal(n, 5);
  for (int i = 0; i < n; i++) {
    unsigned y, mo, d, h, mi, s, ns;
    char z;
    assert_int_equal(sscanf(line[i], "{\"time\":\"%4u-%2u-%2uT%2u:%2u:%2u.%9u%c\",\"time_ns\":", &y, &mo, &d, &h,
                            &mi, &s, &ns, &z), 8);
    assert_int_equal(z, 'Z');
    assert_non_null(strstr(line[i], "\"host\":"));
    assert_non_null(strstr(line[i], "\"pid\":"));
    assert_true(line[i][strlen(line[i]) - 1] == '}');
  }
  assert_non_null(strstr(line[0], "\"kind\":\"nic_state\",\"nic\":\"eth0\",\"to_nic\":null,\"peer\":null,"
                                  "\"state\":\"down\",\"reason\":\"carrier \\\"lost\\\"\\u000a\\u00ff\","
                                  "\"stall_ms\":null"));
  assert_non_null(strstr(line[1], "\"kind\":\"rail_state\",\"nic\":\"eth0\",\"to_nic\":null,"
                                  "\"peer\":\"10.0.0.2\",\"state\":\"down\""));
  assert_non_null(strstr(line[2], "\"kind\":\"failover\",\"nic\":\"eth0\",\"to_nic\":\"eth1\","
                                  "\"peer\":\"10.0.0.2\",\"state\":null,\"reason\":\"resumed in epoch 2\","
                                  "\"stall_ms\":12.500"));
  assert_non_null(strstr(line[3], "\"kind\":\"failback\",\"nic\":\"eth1\",\"to_nic\":\"eth0\""));
  assert_non_null(strstr(line[4], "\"kind\":\"error\",\"nic\":null"));
  free(text);

  /* The same events in the metrics. */
  text = prom_text(g_dir);
  check_structure(text);
  char pre[256];
  int pid = (int)getpid();
  snprintf(pre, sizeof pre, RR_TEL_M_FAILOVERS "{host=\"%s\",pid=\"%d\",nic=\"eth0\",peer=\"10.0.0.2\"}", g_host, pid);
  assert_int_equal(must_sample(text, pre), 1);
  snprintf(pre, sizeof pre, RR_TEL_M_FAILBACKS "{host=\"%s\",pid=\"%d\",nic=\"eth0\",peer=\"10.0.0.2\"}", g_host, pid);
  assert_int_equal(must_sample(text, pre), 1);
  /* rail state: down, then up again with the fail-back onto it */
  snprintf(pre, sizeof pre, RR_TEL_M_RAIL_STATE "{host=\"%s\",pid=\"%d\",nic=\"eth0\",peer=\"10.0.0.2\"}", g_host, pid);
  assert_int_equal(must_sample(text, pre), RR_LINK_UP);
  snprintf(pre, sizeof pre, RR_TEL_M_NIC_STATE "{host=\"%s\",pid=\"%d\",nic=\"eth0\"}", g_host, pid);
  assert_int_equal(must_sample(text, pre), RR_LINK_DOWN);
  snprintf(pre, sizeof pre, RR_TEL_M_ERRORS "{host=\"%s\",pid=\"%d\",peer=\"10.0.0.9\"}", g_host, pid);
  assert_int_equal(must_sample(text, pre), 1);
  snprintf(pre, sizeof pre, RR_TEL_M_EVENTS "{host=\"%s\",pid=\"%d\",kind=\"failover\"}", g_host, pid);
  assert_int_equal(must_sample(text, pre), 1);
  free(text);
  rr_tel_rail_close(a);
}

static void events_rotation(void **state) {
  (void)state;
  setenv("RERAIL_TELEMETRY_EVENTS_MAX", "1024", 1);
  rr_tel_rail *a = rr_tel_rail_open(0, "eth0", "10.0.0.2", 0, RR_TEL_TX);
  assert_non_null(a);
  for (int i = 0; i < 40; i++) {
    char why[32];
    snprintf(why, sizeof why, "event %d", i);
    report(RR_HEV_RAIL_STATE, "eth0", NULL, "10.0.0.2", RR_LINK_RECOVERING, 0, why);
    if (i % 5 == 4) rr_tel_flush();
  }
  rr_tel_flush();
  char cur[1024], old[1100], older[1100];
  snprintf(cur, sizeof cur, "%s/" RR_TEL_EVENTS_PREFIX "%s-%d" RR_TEL_EVENTS_SUFFIX, g_dir, g_host, (int)getpid());
  snprintf(old, sizeof old, "%s.1", cur);
  snprintf(older, sizeof older, "%s.2", cur);
  assert_true(file_size(cur) > 0 && file_size(cur) <= 1024);
  assert_true(file_size(old) > 0 && file_size(old) <= 1024);
  assert_int_equal(file_size(older), -1);
  char *text = events_text(g_dir, "");
  assert_non_null(strstr(text, "\"reason\":\"event 39\""));
  assert_true(text[strlen(text) - 1] == '\n'); /* whole lines only */
  free(text);
  text = events_text(g_dir, ".1");
  assert_null(strstr(text, "\"reason\":\"event 39\""));
  assert_true(text[strlen(text) - 1] == '\n');
  free(text);
  rr_tel_rail_close(a);
}

/* ---- anomaly snapshots */

static int count_snapshots(int *lowest, int *highest) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, RR_TEL_ANOMALY_PREFIX "%d-", (int)getpid());
  DIR *d = opendir(g_dir);
  int n = 0;
  *lowest = 1 << 30;
  *highest = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (!strncmp(e->d_name, prefix, strlen(prefix))) {
      int seq = atoi(e->d_name + strlen(prefix));
      n++;
      if (seq < *lowest) *lowest = seq;
      if (seq > *highest) *highest = seq;
    }
  closedir(d);
  return n;
}

static void anomaly_snapshots(void **state) {
  (void)state;
  rr_tel_rail *a = rr_tel_rail_open(0, "eth0", "10.0.0.4", 0, RR_TEL_RX);
  assert_non_null(a);
  uint64_t t = 0;
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < 200; i++, t += T) rr_tel_record(a, t, t + T, MB);         /* 1 GB/s */
    for (int i = 0; i < 40; i++, t += 5 * T) rr_tel_record(a, t, t + 5 * T, MB);  /* 0.2 GB/s */
    assert_int_equal(rr_tel_flush(), RR_OK);
    t += 11000 * T; /* past the per-rail quiet period */
  }
  for (int i = 0; i < 100; i++, t += T) rr_tel_record(a, t, t + T, MB);
  rr_tel_flush();
  rr_tel_flush(); /* the anomaly events reported by the exporter reach the log */
  rr_tel_rail_figures f;
  assert_int_equal(rr_tel_rail_figures_get("eth0", "10.0.0.4", 0, RR_TEL_RX, &f), RR_OK);
  assert_int_equal(f.anomalies, 20);
  int lo, hi;
  assert_int_equal(count_snapshots(&lo, &hi), 16); /* capped: the oldest went */
  assert_int_equal(hi - lo, 15);
  char path[1024];
  snprintf(path, sizeof path, "%s/" RR_TEL_ANOMALY_PREFIX "%d-%d.json", g_dir, (int)getpid(), hi);
  char *js = slurp(path);
  assert_non_null(js);
  assert_non_null(strstr(js, "\"nic\":\"eth0\",\"peer\":\"10.0.0.4\",\"rail\":0,\"direction\":\"rx\",\"window\":8"));
  assert_non_null(strstr(js, "\"samples_before\":64,\"samples_after\":32"));
  int after = 0, before = 0;
  for (const char *p = js; (p = strstr(p, "\"after\":")); p++) {
    if (!strncmp(p, "\"after\":true", 12)) after++;
    else before++;
  }
  assert_int_equal(after, 32);
  assert_int_equal(before, 64);
  double thr = 0, avg = 0;
  const char *p = strstr(js, "\"throughput_bytes_per_second\":");
  sscanf(p, "\"throughput_bytes_per_second\":%lf,\"recent_average_bytes_per_second\":%lf", &thr, &avg);
  assert_true(thr < 0.5 * avg);
  assert_true(avg > 0.99e9 && avg < 1.01e9);
  free(js);
  char *ev = events_text(g_dir, "");
  int nanom = 0;
  for (const char *q = ev; (q = strstr(q, "\"kind\":\"anomaly\"")); q++) nanom++;
  assert_int_equal(nanom, 20);
  free(ev);
  rr_tel_rail_close(a);
}

/* Small requests are slow by nature (a round of latency each): a switch from
 * bulk to small messages is no drop, and neither is one slow request. */
static void anomaly_not_small_or_single(void **state) {
  (void)state;
  rr_tel_rail *a = rr_tel_rail_open(0, "eth0", "10.0.0.8", 0, RR_TEL_TX);
  assert_non_null(a);
  uint64_t t = 0;
  /* (a flush after each phase: the ring holds 1024) */
  for (int i = 0; i < 300; i++, t += T) rr_tel_record(a, t, t + T, MB);           /* 1 GB/s bulk */
  assert_int_equal(rr_tel_flush(), RR_OK);
  for (int i = 0; i < 300; i++, t += T / 10) rr_tel_record(a, t, t + T / 10, 1000); /* 10 MB/s small */
  assert_int_equal(rr_tel_flush(), RR_OK);
  for (int i = 0; i < 300; i++, t += T) rr_tel_record(a, t, t + T, MB);
  rr_tel_record(a, t, t + 50 * T, MB); /* one request stalls 50 ms */
  t += 50 * T;
  for (int i = 0; i < 300; i++, t += T) rr_tel_record(a, t, t + T, MB);
  assert_int_equal(rr_tel_flush(), RR_OK);
  rr_tel_rail_figures f;
  assert_int_equal(rr_tel_rail_figures_get("eth0", "10.0.0.8", 0, RR_TEL_TX, &f), RR_OK);
  assert_int_equal(f.requests, 1201);
  assert_int_equal(f.anomalies, 0);
  for (int i = 0; i < 100; i++, t += 5 * T) rr_tel_record(a, t, t + 5 * T, MB); /* a real drop */
  assert_int_equal(rr_tel_flush(), RR_OK);
  assert_int_equal(rr_tel_rail_figures_get("eth0", "10.0.0.8", 0, RR_TEL_TX, &f), RR_OK);
  assert_int_equal(f.anomalies, 1);
  rr_tel_rail_close(a);
}

/* ---- the directory cannot be written */

static void record_some(rr_tel_rail *a, uint64_t *t, int n) {
  for (int i = 0; i < n; i++, *t += T) rr_tel_record(a, *t, *t + T, MB);
}

static void dir_not_creatable(void **state) {
  (void)state;
  char file[256], bad[300];
  snprintf(file, sizeof file, "%s/afile", g_dir);
  snprintf(bad, sizeof bad, "%s/sub", file);
  assert_int_equal(run("touch %s", file), 0);
  setenv("RERAIL_TELEMETRY_DIR", bad, 1);
  rr_tel_rail *a = rr_tel_rail_open(0, "eth0", "10.0.0.5", 0, RR_TEL_TX);
  assert_non_null(a); /* telemetry is on; the directory is a problem of the files only */
  uint64_t t = 0;
  for (int i = 0; i < 5; i++) {
    record_some(a, &t, 10);
    report(RR_HEV_RAIL_STATE, "eth0", NULL, "10.0.0.5", RR_LINK_DOWN, 0, "x");
    assert_int_equal(rr_tel_flush(), RR_OK);
  }
  assert_int_equal(g_warn_io, 1); /* once */
  rr_tel_rail_figures f;
  assert_int_equal(rr_tel_rail_figures_get("eth0", "10.0.0.5", 0, RR_TEL_TX, &f), RR_OK);
  assert_int_equal(f.requests, 50); /* recording went on */
  /* The operator fixes it: the files appear with everything recorded. */
  assert_int_equal(run("rm %s && mkdir %s", file, file), 0);
  record_some(a, &t, 10);
  assert_int_equal(rr_tel_flush(), RR_OK);
  char *text = prom_text(bad);
  assert_non_null(text);
  char pre[256];
  snprintf(pre, sizeof pre, RR_TEL_M_REQUESTS "{host=\"%s\",pid=\"%d\",nic=\"eth0\",peer=\"10.0.0.5\"", g_host,
           (int)getpid());
  assert_int_equal(must_sample(text, pre), 60);
  free(text);
  assert_true(g_info_ok >= 1);
  assert_int_equal(g_warn_io, 1);
  rr_tel_rail_close(a);
}

static void dir_read_only(void **state) {
  (void)state;
  char mnt[256];
  snprintf(mnt, sizeof mnt, "%s/mnt", g_dir);
  assert_int_equal(run("mkdir %s && mount -t tmpfs -o ro,size=64k tmpfs %s", mnt, mnt), 0);
  setenv("RERAIL_TELEMETRY_DIR", mnt, 1);
  rr_tel_rail *a = rr_tel_rail_open(0, "eth0", "10.0.0.6", 0, RR_TEL_TX);
  assert_non_null(a);
  uint64_t t = 0;
  for (int i = 0; i < 5; i++) {
    record_some(a, &t, 10);
    assert_int_equal(rr_tel_flush(), RR_OK);
  }
  assert_int_equal(g_warn_io, 1); /* the metrics file, once */
  report(RR_HEV_FAILOVER, "eth0", "eth1", "10.0.0.6", RR_LINK_UP, 1000, "x");
  report(RR_HEV_FAILOVER, "eth0", "eth1", "10.0.0.6", RR_LINK_UP, 1000, "y");
  assert_int_equal(rr_tel_flush(), RR_OK);
  assert_int_equal(rr_tel_flush(), RR_OK);
  assert_int_equal(g_warn_io, 2); /* plus the event log, once */
  assert_int_equal(run("mount -o remount,rw %s", mnt), 0);
  record_some(a, &t, 10);
  assert_int_equal(rr_tel_flush(), RR_OK);
  char *text = prom_text(mnt);
  assert_non_null(text);
  char pre[256];
  snprintf(pre, sizeof pre, RR_TEL_M_REQUESTS "{host=\"%s\",pid=\"%d\",nic=\"eth0\",peer=\"10.0.0.6\"", g_host,
           (int)getpid());
  assert_int_equal(must_sample(text, pre), 60);
  snprintf(pre, sizeof pre, RR_TEL_M_DROPPED_EVENTS "{host=\"%s\",pid=\"%d\"}", g_host, (int)getpid());
  assert_int_equal(must_sample(text, pre), 2); /* the events that could not be logged */
  snprintf(pre, sizeof pre, RR_TEL_M_FAILOVERS "{host=\"%s\",pid=\"%d\",nic=\"eth0\",peer=\"10.0.0.6\"}", g_host,
           (int)getpid());
  assert_int_equal(must_sample(text, pre), 2); /* ... but they were counted */
  free(text);
  rr_tel_rail_close(a);
}

static void disk_full(void **state) {
  (void)state;
  char mnt[256];
  snprintf(mnt, sizeof mnt, "%s/mnt", g_dir);
  assert_int_equal(run("mkdir %s && mount -t tmpfs -o size=64k tmpfs %s", mnt, mnt), 0);
  setenv("RERAIL_TELEMETRY_DIR", mnt, 1);
  rr_tel_rail *r[8];
  for (int i = 0; i < 8; i++) {
    r[i] = rr_tel_rail_open(0, "eth0", "10.0.0.7", i, RR_TEL_TX); /* a .prom of some KiB */
    assert_non_null(r[i]);
  }
  uint64_t t = 0;
  record_some(r[0], &t, 10);
  assert_int_equal(rr_tel_flush(), RR_OK);
  assert_int_equal(g_warn_io, 0);
  /* Fill the disk. */
  run("dd if=/dev/zero of=%s/filler bs=4k >/dev/null 2>&1", mnt);
  for (int i = 0; i < 6; i++) {
    record_some(r[0], &t, 10);
    report(RR_HEV_RAIL_STATE, "eth0", NULL, "10.0.0.7", RR_LINK_DEGRADED, 0, "slow");
    assert_int_equal(rr_tel_flush(), RR_OK);
  }
  /* One warning per kind of file (metrics, events), not one per attempt. */
  assert_int_equal(g_warn_io, 2);
  rr_tel_rail_figures f;
  rr_tel_rail_figures_get("eth0", "10.0.0.7", 0, RR_TEL_TX, &f);
  assert_int_equal(f.requests, 70);
  /* No temporary file left behind, no half-written .prom. */
  assert_int_not_equal(run("ls -a %s | grep -q '\\.tmp$'", mnt), 0);
  char *text = prom_text(mnt);
  if (text) { /* the one from before the disk filled: whole */
    check_structure(text);
    free(text);
  }
  char *ev = events_text(mnt, "");
  if (ev) {
    assert_true(!ev[0] || ev[strlen(ev) - 1] == '\n');
    free(ev);
  }
  /* Space comes back: so do the files, with everything recorded meanwhile. */
  assert_int_equal(run("rm %s/filler", mnt), 0);
  record_some(r[0], &t, 10);
  report(RR_HEV_RAIL_STATE, "eth0", NULL, "10.0.0.7", RR_LINK_UP, 0, "fast again");
  assert_int_equal(rr_tel_flush(), RR_OK);
  text = prom_text(mnt);
  assert_non_null(text);
  check_structure(text);
  char pre[256];
  snprintf(pre, sizeof pre, RR_TEL_M_REQUESTS "{host=\"%s\",pid=\"%d\",nic=\"eth0\",peer=\"10.0.0.7\",rail=\"0\"",
           g_host, (int)getpid());
  assert_int_equal(must_sample(text, pre), 80);
  snprintf(pre, sizeof pre, RR_TEL_M_RAIL_STATE "{host=\"%s\",pid=\"%d\",nic=\"eth0\",peer=\"10.0.0.7\"}", g_host,
           (int)getpid());
  assert_int_equal(must_sample(text, pre), RR_LINK_UP);
  free(text);
  ev = events_text(mnt, "");
  assert_non_null(ev);
  assert_non_null(strstr(ev, "fast again"));
  free(ev);
  assert_true(g_info_ok >= 2);
  for (int i = 0; i < 8; i++) rr_tel_rail_close(r[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(lifecycle, setup, teardown),
      cmocka_unit_test_setup_teardown(prom_file, setup, teardown),
      cmocka_unit_test_setup_teardown(ring_drops_counted, setup, teardown),
      cmocka_unit_test_setup_teardown(ring_keeps_up_with_fast_rail, setup, teardown),
      cmocka_unit_test_setup_teardown(events_json, setup, teardown),
      cmocka_unit_test_setup_teardown(nic_transport, setup, teardown),
      cmocka_unit_test_setup_teardown(events_rotation, setup, teardown),
      cmocka_unit_test_setup_teardown(anomaly_snapshots, setup, teardown),
      cmocka_unit_test_setup_teardown(anomaly_not_small_or_single, setup, teardown),
      cmocka_unit_test_setup_teardown(dir_not_creatable, setup, teardown),
      cmocka_unit_test_setup_teardown(dir_read_only, setup, teardown),
      cmocka_unit_test_setup_teardown(disk_full, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
