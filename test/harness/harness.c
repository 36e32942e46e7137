/* rerail-harness: drive an ncclNet plugin the way NCCL's proxy does, across
 * two processes, with every payload byte checked.
 *
 *   server: listen (one listen comm per connection) -> publish each handle in
 *           the rendezvous directory -> accept() until it returns a comm ->
 *           closeListen -> regMr -> receive (and, with --bidir, also send)
 *   client: read the handles -> connect() until it returns a comm -> regMr ->
 *           send (and, with --bidir, also listen/accept and receive)
 *
 * connect() and accept() are called again and again until they return a
 * comm, exactly as NCCL's proxy does; a single call that blocks longer than
 * --max-call-ms is a failure. See --help for every option and the exit codes. */
#include "harness.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

h_opts g_opt = {
    .plugin = "rerail",
    .role = -1,
    .conns = 4,
    .inflight = 8,
    .mem_type = HNET_PTR_HOST,
    .max_size = 8u << 20,
    .seed = 1,
    .timeout = 120,
    .rdv_timeout = 60,
    .max_call_s = 1.0,
    .recv_hint = 1,
    .die_size = 256u << 20,
    .die_after_ms = 20,
    .die_bound = 30,
    .bad_bound = 40,
    .selftest_corrupt = -1,
    .contexts = 1,
};

static hnet g_nets[H_MAX_CONTEXTS];
#define g_net g_nets[0]
static int g_nctx = 1;
static unsigned long g_teardown_warnings;   /* plugin WARNs after both ends finished cleanly */
/* The plugin's process-wide counters, read just before it is unloaded
 * (hnet_plugin_counters); -1: the plugin exports none. */
static char g_counters[HNET_COUNTERS_MAX];
static int g_counters_len = -1;
static int g_group = 1;
static h_conn *g_send, *g_recv;
static int g_nsend, g_nrecv;
/* What the summary prints about the plugin, kept past hnet_unload(). */
static struct {
  char name[64], path[512];
  int version;
} g_info;


int h_resolved_group(void) { return g_group; }

static void usage(FILE *f) {
  fprintf(f,
"usage: rerail-harness --role server|client --rendezvous DIR [options]\n"
"       rerail-harness --probe [--plugin P] [--net-version V]\n"
"       rerail-harness --bad-handle [--plugin P]\n"
"Drives an ncclNet plugin as NCCL's proxy does, across two processes, and\n"
"checks every byte. Start the server and the client with the same options.\n"
"\n"
"Plugin and setup\n"
"  --plugin NAME|PATH     as NCCL_NET_PLUGIN: NAME -> libnccl-net-NAME.so (default rerail);\n"
"                         nccl-socket[:LIBNCCL], nccl-ib[:LIBNCCL]: NCCL's own socket or IB\n"
"                         transport from libnccl.so.2 (or $NCCL_LIB); NCCL_* variables apply\n"
"  --net-version V        bind ncclNetPlugin_vV (7..12); 0 = newest exported (default)\n"
"  --dev N                device index (default 0)\n"
"  --role server|client   the server listens and receives, the client connects and sends\n"
"  --rendezvous DIR       directory both processes share for handles and flags\n"
"  --conns N              connections (default 4, at most %d)\n"
"  --bidir                each process both sends and receives (listens and connects)\n"
"  --threads              drive each connection (setup and traffic) from its own thread\n"
"  --contexts C           net v11+: init() C contexts, as C communicators would; connection i\n"
"                         uses context i %% C (default 1; v7-v10 share one process-wide init)\n"
"  --accept-delay-ms MS   the server waits MS ms after publishing its handles before the\n"
"                         first accept() (connect must cope with a slow peer)\n"
"  --close-when-done      close every connection as soon as this side's schedule is done,\n"
"                         without waiting for the peer (a rank destroying its communicator\n"
"                         while the peer's proxy still tests its last requests)\n"
"  --close-delay-ms MS    wait MS ms after both ends finished before closing (give it to\n"
"                         one side: ranks tear down at different times); plugin warnings\n"
"                         logged during an orderly teardown are reported\n"
"Traffic (a deterministic schedule from --seed; both sides must agree)\n"
"  --inflight K           ops in flight per connection, 1..8 (default 8)\n"
"  --group G              receives per grouped irecv, 1..8 (default: device maxRecvs, capped 8);\n"
"                         single receives are always mixed in\n"
"  --min-size S, --max-size S   message sizes (default 0 .. 8M; K/M/G suffixes)\n"
"  --iters N              ops per connection and direction (default 256)\n"
"  --mem host|cuda        register buffers as NCCL_PTR_HOST (default) or NCCL_PTR_CUDA (host\n"
"                         memory a plugin test knob treats as GPU memory: RERAIL_TEST_HOST_AS_GPU)\n"
"  --protect              the connection's buffer is PROT_NONE while the plugin owns it (isend or\n"
"                         irecv until test() says done, and the flush): a plugin whose CPU reads or\n"
"                         writes it faults (SIGSEGV); needs --inflight 1\n"
"  --sizes S[,S...]       every op a single message of the listed sizes in turn (K/M suffixes;\n"
"                         raises --max-size to the largest); replaces the random schedule\n"
"  --no-flush             never iflush, as NCCL for host memory (default: once per received op;\n"
"                         NCCL's own socket transport, --plugin nccl-socket, refuses iflush)\n"
"  --duration SECONDS     the sender stops after this long and ends the schedule in-band\n"
"  --seed S               schedule seed (default 1)\n"
"  --no-recv-hint         never pass NCCL's optional-completion hint to irecv\n"
"Checks and output\n"
"  --timeout S            watchdog: a hang becomes exit 3 after S seconds (default 120)\n"
"  --rdv-timeout S        wait at most S seconds for the peer's files (default 60)\n"
"  --max-call-ms MS       a connect/accept call longer than this fails (default 1000)\n"
"  --quiet                only errors and the summary\n"
"  --json                 the summary as one JSON object on stdout\n"
"  --stall-report         receiver: report the longest gap between consecutive receive\n"
"                         completions, across all connections and per connection, and when\n"
"                         it happened (relative to the start of traffic and wall-clock);\n"
"                         also the time of the first error\n"
"  --no-peer-abort        during traffic, ignore the peer's abort flag in the rendezvous\n"
"                         directory: each side must learn of a failure from the plugin, as\n"
"                         NCCL ranks do (fault-injection tests)\n"
"  --timeline FILE        receiver: write the bytes received per 50 ms bucket to FILE, one\n"
"                         line per bucket: 't_ms bytes' (t_ms since the start of traffic;\n"
"                         a '# t0_wall EPOCH' line gives the start); also in --json\n"
"  --completion-log FILE  receiver: every receive completion to FILE, one line each:\n"
"                         'wall_seconds bytes conn' (for failover timing scripts)\n"
"  --scale-report         what the connections cost: setup time (the server's listen phase\n"
"                         plus the connect phase, without the handle files in between),\n"
"                         resident memory per connection after setup and after traffic, file\n"
"                         descriptors and threads (bench/conn_scale.sh runs it)\n"
"  --setup-barrier        with --scale-report: each side starts its traffic only once the\n"
"                         other has all its comms, so the traffic of the side done first\n"
"                         does not slow the other's setup on a shared host\n"
"  --selftest-corrupt SEQ the receiver flips one byte of op SEQ on connection 0 before\n"
"                         checking it: proves the checker (expect exit 1, DATA MISMATCH)\n"
"Bad-input modes (each a verdict: exit 0 = the plugin behaved)\n"
"  --probe                load, init, list devices and properties, exit\n"
"  --bad-handle           (no peer needed) connect with garbage handles: expect an error\n"
"  --wrong-token token|all-but-addr   both roles: the client connects first with a\n"
"                         corrupted copy of the server's handle (bytes 8..15 flipped, or every\n"
"                         byte but the listen address); the server must never accept it, then a\n"
"                         genuine connection must work\n"
"  --keep-bytes OFF:LEN[,OFF:LEN]     bytes all-but-addr keeps (default: found by scanning\n"
"                         the handle for a local address)\n"
"  --die-mid-message      both roles: after the schedule the client isends --die-size bytes and\n"
"                         _exit()s --die-after-ms later; the server's test() must fail within\n"
"                         --die-bound seconds (defaults 256M, 20 ms, 30 s)\n"
"  --bad-bound S          bad-handle: a verdict within S seconds (default 40)\n"
"Exit codes: 0 pass, 1 failure (data, protocol, plugin error), 2 usage/setup, 3 hang (watchdog),\n"
"4 the dying message completed too early.\n",
          H_MAX_CONNS);
}

static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s) return -1;
  unsigned long long mult = 1;
  if (*end == 'k' || *end == 'K') mult = 1ull << 10, end++;
  else if (*end == 'm' || *end == 'M') mult = 1ull << 20, end++;
  else if (*end == 'g' || *end == 'G') mult = 1ull << 30, end++;
  if (*end) return -1;
  *out = (size_t)(v * mult);
  return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

enum {
  O_PLUGIN = 256, O_NETVER, O_DEV, O_ROLE, O_RDV, O_CONNS, O_INFLIGHT, O_GROUP, O_MIN, O_MAX, O_DURATION,
  O_ITERS, O_SEED, O_BIDIR, O_THREADS, O_TIMEOUT, O_QUIET, O_JSON, O_BADHANDLE, O_WRONGTOKEN, O_KEEP,
  O_DIE, O_DIESIZE, O_DIEAFTER, O_DIEBOUND, O_BADBOUND, O_PROBE, O_NOHINT, O_RDVTIMEOUT, O_MAXCALL, O_SELFTEST, O_CONTEXTS, O_ACCEPTDELAY, O_CLOSEDELAY, O_CLOSEDONE, O_STALL, O_TIMELINE, O_NOPEERABORT, O_CLOG, O_NOFLUSH, O_MEM, O_PROTECT, O_SIZES, O_SCALE, O_BARRIER, O_HELP
};

/* --sizes S[,S...]: at most H_MAX_SIZES sizes; --max-size grows to the largest. */
static int parse_size_list(const char *a) {
  char buf[1024];
  if (strlen(a) >= sizeof buf) return -1;
  strcpy(buf, a);
  g_opt.nsizes = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (g_opt.nsizes == H_MAX_SIZES || parse_size(t, &g_opt.sizes[g_opt.nsizes])) return -1;
    if (g_opt.sizes[g_opt.nsizes] > g_opt.max_size) g_opt.max_size = g_opt.sizes[g_opt.nsizes];
    g_opt.nsizes++;
  }
  return g_opt.nsizes ? 0 : -1;
}

static int parse_args(int argc, char **argv) {
  static const struct option opts[] = {
      {"plugin", 1, 0, O_PLUGIN}, {"net-version", 1, 0, O_NETVER}, {"dev", 1, 0, O_DEV},
      {"role", 1, 0, O_ROLE}, {"rendezvous", 1, 0, O_RDV}, {"conns", 1, 0, O_CONNS},
      {"inflight", 1, 0, O_INFLIGHT}, {"group", 1, 0, O_GROUP}, {"min-size", 1, 0, O_MIN},
      {"max-size", 1, 0, O_MAX}, {"duration", 1, 0, O_DURATION}, {"iters", 1, 0, O_ITERS},
      {"seed", 1, 0, O_SEED}, {"bidir", 0, 0, O_BIDIR}, {"threads", 0, 0, O_THREADS},
      {"timeout", 1, 0, O_TIMEOUT}, {"quiet", 0, 0, O_QUIET}, {"json", 0, 0, O_JSON},
      {"bad-handle", 0, 0, O_BADHANDLE}, {"wrong-token", 1, 0, O_WRONGTOKEN},
      {"keep-bytes", 1, 0, O_KEEP}, {"die-mid-message", 0, 0, O_DIE}, {"die-size", 1, 0, O_DIESIZE},
      {"die-after-ms", 1, 0, O_DIEAFTER}, {"die-bound", 1, 0, O_DIEBOUND},
      {"bad-bound", 1, 0, O_BADBOUND}, {"probe", 0, 0, O_PROBE}, {"no-recv-hint", 0, 0, O_NOHINT},
      {"rdv-timeout", 1, 0, O_RDVTIMEOUT}, {"max-call-ms", 1, 0, O_MAXCALL}, {"selftest-corrupt", 1, 0, O_SELFTEST},
      {"contexts", 1, 0, O_CONTEXTS}, {"accept-delay-ms", 1, 0, O_ACCEPTDELAY},
      {"close-delay-ms", 1, 0, O_CLOSEDELAY}, {"close-when-done", 0, 0, O_CLOSEDONE}, {"stall-report", 0, 0, O_STALL},
      {"timeline", 1, 0, O_TIMELINE}, {"no-peer-abort", 0, 0, O_NOPEERABORT},
      {"completion-log", 1, 0, O_CLOG}, {"no-flush", 0, 0, O_NOFLUSH},
      {"mem", 1, 0, O_MEM}, {"protect", 0, 0, O_PROTECT}, {"sizes", 1, 0, O_SIZES},
      {"scale-report", 0, 0, O_SCALE},
      {"setup-barrier", 0, 0, O_BARRIER},
      {"help", 0, 0, O_HELP},
      {0, 0, 0, 0}};
  int c, have_iters = 0;
  long v;
  char *end;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    const char *a = optarg;
    switch (c) {
    case O_PLUGIN: g_opt.plugin = a; break;
    case O_NETVER:
      if (parse_int(a, 0, 12, &v) || (v && v < 7)) goto bad;
      g_opt.net_version = (int)v;
      break;
    case O_DEV: if (parse_int(a, 0, 1 << 20, &v)) goto bad; g_opt.dev = (int)v; break;
    case O_ROLE:
      if (!strcmp(a, "server")) g_opt.role = H_SERVER;
      else if (!strcmp(a, "client")) g_opt.role = H_CLIENT;
      else goto bad;
      break;
    case O_RDV: g_opt.rdv = a; break;
    case O_CONNS: if (parse_int(a, 1, H_MAX_CONNS, &v)) goto bad; g_opt.conns = (int)v; break;
    case O_INFLIGHT: if (parse_int(a, 1, H_MAX_INFLIGHT, &v)) goto bad; g_opt.inflight = (int)v; break;
    case O_GROUP: if (parse_int(a, 1, H_MAX_GROUP, &v)) goto bad; g_opt.group = (int)v; break;
    case O_MIN: if (parse_size(a, &g_opt.min_size)) goto bad; break;
    case O_MAX: if (parse_size(a, &g_opt.max_size)) goto bad; break;
    case O_DURATION:
      g_opt.duration = strtod(a, &end);
      if (*end || g_opt.duration <= 0) goto bad;
      break;
    case O_ITERS:
      g_opt.iters = strtoull(a, &end, 0);
      if (*end || !g_opt.iters) goto bad;
      have_iters = 1;
      break;
    case O_SEED: g_opt.seed = strtoull(a, &end, 0); if (*end) goto bad; break;
    case O_BIDIR: g_opt.bidir = 1; break;
    case O_THREADS: g_opt.threads = 1; break;
    case O_TIMEOUT: g_opt.timeout = strtod(a, &end); if (*end || g_opt.timeout < 0) goto bad; break;
    case O_QUIET: g_opt.quiet = 1; break;
    case O_JSON: g_opt.json = 1; break;
    case O_BADHANDLE: g_opt.bad_handle = 1; break;
    case O_WRONGTOKEN:
      if (!strcmp(a, "token")) g_opt.wrong_token = H_WT_TOKEN;
      else if (!strcmp(a, "all-but-addr")) g_opt.wrong_token = H_WT_ALL_BUT_ADDR;
      else goto bad;
      break;
    case O_KEEP:
      if (strlen(a) >= sizeof g_opt.keep_bytes) goto bad;
      strcpy(g_opt.keep_bytes, a);
      break;
    case O_DIE: g_opt.die_mid = 1; break;
    case O_DIESIZE: if (parse_size(a, &g_opt.die_size) || !g_opt.die_size) goto bad; break;
    case O_DIEAFTER: if (parse_int(a, 0, 60000, &v)) goto bad; g_opt.die_after_ms = (int)v; break;
    case O_DIEBOUND: g_opt.die_bound = strtod(a, &end); if (*end || g_opt.die_bound <= 0) goto bad; break;
    case O_BADBOUND: g_opt.bad_bound = strtod(a, &end); if (*end || g_opt.bad_bound <= 0) goto bad; break;
    case O_PROBE: g_opt.probe = 1; break;
    case O_NOHINT: g_opt.recv_hint = 0; break;
    case O_RDVTIMEOUT: g_opt.rdv_timeout = strtod(a, &end); if (*end || g_opt.rdv_timeout <= 0) goto bad; break;
    case O_MAXCALL: if (parse_int(a, 1, 3600000, &v)) goto bad; g_opt.max_call_s = (double)v * 1e-3; break;
    case O_SELFTEST:
      g_opt.selftest_corrupt = (int64_t)strtoull(a, &end, 0);
      if (*end) goto bad;
      break;
    case O_CONTEXTS: if (parse_int(a, 1, H_MAX_CONTEXTS, &v)) goto bad; g_opt.contexts = (int)v; break;
    case O_ACCEPTDELAY: if (parse_int(a, 0, 600000, &v)) goto bad; g_opt.accept_delay_ms = (int)v; break;
    case O_CLOSEDELAY: if (parse_int(a, 0, 600000, &v)) goto bad; g_opt.close_delay_ms = (int)v; break;
    case O_CLOSEDONE: g_opt.close_when_done = 1; break;
    case O_NOFLUSH: g_opt.no_flush = 1; break;
    case O_MEM:
      if (!strcmp(a, "host")) g_opt.mem_type = HNET_PTR_HOST;
      else if (!strcmp(a, "cuda")) g_opt.mem_type = HNET_PTR_CUDA;
      else goto bad;
      break;
    case O_PROTECT: g_opt.protect = 1; break;
    case O_SIZES:
      if (parse_size_list(a)) goto bad;
      break;
    case O_STALL: g_opt.stall_report = 1; break;
    case O_SCALE: g_opt.scale_report = 1; break;
    case O_BARRIER: g_opt.setup_barrier = 1; break;
    case O_NOPEERABORT: g_opt.no_peer_abort = 1; break;
    case O_CLOG: if (!*a) goto bad; g_opt.completion_log = a; break;
    case O_TIMELINE: if (!*a) goto bad; g_opt.timeline = a; break;
    case O_HELP: usage(stdout); exit(0);
    default: usage(stderr); return -1;
    }
    continue;
  bad:
    fprintf(stderr, "rerail-harness: bad value '%s' for --%s\n", a, opts[c - O_PLUGIN].name);
    return -1;
  }
  if (optind < argc) {
    fprintf(stderr, "rerail-harness: unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  if (!have_iters) g_opt.iters = 256;
  if (g_opt.protect && g_opt.inflight != 1) {
    fprintf(stderr, "rerail-harness: --protect needs --inflight 1 (one buffer per connection, one op at a time)\n");
    return -1;
  }
  if (g_opt.min_size > g_opt.max_size) {
    fprintf(stderr, "rerail-harness: --min-size is larger than --max-size\n");
    return -1;
  }
  if (g_opt.max_size > (1ul << 30)) {
    fprintf(stderr, "rerail-harness: --max-size above 1G is not supported\n");
    return -1;
  }
  int modes = g_opt.probe + g_opt.bad_handle + (g_opt.wrong_token != 0) + g_opt.die_mid;
  if (modes > 1) {
    fprintf(stderr, "rerail-harness: --probe, --bad-handle, --wrong-token, --die-mid-message exclude each other\n");
    return -1;
  }
  if (g_opt.bidir && modes) {
    fprintf(stderr, "rerail-harness: --bidir is for traffic runs only\n");
    return -1;
  }
  if (g_opt.scale_report && (g_opt.bidir || g_opt.threads || modes)) {
    fprintf(stderr, "rerail-harness: --scale-report times one direction driven from one thread: "
                    "no --bidir, --threads or bad-input mode\n");
    return -1;
  }
  if (!g_opt.probe && !g_opt.bad_handle) {
    if (g_opt.role < 0 || !g_opt.rdv) {
      fprintf(stderr, "rerail-harness: --role and --rendezvous are required\n");
      usage(stderr);
      return -1;
    }
  }
  if (g_opt.role < 0) g_opt.role = H_CLIENT;
  return 0;
}

/* ---- traffic ------------------------------------------------------------ */

static void dump_all(void) {
  h_report_write_timeline();   /* what arrived until the hang */
  h_report_write_completions();
  for (int i = 0; i < g_nsend; i++) h_conn_dump(&g_send[i]);
  for (int i = 0; i < g_nrecv; i++) h_conn_dump(&g_recv[i]);
}

static void conn_start(h_conn *c) {
  c->deadline = h_now() + g_opt.duration;
}

int h_drive(h_conn **cs, int n) {
  h_report_start();
  for (int i = 0; i < n; i++) {
    conn_start(cs[i]);
    h_set_attrs(cs[i]->net, cs[i]->is_send, !cs[i]->is_send);
  }
  for (;;) {
    int active = 0, progress = 0;
    for (int i = 0; i < n; i++) {
      int r = h_conn_progress(cs[i]);
      if (r < 0) {
        atomic_store(&g_abort, 1);
        return -1;
      }
      active |= r > 0;
      progress |= r > 1;
    }
    if (!active) return 0;
    if (atomic_load(&g_abort)) return -1;
    if (!g_opt.no_peer_abort && h_peer_aborted()) {
      h_error("the %s reported a failure and aborted", h_role_name(1 - g_opt.role));
      return -1;
    }
    if (!progress) sched_yield();
  }
}

static void *conn_thread(void *arg) {
  h_conn *c = arg;
  int rc = h_connect_all(c->net, c->is_send ? c : NULL, c->is_send, c->is_send ? NULL : c, !c->is_send);
  if (!rc) rc = h_conn_register(c);
  if (!rc) {
    h_conn *one = c;
    rc = h_drive(&one, 1);
  }
  if (rc) atomic_store(&g_abort, 1);
  return (void *)(intptr_t)rc;
}

static int setup_conns(const h_params *params) {
  int N = g_opt.conns;
  int sends = g_opt.bidir || g_opt.role == H_CLIENT;
  int recvs = g_opt.bidir || g_opt.role == H_SERVER;
  g_nsend = sends ? N : 0;
  g_nrecv = recvs ? N : 0;
  h_report_receives = g_nrecv > 0;
  g_send = calloc((size_t)N, sizeof *g_send);
  g_recv = calloc((size_t)N, sizeof *g_recv);
  if (!g_send || !g_recv) return -1;
  /* data direction 0 = server->client, 1 = client->server */
  int send_dir = g_opt.role == H_SERVER ? 0 : 1, recv_dir = 1 - send_dir;
  for (int i = 0; i < g_nsend + g_nrecv; i++) {
    int is_send = i < g_nsend;
    h_conn *c = is_send ? &g_send[i] : &g_recv[i - g_nsend];
    c->idx = is_send ? i : i - g_nsend;
    c->is_send = is_send;
    c->net = &g_nets[c->idx % g_nctx];
    c->last = g_opt.duration > 0 ? UINT64_MAX : g_opt.iters - 1;
    h_sched_init(&c->sched, g_opt.seed, is_send ? send_dir : recv_dir, c->idx, g_group, g_opt.min_size,
                 g_opt.max_size, g_opt.duration > 0);
    c->sched.sizes = g_opt.sizes;
    c->sched.nsizes = g_opt.nsizes;
    if (h_conn_alloc(c)) return -1;
  }
  /* Listen first (one listen comm per connection, as NCCL does per peer and
   * channel) and publish every handle, then read the peer's. */
  h_watchdog_phase("listen");
  h_scale_before_listen();
  double t_listen = h_now();
  for (int i = 0; i < g_nrecv; i++) {
    h_conn *c = &g_recv[i];
    int rc = H_CALL(A_LISTEN, c->net->listen(c->net, g_opt.dev, c->handle, &c->listen));
    if (rc != HNET_SUCCESS || !c->listen) {
      h_error("listen() on device %d for connection %d returned %s%s", g_opt.dev, i, hnet_result_str(rc),
              rc == HNET_SUCCESS ? " and no listen comm" : "");
      return -1;
    }
    if (!g_opt.scale_report && h_rdv_put_handle(g_opt.role, i, c->handle, params)) return -1;
  }
  if (g_opt.scale_report && g_nrecv) {
    /* the listen phase alone is timed: the handle files come after it */
    h_scale_listened(h_now() - t_listen);
    for (int i = 0; i < g_nrecv; i++)
      if (h_rdv_put_handle(g_opt.role, i, g_recv[i].handle, params)) return -1;
  }
  if (g_nrecv && g_opt.accept_delay_ms) {
    h_watchdog_phase("--accept-delay-ms");
    struct timespec ts = {g_opt.accept_delay_ms / 1000, (long)(g_opt.accept_delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  h_watchdog_phase("reading the peer's handles");
  if (g_nsend && h_scale_wait_listened()) return -1;
  for (int i = 0; i < g_nsend; i++)
    if (h_rdv_get_handle(1 - g_opt.role, i, g_send[i].handle, params, g_opt.rdv_timeout)) return -1;
  if (g_nsend) h_scale_connecting();
  return 0;
}

static int run_traffic(void) {
  int rc = 0;
  if (g_opt.threads) {
    h_watchdog_phase("threads: connect, register, traffic");
    int nt = g_nsend + g_nrecv;
    pthread_t *t = calloc((size_t)nt, sizeof *t);
    for (int i = 0; i < nt; i++) {
      h_conn *c = i < g_nsend ? &g_send[i] : &g_recv[i - g_nsend];
      if (pthread_create(&t[i], NULL, conn_thread, c)) {
        h_error("pthread_create failed");
        nt = i;
        rc = -1;
        atomic_store(&g_abort, 1);
        break;
      }
    }
    for (int i = 0; i < nt; i++) {
      void *r;
      pthread_join(t[i], &r);
      if (r) rc = -1;
    }
    free(t);
    return rc;
  }
  h_watchdog_phase("connect/accept");
  if (h_connect_all(&g_net, g_send, g_nsend, g_recv, g_nrecv)) return -1;
  h_scale_connected();
  if (h_scale_setup_barrier()) return -1;
  h_watchdog_phase("regMr");
  for (int i = 0; i < g_nsend; i++)
    if (h_conn_register(&g_send[i])) return -1;
  for (int i = 0; i < g_nrecv; i++)
    if (h_conn_register(&g_recv[i])) return -1;
  h_info("%d send and %d receive connection(s) up; traffic starts", g_nsend, g_nrecv);
  h_watchdog_phase("traffic");
  h_conn **all = calloc((size_t)(g_nsend + g_nrecv), sizeof *all);
  for (int i = 0; i < g_nsend; i++) all[i] = &g_send[i];
  for (int i = 0; i < g_nrecv; i++) all[g_nsend + i] = &g_recv[i];
  rc = h_drive(all, g_nsend + g_nrecv);
  free(all);
  if (!rc) h_scale_after_traffic();
  return rc;
}

/* ---- summary ------------------------------------------------------------ */

static void dir_totals(h_conn *cs, int n, h_dir_stats *t) {
  memset(t, 0, sizeof *t);
  for (int i = 0; i < n; i++) {
    const h_dir_stats *s = &cs[i].st;
    t->msgs += s->msgs;
    t->bytes += s->bytes;
    t->ops += s->ops;
    if (s->t_first && (!t->t_first || s->t_first < t->t_first)) t->t_first = s->t_first;
    if (s->t_last > t->t_last) t->t_last = s->t_last;
  }
}

/* The counters as JSON members of "counters" (null when the plugin has
 * none) or as one text line: scripts assert on them, not on log text. */
static void print_counters(int json) {
  if (g_counters_len < 0) {
    printf(json ? "\"counters\":null," : "");
    return;
  }
  printf(json ? "\"counters\":{" : "  plugin counters:");
  int n = 0;
  for (const char *p = g_counters; *p;) {
    char name[96], v[32];
    int used = 0;
    /* A value is a count, or a time in seconds with a fraction (rerail/counters.h). */
    if (sscanf(p, "%95[a-z_{}=] %31[0-9.]\n%n", name, v, &used) != 2 || used <= 0) break;
    if (json) printf("%s\"%s\":%s", n ? "," : "", name, v);
    else printf(" %s %s", name, v);
    n++;
    p += used;
  }
  printf(json ? "}," : "\n");
}

static void print_summary(int pass) {
  h_dir_stats s, r;
  dir_totals(g_send, g_nsend, &s);
  dir_totals(g_recv, g_nrecv, &r);
  double ss = s.t_last > s.t_first ? s.t_last - s.t_first : 0;
  double rs = r.t_last > r.t_first ? r.t_last - r.t_first : 0;
  unsigned long long errors = (unsigned long long)atomic_load(&g_cnt.errors);
  if (g_opt.json) {
    printf("{\"role\":\"%s\",\"plugin\":\"%s\",\"path\":\"%s\",\"net_version\":%d,\"conns\":%d,"
           "\"group\":%d,\"inflight\":%d,\"bidir\":%d,\"threads\":%d,",
           h_role_name(g_opt.role), g_info.name, g_info.path, g_info.version, g_opt.conns,
           g_group, g_opt.inflight, g_opt.bidir, g_opt.threads);
    printf("\"send\":{\"ops\":%llu,\"msgs\":%llu,\"bytes\":%llu,\"seconds\":%.6f,\"gbps\":%.4f},",
           (unsigned long long)s.ops, (unsigned long long)s.msgs, (unsigned long long)s.bytes, ss,
           ss > 0 ? (double)s.bytes / ss * 1e-9 : 0.0);
    printf("\"recv\":{\"ops\":%llu,\"msgs\":%llu,\"bytes\":%llu,\"seconds\":%.6f,\"gbps\":%.4f},",
           (unsigned long long)r.ops, (unsigned long long)r.msgs, (unsigned long long)r.bytes, rs,
           rs > 0 ? (double)r.bytes / rs * 1e-9 : 0.0);
    printf("\"null_isend\":%llu,\"null_irecv\":%llu,\"null_connect\":%llu,\"null_accept\":%llu,"
           "\"recv_hints\":%llu,\"flush_requests\":%llu,\"max_call_ms\":{",
           (unsigned long long)g_cnt.null_isend, (unsigned long long)g_cnt.null_irecv,
           (unsigned long long)g_cnt.null_connect, (unsigned long long)g_cnt.null_accept,
           (unsigned long long)g_cnt.hints, (unsigned long long)g_cnt.flush_reqs);
    for (int a = 0; a < A_NAPI; a++)
      printf("%s\"%s\":%.3f", a ? "," : "", h_api_names[a], (double)atomic_load(&g_cnt.max_ns[a]) * 1e-6);
    printf("},\"calls_over_10ms\":{");
    for (int a = 0; a < A_NAPI; a++)
      printf("%s\"%s\":%llu", a ? "," : "", h_api_names[a], (unsigned long long)atomic_load(&g_cnt.slow[a][1]));
    printf("},");
    h_report_print_json(g_recv, g_nrecv);
    h_scale_print(1);
    print_counters(1);
    printf("\"plugin_warnings\":%lu,\"teardown_warnings\":%lu,\"errors\":%llu,\"result\":\"%s\"}\n",
           hnet_log_count(2), g_teardown_warnings, errors,
           pass ? "pass" : "fail");
    return;
  }
  printf("rerail-harness %s: plugin %s (%s) net v%d, %d conn(s), group %d, inflight %d%s%s\n",
         h_role_name(g_opt.role), g_info.name, g_info.path, g_info.version, g_opt.conns,
         g_group, g_opt.inflight, g_opt.bidir ? ", bidir" : "", g_opt.threads ? ", threads" : "");
  if (g_nsend)
    printf("  sent:     %llu ops, %llu msgs, %llu bytes in %.3f s = %.3f GB/s\n", (unsigned long long)s.ops,
           (unsigned long long)s.msgs, (unsigned long long)s.bytes, ss,
           ss > 0 ? (double)s.bytes / ss * 1e-9 : 0.0);
  if (g_nrecv)
    printf("  received: %llu ops, %llu msgs, %llu bytes in %.3f s = %.3f GB/s (every byte checked)\n",
           (unsigned long long)r.ops, (unsigned long long)r.msgs, (unsigned long long)r.bytes, rs,
           rs > 0 ? (double)r.bytes / rs * 1e-9 : 0.0);
  printf("  NULL requests: isend %llu, irecv %llu; NULL comms: connect %llu, accept %llu; "
         "recv hints %llu; flush requests %llu\n",
         (unsigned long long)g_cnt.null_isend, (unsigned long long)g_cnt.null_irecv,
         (unsigned long long)g_cnt.null_connect, (unsigned long long)g_cnt.null_accept,
         (unsigned long long)g_cnt.hints, (unsigned long long)g_cnt.flush_reqs);
  printf("  longest single call (ms):");
  for (int a = 0; a < A_NAPI; a++)
    if (atomic_load(&g_cnt.calls[a]))
      printf(" %s %.3f", h_api_names[a], (double)atomic_load(&g_cnt.max_ns[a]) * 1e-6);
  printf("\n  slow calls (>1 ms / >10 ms / >100 ms):");
  int any = 0;
  for (int a = 0; a < A_NAPI; a++)
    if (atomic_load(&g_cnt.slow[a][0])) {
      any = 1;
      printf(" %s %llu/%llu/%llu of %llu", h_api_names[a], (unsigned long long)atomic_load(&g_cnt.slow[a][0]),
             (unsigned long long)atomic_load(&g_cnt.slow[a][1]), (unsigned long long)atomic_load(&g_cnt.slow[a][2]),
             (unsigned long long)atomic_load(&g_cnt.calls[a]));
    }
  printf("%s", any ? "" : " none");
  printf("\n");
  h_report_print_text(g_recv, g_nrecv);
  h_scale_print(0);
  print_counters(0);
  printf("  plugin warnings: %lu (%lu during the orderly teardown); errors: %llu; result: %s\n",
         hnet_log_count(2), g_teardown_warnings, errors,
         pass ? "PASS" : "FAIL");
}

/* ---- main --------------------------------------------------------------- */

static void finish_plugin(void) {
  if (g_net.dl) {
    snprintf(g_info.name, sizeof g_info.name, "%s", g_net.name ? g_net.name : "?");
    snprintf(g_info.path, sizeof g_info.path, "%s", g_net.path);
    g_info.version = g_net.version;
  }
  for (int i = 0; i < g_nctx && g_counters_len < 0; i++)
    if (g_nets[i].dl) g_counters_len = hnet_plugin_counters(&g_nets[i], g_counters, sizeof g_counters);
  /* NCCL finalizes each communicator's context, then dlclose()s the library
   * with the last one */
  for (int i = g_nctx - 1; i >= 0; i--) {
    if (!g_nets[i].dl) continue;
    if (g_nets[i].finalize) {
      int rc = g_nets[i].finalize(&g_nets[i]);
      if (rc != HNET_SUCCESS) h_error("finalize() of context %d returned %s", i, hnet_result_str(rc));
    }
    hnet_unload(&g_nets[i]);
  }
}

static void release_all(void) {
  for (int i = 0; i < g_nsend; i++) h_conn_release(&g_send[i]);
  for (int i = 0; i < g_nrecv; i++) h_conn_release(&g_recv[i]);
}

static int traffic_mode(void) {
  h_params params;
  h_params_from_opts(&params, g_group);
  h_rdv_clean(g_opt.role);
  h_watchdog_set_dump(dump_all);
  int rc = setup_conns(&params);
  if (!rc) rc = run_traffic();
  if (rc) {
    atomic_store(&g_abort, 1);
    h_rdv_put_flag(g_opt.role, "abort", "failure");
  }

  /* from here on the peer may close: warnings are teardown warnings */
  unsigned long warn_before_teardown = hnet_log_count(2);
  if (!rc) h_rdv_put_flag(g_opt.role, "sched-done", NULL);
  if (!rc && !g_opt.close_when_done) {
    /* Both ends close only after both are done (ncclCommFinalize-like).
     * --close-when-done skips the wait, as a rank destroying its
     * communicator after its last collective does: the peer may still test
     * its last sends (or not have posted its last receives) when we close. */
    h_watchdog_phase("end barrier");
    int w = h_rdv_wait_flag(1 - g_opt.role, "sched-done", g_opt.timeout);
    if (w) {
      h_error(w == -2 ? "the %s aborted" : "the %s never finished its schedule", h_role_name(1 - g_opt.role));
      rc = -1;
    }
  }
  if (!rc && g_opt.close_delay_ms) {
    h_watchdog_phase("--close-delay-ms");
    struct timespec ts = {g_opt.close_delay_ms / 1000, (long)(g_opt.close_delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  int die_verdict = 0;
  if (!rc && g_opt.die_mid) {
    if (g_opt.role == H_CLIENT) h_die_sender(&g_send[0]);   /* exits */
    die_verdict = h_die_receiver(&g_recv[0]);
  }
  h_watchdog_phase("deregMr and close");
  release_all();
  if (!rc && !g_opt.die_mid) {
    h_rdv_put_flag(g_opt.role, "closed", NULL);
    h_watchdog_phase("waiting for the peer to close");
    h_rdv_wait_flag(1 - g_opt.role, "closed", 10);
  }
  h_watchdog_phase("finalize");
  finish_plugin();
  g_teardown_warnings = rc || g_opt.die_mid ? 0 : hnet_log_count(2) - warn_before_teardown;
  h_report_write_timeline();   /* also after a failure: it shows when traffic stopped */
  h_report_write_completions();
  int pass = !rc && !die_verdict && atomic_load(&g_cnt.errors) == 0;
  print_summary(pass);
  return pass ? H_EXIT_OK : H_EXIT_FAIL;
}

static int probe_devices(int *ndev, hnet_props *props0) {
  int rc = g_net.devices(&g_net, ndev);
  if (rc != HNET_SUCCESS) {
    h_error("devices() returned %s", hnet_result_str(rc));
    return -1;
  }
  /* NCCL reads the properties of every device while it builds its topology */
  for (int d = 0; d < *ndev; d++) {
    hnet_props p;
    rc = g_net.get_properties(&g_net, d, &p);
    if (rc != HNET_SUCCESS) {
      h_error("getProperties(%d) returned %s", d, hnet_result_str(rc));
      return -1;
    }
    if (d == g_opt.dev) *props0 = p;
    if (g_opt.probe || !g_opt.quiet)
      printf("device %d: name %s pci %s guid 0x%llx ptrSupport 0x%x speed %d Mb/s port %d latency %.1f "
             "maxComms %d maxRecvs %d regIsGlobal %d forceFlush %d maxP2pBytes %zu\n",
             d, p.name, p.pci_path[0] ? p.pci_path : "-", (unsigned long long)p.guid, p.ptr_support,
             p.speed_mbps, p.port, p.latency, p.max_comms, p.max_recvs, p.reg_is_global, p.force_flush,
             p.max_p2p_bytes);
  }
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (parse_args(argc, argv)) return H_EXIT_USAGE;
  h_report_init();
  h_watchdog_start(g_opt.timeout);
  h_watchdog_phase("load and init");
  if (hnet_load(g_opt.plugin, g_opt.net_version, &g_net)) {
    if (g_opt.rdv && g_opt.role >= 0) h_rdv_put_flag(g_opt.role, "abort", "load failed");
    return H_EXIT_USAGE;
  }
  h_info("bound %s from %s (loaded at 0x%lx) as net v%d", g_net.name ? g_net.name : "?", g_net.path,
         (unsigned long)g_net.base, g_net.version);
  /* more communicators: v11+ init() again for a context each */
  for (int i = 1; i < g_opt.contexts; i++) {
    if (hnet_load(g_net.path, g_net.version, &g_nets[i])) {
      h_error("init() of context %d failed", i);
      g_nctx = i;
      finish_plugin();
      return H_EXIT_FAIL;
    }
    g_nctx = i + 1;
  }
  if (g_nctx > 1)
    h_info("%d contexts%s", g_nctx, g_net.version < 11 ? " (net v7-v10: one process-wide init, no contexts)" : "");
  int ndev = 0;
  hnet_props props;
  memset(&props, 0, sizeof props);
  if (probe_devices(&ndev, &props)) {
    finish_plugin();
    return H_EXIT_FAIL;
  }
  if (g_opt.probe) {
    char w[512];
    hnet_last_warning(w, sizeof w);
    printf("devices: %d\nplugin warnings: %lu%s%s\n", ndev, hnet_log_count(2), w[0] ? "; last: " : "", w);
    finish_plugin();
    print_counters(0);
    return H_EXIT_OK;
  }
  if (g_opt.dev >= ndev) {
    h_error("device %d does not exist: the plugin reports %d device(s)", g_opt.dev, ndev);
    if (g_opt.rdv) h_rdv_put_flag(g_opt.role, "abort", "no device");
    finish_plugin();
    return H_EXIT_USAGE;
  }
  int maxr = props.max_recvs < 1 ? 1 : props.max_recvs;
  if (g_opt.group > maxr) {
    h_error("--group %d exceeds the device's maxRecvs %d (NCCL never groups more)", g_opt.group, maxr);
    finish_plugin();
    return H_EXIT_USAGE;
  }
  g_group = g_opt.group ? g_opt.group : (maxr > H_MAX_GROUP ? H_MAX_GROUP : maxr);

  int code;
  if (g_opt.bad_handle) {
    code = h_mode_bad_handle(&g_net);
    finish_plugin();
  } else if (g_opt.wrong_token) {
    code = h_mode_wrong_token(&g_net);
    finish_plugin();
  } else {
    code = traffic_mode();
  }
  fflush(stdout);
  return code;
}
