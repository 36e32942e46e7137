/* rerail-net-bench: bandwidth and latency of ANY ncclNet plugin, driven the
 * way NCCL's proxy drives it, between two processes.
 *
 * The plugin is loaded through the harness loader (test/harness/net_api.h) by
 * NCCL's naming rules (--plugin rerail -> libnccl-net-rerail.so, or a path),
 * binding the newest ncclNetPlugin_vN it exports or --net-version N;
 * "--plugin nccl-socket" ("nccl-ib") measures NCCL's own socket (IB)
 * transport through the same driver (test/harness/nccl_builtin_loader.c).
 * Rank 0 ("A") sends and prints; rank 1 ("B") receives. --fork (the default) runs
 * both ranks from one command and exchanges handles over a socketpair;
 * --rank 0|1 --oob-dir DIR runs them as two commands (two hosts with a shared
 * directory work too) and exchanges handles through files in DIR.
 *
 * Tests:
 *  bw     uni-directional A->B bandwidth by message size: buffers registered
 *         once with regMr, up to --depth (8, NCCL's proxy depth) requests in
 *         flight, B keeps irecvs posted ahead, both test in posting order.
 *         --send-lat also times each send of the timed runs from isend()'s
 *         return to the test() that says done (tested in posting order, as
 *         NCCL's proxy does): how long the sender's buffer stays the
 *         plugin's with the window full, where a receiver's acknowledgement
 *         on the path shows.
 *  lat    8-byte round trip on two connections (A->B, B->A); each side posts
 *         the receive for iteration i+1 before sending iteration i, as NCCL
 *         keeps receives posted ahead. Median and p99.
 *  multi  C connections (8) at once, 1 MiB messages, one thread progressing
 *         them all like NCCL's proxy thread: aggregate GB/s.
 *
 * Every message carries its sequence number in its first and last 8 bytes
 * (checked as it completes), the size test() reports is checked, and the
 * whole payload of the first and last message of every size and connection is
 * compared by checksum after the timed run: a broken plugin cannot look fast.
 * Timing is on A: from the first post to B's out-of-band "all received".
 * GB/s is 1e9 bytes/s. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "bench_oob.h"
#include "net_api.h"

#define MAX_DEPTH 32   /* NCCL_NET_MAX_REQUESTS */
#define MAX_CONNS 64
#define TAG_BASE 0     /* NCCL tags a message with the sender's rank */

typedef struct options {
  const char *plugin;
  int net_version;
  int dev;
  bc_sizes sizes;
  int depth;
  size_t bytes;
  long min_msgs, max_msgs;
  long lat_iters, lat_warmup;
  int conns;
  int reps;            /* timed runs per bandwidth figure; the best counts */
  size_t multi_size, multi_bytes;
  bool do_bw, do_lat, do_multi;
  bool send_lat;       /* --send-lat: time isend to test()=done in the bw runs */
  int send_depth;      /* --send-depth: sends in flight, at most depth (receives stay depth ahead) */
  bool csv, json;
  int rank;            /* -1: --fork */
  const char *oob_dir;
  double timeout_s;
} options;

static options g_opt;
static pid_t g_child = -1;

/* ---- plugin calls ---- */
static hnet g_net;
static struct { char name[64], path[512]; int version; } g_loaded; /* kept past hnet_unload() */

#define NCALL(what, call)                                                                  \
  do {                                                                                     \
    int rc_ = (call);                                                                      \
    if (rc_ != HNET_SUCCESS) bc_die("%s failed: %s (%d)", what, hnet_result_str(rc_), rc_); \
  } while (0)

typedef struct deadline {
  uint64_t t;
  unsigned spins;
} deadline;

static deadline deadline_in(void) { return (deadline){bc_now_ns() + (uint64_t)(g_opt.timeout_s * 1e9), 0}; }

static bool expired(deadline *d) {
  if (++d->spins & 1023) return false;
  return bc_now_ns() > d->t;
}

/* Opens `count` connections from A to B (dir 0) or B to A (dir 1). */
static void open_conns(int dir, int count, void **comms) {
  bool i_recv = (g_oob.rank == 1) == (dir == 0);
  char handles[MAX_CONNS][HNET_HANDLE_SIZE];
  void *listens[MAX_CONNS];
  memset(comms, 0, sizeof(void *) * (size_t)count);
  if (i_recv) {
    memset(handles, 0, sizeof(handles));
    for (int i = 0; i < count; i++) NCALL("listen", g_net.listen(&g_net, g_opt.dev, handles[i], &listens[i]));
    oob_send(handles, (size_t)count * HNET_HANDLE_SIZE);
  } else {
    oob_recv(handles, (size_t)count * HNET_HANDLE_SIZE);
  }
  deadline d = deadline_in();
  for (int left = count; left;) {
    for (int i = 0; i < count; i++) {
      if (comms[i]) continue;
      if (i_recv) NCALL("accept", g_net.accept(&g_net, listens[i], &comms[i]));
      else NCALL("connect", g_net.connect(&g_net, g_opt.dev, handles[i], &comms[i]));
      if (comms[i]) left--;
    }
    if (left && expired(&d))
      bc_die("%s: %d of %d connections not established after %.0f s", i_recv ? "accept" : "connect", left, count,
             g_opt.timeout_s);
  }
  if (i_recv)
    for (int i = 0; i < count; i++) NCALL("closeListen", g_net.close_listen(&g_net, listens[i]));
  oob_barrier();
}

/* NCCL's threads yield the CPU when they spin without progress ("let others
 * run"; its wait loops after 5 us). The benchmark's progress loops yield
 * after 20 us of fruitless spinning, so a plugin is measured as NCCL drives
 * it also on a machine with more busy threads than cores, while a short
 * wait (a round trip) is still pure polling. A pass that progressed resets
 * the streak through progress_made(). */
static uint64_t g_idle_since;
static bool g_yielding; /* the streak is past 20 us: no clock to read until it ends */
static void progress_made(void) { g_idle_since = 0, g_yielding = false; }
static void idle_yield(void) {
  /* Once yielding, the clock is not read again: where it is not in the vDSO
   * (a virtual machine's HPET) every read is a system call, and the
   * benchmark's own spinning must not cost more than NCCL's. */
  if (g_yielding) {
    sched_yield();
    return;
  }
  uint64_t now = bc_now_ns();
  if (!g_idle_since) g_idle_since = now;
  else if (now - g_idle_since > 20000) g_yielding = true, sched_yield();
}

/* ---- streaming engine (bw and multi) ---- */
typedef struct xconn {
  void *comm;
  void *mh;
  char *base;        /* depth slots of stride bytes (+1 slot on the receiver for message 0) */
  size_t stride;
  int idx;
  uint64_t posted, done;
  void *req[MAX_DEPTH];
  uint64_t post_ns[MAX_DEPTH]; /* --send-lat: when the slot's isend returned */
  uint64_t errors;   /* stamp or size mismatches */
  char first_err[160];
} xconn;

typedef struct verdict {
  uint64_t errors;      /* all connections: stamps, sizes, checksums */
  char first_err[160];
} verdict;

static uint64_t pattern_seed(int conn, int slot, size_t size) {
  return ((uint64_t)(conn + 1) << 48) ^ ((uint64_t)(slot + 1) << 40) ^ (uint64_t)size;
}

static char *recv_buf(xconn *c, uint64_t msg, int depth) {
  return c->base + (msg == 0 ? (size_t)depth : (size_t)(msg % (uint64_t)depth)) * c->stride;
}

static void xconn_alloc(xconn *c, void *comm, int idx, size_t stride, int depth, bool receiver) {
  memset(c, 0, sizeof(*c));
  c->comm = comm;
  c->idx = idx;
  c->stride = stride;
  size_t len = stride * (size_t)(depth + (receiver ? 1 : 0));
  c->base = bc_alloc(len);
  if (!c->base) bc_die("out of memory (%zu bytes)", len);
  NCALL("regMr", g_net.reg_mr(&g_net, c->comm, c->base, len, HNET_PTR_HOST, &c->mh));
}

static void xconn_free(xconn *c) {
  NCALL("deregMr", g_net.dereg_mr(&g_net, c->comm, c->mh));
  bc_free(c->base);
}

static void note_err(xconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_err(xconn *c, const char *fmt, ...) {
  if (c->errors++) return;
  va_list ap;
  int n = snprintf(c->first_err, sizeof(c->first_err), "conn %d: ", c->idx);
  va_start(ap, fmt);
  vsnprintf(c->first_err + n, sizeof(c->first_err) - (size_t)n, fmt, ap);
  va_end(ap);
}

static void send_prepare(xconn *cs, int nc, size_t size, int depth) {
  for (int i = 0; i < nc; i++)
    for (int s = 0; s < depth; s++) bc_fill_pattern(cs[i].base + (size_t)s * cs[i].stride, size, pattern_seed(cs[i].idx, s, size));
}

/* --send-lat: the send completion times (us) of the timed runs of one size. */
static struct {
  bool on;             /* this run is timed: record */
  double *v;
  size_t n, cap;
} g_slat;

/* A: sends msgs messages of size on every connection; returns when all are
 * tested done. */
static void send_run(xconn *cs, int nc, size_t size, uint64_t msgs, int depth) {
  for (int i = 0; i < nc; i++) cs[i].posted = cs[i].done = 0;
  int live = nc;
  deadline d = deadline_in();
  size_t sizes[HNET_TEST_SIZES];
  while (live) {
    int progressed = 0;
    for (int i = 0; i < nc; i++) {
      xconn *c = &cs[i];
      if (c->done == msgs) continue;
      while (c->posted < msgs && c->posted - c->done < (uint64_t)depth &&
             (!g_opt.send_depth || c->posted - c->done < (uint64_t)g_opt.send_depth)) {
        int slot = (int)(c->posted % (uint64_t)depth);
        char *buf = c->base + (size_t)slot * c->stride;
        bc_stamp(buf, size, c->posted);
        /* NCCL leaves the previous (stale) request pointer in the slot */
        NCALL("isend", g_net.isend(&g_net, c->comm, buf, size, TAG_BASE, c->mh, &c->req[slot]));
        if (!c->req[slot]) break; /* not now: retry on the next pass */
        if (g_slat.on) c->post_ns[slot] = bc_now_ns();
        c->posted++;
        progressed = 1;
      }
      while (c->done < c->posted) {
        int flag = 0;
        NCALL("test(isend)", g_net.test(&g_net, c->req[c->done % (uint64_t)depth], &flag, sizes));
        if (!flag) break;
        if (g_slat.on && g_slat.n < g_slat.cap)
          g_slat.v[g_slat.n++] = (double)(bc_now_ns() - c->post_ns[c->done % (uint64_t)depth]) / 1e3;
        d = deadline_in(); /* progress: restart the clock */
        progressed = 1;
        if (++c->done == msgs) live--;
      }
    }
    if (!progressed) idle_yield();
    else progress_made();
    if (live && expired(&d)) {
      for (int i = 0; i < nc; i++)
        if (cs[i].done < msgs)
          bc_die("send: connection %d, size %zu: %llu of %llu messages done (%llu posted), no progress for %.0f s", i, size,
                 (unsigned long long)cs[i].done, (unsigned long long)msgs, (unsigned long long)cs[i].posted,
                 g_opt.timeout_s);
    }
  }
}

static void recv_post(xconn *c, size_t size, uint64_t msgs, int depth) {
  while (c->posted < msgs && c->posted - c->done < (uint64_t)depth) {
    int slot = (int)(c->posted % (uint64_t)depth);
    void *data = recv_buf(c, c->posted, depth);
    size_t sz = size;
    int tag = TAG_BASE;
    c->req[slot] = NULL;
    NCALL("irecv", g_net.irecv(&g_net, c->comm, 1, &data, &sz, &tag, &c->mh, &c->req[slot]));
    if (!c->req[slot]) break;
    c->posted++;
  }
}

/* B: posts receives ahead, signals ready, receives everything, signals done. */
static void recv_run(xconn *cs, int nc, size_t size, uint64_t msgs, int depth) {
  for (int i = 0; i < nc; i++) {
    cs[i].posted = cs[i].done = 0;
    memset(recv_buf(&cs[i], 0, depth), 0xa5, size); /* the warmup left the same message 0 there */
    recv_post(&cs[i], size, msgs, depth);
  }
  uint32_t ready = 1;
  oob_send(&ready, sizeof(ready));
  int live = nc;
  deadline d = deadline_in();
  size_t sizes[HNET_TEST_SIZES];
  while (live) {
    int progressed = 0;
    for (int i = 0; i < nc; i++) {
      xconn *c = &cs[i];
      if (c->done == msgs) continue;
      while (c->done < c->posted) {
        int slot = (int)(c->done % (uint64_t)depth);
        int flag = 0;
        sizes[0] = (size_t)-1;
        NCALL("test(irecv)", g_net.test(&g_net, c->req[slot], &flag, sizes));
        if (!flag) break;
        char *buf = recv_buf(c, c->done, depth);
        if (sizes[0] != size)
          note_err(c, "msg %llu: test() reported %zu bytes, %zu were sent", (unsigned long long)c->done, sizes[0], size);
        else if (!bc_stamp_ok(buf, size, c->done))
          note_err(c, "msg %llu of %zu bytes: wrong sequence stamp (stale, misplaced or reordered data)",
                   (unsigned long long)c->done, size);
        if (g_net.irecv_consumed) NCALL("irecvConsumed", g_net.irecv_consumed(&g_net, c->comm, 1, c->req[slot]));
        d = deadline_in();
        progressed = 1;
        if (++c->done == msgs) live--;
      }
      recv_post(c, size, msgs, depth);
    }
    if (!progressed) idle_yield();
    else progress_made();
    if (live && expired(&d)) {
      for (int i = 0; i < nc; i++)
        if (cs[i].done < msgs)
          bc_die("recv: connection %d, size %zu: %llu of %llu messages received (%llu posted), no progress for %.0f s", i, size,
                 (unsigned long long)cs[i].done, (unsigned long long)msgs, (unsigned long long)cs[i].posted,
                 g_opt.timeout_s);
    }
  }
  uint32_t done = 2;
  oob_send(&done, sizeof(done));
}

/* B, after the timed run: whole-payload checksums of the first and last message. */
static verdict recv_verify(xconn *cs, int nc, size_t size, uint64_t msgs, int depth, char *scratch) {
  verdict v = {0};
  for (int i = 0; i < nc; i++) {
    xconn *c = &cs[i];
    uint64_t check[2] = {0, msgs - 1};
    for (int k = 0; k < (msgs > 1 ? 2 : 1); k++) {
      uint64_t m = check[k];
      bc_fill_pattern(scratch, size, pattern_seed(c->idx, (int)(m % (uint64_t)depth), size));
      bc_stamp(scratch, size, m);
      const char *got = recv_buf(c, m, depth);
      if (bc_checksum(got, size) != bc_checksum(scratch, size)) {
        size_t off = bc_first_diff(got, scratch, size);
        note_err(c, "msg %llu: payload checksum mismatch, first bad byte at offset %zu of %zu",
                 (unsigned long long)m, off, size);
      }
    }
    if (c->errors && !v.errors) snprintf(v.first_err, sizeof(v.first_err), "%s", c->first_err);
    v.errors += c->errors;
    c->errors = 0;
  }
  return v;
}

/* One measured (or warmup) run on both sides. Returns GB/s on A, 0 on B. */
static double stream_run(xconn *cs, int nc, size_t size, uint64_t msgs, int depth, char *scratch, const char *what) {
  double gbps = 0;
  verdict v;
  if (g_oob.rank == 0) {
    uint32_t ready, done;
    oob_recv(&ready, sizeof(ready));
    uint64_t t0 = bc_now_ns();
    send_run(cs, nc, size, msgs, depth);
    oob_recv(&done, sizeof(done));
    uint64_t t1 = bc_now_ns();
    gbps = (double)size * (double)msgs * nc / (double)(t1 - t0);
    oob_recv(&v, sizeof(v));
    if (v.errors) {
      char szb[32];
      bc_die("%s %s: DATA CORRUPTION: %llu bad messages; first: %s", what, bc_fmt_size(size, szb, sizeof(szb)),
             (unsigned long long)v.errors, v.first_err);
    }
  } else {
    recv_run(cs, nc, size, msgs, depth);
    v = recv_verify(cs, nc, size, msgs, depth, scratch);
    oob_send(&v, sizeof(v));
  }
  return gbps;
}

static uint64_t msgs_for(size_t bytes, size_t size, int nc) {
  uint64_t m = (uint64_t)(bytes / (size * (size_t)nc));
  if (m < (uint64_t)g_opt.min_msgs) m = (uint64_t)g_opt.min_msgs;
  if (m > (uint64_t)g_opt.max_msgs) m = (uint64_t)g_opt.max_msgs;
  return m;
}

typedef struct bw_row {
  size_t size;
  double gbps;
  uint64_t msgs;
  bool slat_ok;                   /* --send-lat: isend to test()=done, us, all timed runs */
  double slat_p50, slat_p99, slat_min, slat_mean;
} bw_row;

/* bw (nc = 1, the size sweep) and multi (nc = conns, one size). */
static int streams_test(int nc, const size_t *szs, int nsz, size_t bytes, bw_row *rows, const char *what) {
  void *comms[MAX_CONNS];
  xconn cs[MAX_CONNS];
  size_t max_size = 0;
  for (int z = 0; z < nsz; z++)
    if (szs[z] > max_size) max_size = szs[z];
  open_conns(0, nc, comms);
  bool recv_side = g_oob.rank == 1;
  for (int i = 0; i < nc; i++) xconn_alloc(&cs[i], comms[i], i, max_size, g_opt.depth, recv_side);
  char *scratch = recv_side ? bc_alloc(max_size) : NULL;
  if (recv_side && !scratch) bc_die("out of memory");
  for (int z = 0; z < nsz; z++) {
    size_t size = szs[z];
    uint64_t m = msgs_for(bytes, size, nc);
    uint64_t warm = m / 8;
    if (warm < 2) warm = 2;
    if (!recv_side) send_prepare(cs, nc, size, g_opt.depth);
    oob_barrier();
    stream_run(cs, nc, size, warm, g_opt.depth, scratch, what);
    double g = 0;
    if (g_opt.send_lat && !recv_side) {
      g_slat.cap = (size_t)m * (size_t)nc * (size_t)g_opt.reps;
      g_slat.n = 0;
      if (!(g_slat.v = malloc(g_slat.cap * sizeof *g_slat.v))) bc_die("out of memory");
      g_slat.on = true;
    }
    for (int rep = 0; rep < g_opt.reps; rep++) {
      double x = stream_run(cs, nc, size, m, g_opt.depth, scratch, what);
      if (x > g) g = x;
    }
    rows[z] = (bw_row){.size = size, .gbps = g, .msgs = m};
    if (g_slat.on) {
      g_slat.on = false;
      if (g_slat.n) {
        double sum = 0;
        for (size_t i = 0; i < g_slat.n; i++) sum += g_slat.v[i];
        bc_sort_doubles(g_slat.v, g_slat.n);
        rows[z].slat_ok = true;
        rows[z].slat_p50 = bc_percentile_sorted(g_slat.v, g_slat.n, 50);
        rows[z].slat_p99 = bc_percentile_sorted(g_slat.v, g_slat.n, 99);
        rows[z].slat_min = g_slat.v[0];
        rows[z].slat_mean = sum / (double)g_slat.n;
      }
      free(g_slat.v);
      g_slat.v = NULL;
    }
    if (!recv_side && !g_opt.csv && !g_opt.json) {
      char szb[32];
      fprintf(stderr, "  %s %d conn(s) size %-8s %8.3f GB/s (%llu msgs)\n", what, nc,
              bc_fmt_size(size, szb, sizeof(szb)), g, (unsigned long long)m);
    }
  }
  oob_barrier();
  for (int i = 0; i < nc; i++) {
    xconn_free(&cs[i]);
    if (recv_side) NCALL("closeRecv", g_net.close_recv(&g_net, cs[i].comm));
    else NCALL("closeSend", g_net.close_send(&g_net, cs[i].comm));
  }
  bc_free(scratch);
  oob_barrier();
  return 0;
}

/* ---- latency ---- */
typedef struct lat_res {
  double p50, p99, min, mean;
  int ok;
} lat_res;

#define LAT_BYTES 8
#define LAT_SLOT 64
/* NCCL's proxy keeps receives posted several steps ahead (up to
 * NCCL_STEPS = 8): a plugin's clear-to-send or credit for the next message
 * travels while the current one is in flight. The ping-pong does the same
 * with LAT_AHEAD receives outstanding per side. */
#define LAT_AHEAD 3
#define LAT_RING (LAT_AHEAD + 1)

static void wait_req(void *req, const char *what, uint64_t iter) {
  deadline d = deadline_in();
  size_t sizes[HNET_TEST_SIZES];
  int flag = 0;
  while (!flag) {
    NCALL(what, g_net.test(&g_net, req, &flag, sizes));
    if (!flag && expired(&d)) bc_die("latency: %s of iteration %llu not done after %.0f s", what, (unsigned long long)iter, g_opt.timeout_s);
  }
}

static lat_res lat_test(void) {
  lat_res res = {0};
  void *ab, *ba; /* A->B and B->A */
  open_conns(0, 1, &ab);
  open_conns(1, 1, &ba);
  bool a = g_oob.rank == 0;
  void *scomm = a ? ab : ba, *rcomm = a ? ba : ab;
  char *sbuf = bc_alloc(LAT_RING * LAT_SLOT), *rbuf = bc_alloc(LAT_RING * LAT_SLOT);
  void *smh, *rmh;
  if (!sbuf || !rbuf) bc_die("out of memory");
  NCALL("regMr", g_net.reg_mr(&g_net, scomm, sbuf, LAT_RING * LAT_SLOT, HNET_PTR_HOST, &smh));
  NCALL("regMr", g_net.reg_mr(&g_net, rcomm, rbuf, LAT_RING * LAT_SLOT, HNET_PTR_HOST, &rmh));
  uint64_t total = (uint64_t)(g_opt.lat_warmup + g_opt.lat_iters);
  double *v = a ? malloc(sizeof(double) * (size_t)g_opt.lat_iters) : NULL;
  if (a && !v) bc_die("out of memory");
  void *rreq[LAT_RING] = {NULL}, *sreq = NULL;
  size_t sizes[HNET_TEST_SIZES], ssizes[HNET_TEST_SIZES];
  uint64_t bad = 0;

#define POST_RECV(i)                                                                             \
  do {                                                                                           \
    void *data_ = rbuf + ((i) % LAT_RING) * LAT_SLOT;                                                   \
    size_t sz_ = LAT_BYTES;                                                                      \
    int tag_ = TAG_BASE;                                                                         \
    deadline d_ = deadline_in();                                                                 \
    do {                                                                                         \
      rreq[(i) % LAT_RING] = NULL;                                                                      \
      NCALL("irecv", g_net.irecv(&g_net, rcomm, 1, &data_, &sz_, &tag_, &rmh, &rreq[(i) % LAT_RING])); \
      if (!rreq[(i) % LAT_RING] && expired(&d_)) bc_die("latency: irecv never accepted");        \
    } while (!rreq[(i) % LAT_RING]);                                                                    \
  } while (0)

#define POST_SEND(i)                                                                       \
  do {                                                                                     \
    char *data_ = sbuf + ((i) % LAT_RING) * LAT_SLOT;                                             \
    uint64_t val_ = (i);                                                                   \
    memcpy(data_, &val_, 8);                                                               \
    deadline d_ = deadline_in();                                                           \
    do {                                                                                   \
      NCALL("isend", g_net.isend(&g_net, scomm, data_, LAT_BYTES, TAG_BASE, smh, &sreq));  \
      if (!sreq && expired(&d_)) bc_die("latency: isend never accepted");                  \
    } while (!sreq);                                                                       \
  } while (0)

  oob_barrier();
  for (uint64_t k = 0; k < LAT_AHEAD && k < total; k++) POST_RECV(k);
  oob_barrier(); /* both sides have their receives posted */
  for (uint64_t i = 0; i < total; i++) {
    if (a) {
      uint64_t t0 = bc_now_ns();
      if (i + LAT_AHEAD < total) POST_RECV(i + LAT_AHEAD);
      POST_SEND(i);
      int sdone = 0, rdone = 0;
      deadline d = deadline_in();
      progress_made(); /* a new wait: its idle streak starts now */
      while (!sdone || !rdone) {
        if (!sdone) NCALL("test(isend)", g_net.test(&g_net, sreq, &sdone, ssizes));
        if (!rdone) {
          sizes[0] = (size_t)-1;
          NCALL("test(irecv)", g_net.test(&g_net, rreq[i % LAT_RING], &rdone, sizes));
          if (rdone && sizes[0] != LAT_BYTES) bad++;
        }
        if (!sdone || !rdone) idle_yield();
        if (expired(&d)) bc_die("latency: round trip %llu not done after %.0f s", (unsigned long long)i, g_opt.timeout_s);
      }
      uint64_t t1 = bc_now_ns();
      uint64_t got;
      memcpy(&got, rbuf + (i % LAT_RING) * LAT_SLOT, 8);
      if (got != i) bad++;
      if (g_net.irecv_consumed) NCALL("irecvConsumed", g_net.irecv_consumed(&g_net, rcomm, 1, rreq[i % LAT_RING]));
      if (i >= (uint64_t)g_opt.lat_warmup) v[i - (uint64_t)g_opt.lat_warmup] = (double)(t1 - t0) / 1e3;
    } else {
      deadline d = deadline_in();
      int rdone = 0;
      progress_made(); /* a new wait: its idle streak starts now */
      while (!rdone) {
        sizes[0] = (size_t)-1;
        NCALL("test(irecv)", g_net.test(&g_net, rreq[i % LAT_RING], &rdone, sizes));
        if (sreq) { /* keep the previous reply progressing */
          int sd = 0;
          NCALL("test(isend)", g_net.test(&g_net, sreq, &sd, ssizes));
          if (sd) sreq = NULL;
        }
        if (!rdone) idle_yield();
        if (!rdone && expired(&d)) bc_die("latency: ping %llu not received after %.0f s", (unsigned long long)i, g_opt.timeout_s);
      }
      uint64_t got;
      memcpy(&got, rbuf + (i % LAT_RING) * LAT_SLOT, 8);
      if (got != i || sizes[0] != LAT_BYTES) bad++;
      if (g_net.irecv_consumed) NCALL("irecvConsumed", g_net.irecv_consumed(&g_net, rcomm, 1, rreq[i % LAT_RING]));
      if (i + LAT_AHEAD < total) POST_RECV(i + LAT_AHEAD);
      if (sreq) wait_req(sreq, "test(isend)", i - 1);
      sreq = NULL;
      POST_SEND(i);
    }
  }
  if (!a && sreq) wait_req(sreq, "test(isend)", total - 1);
#undef POST_RECV
#undef POST_SEND

  uint64_t peer_bad = 0;
  if (a) oob_recv(&peer_bad, sizeof(peer_bad));
  else oob_send(&bad, sizeof(bad));
  oob_barrier();
  NCALL("deregMr", g_net.dereg_mr(&g_net, scomm, smh));
  NCALL("deregMr", g_net.dereg_mr(&g_net, rcomm, rmh));
  NCALL("closeSend", g_net.close_send(&g_net, scomm));
  NCALL("closeRecv", g_net.close_recv(&g_net, rcomm));
  bc_free(sbuf);
  bc_free(rbuf);
  oob_barrier();
  if (a) {
    if (bad || peer_bad)
      bc_die("latency: DATA CORRUPTION: %llu bad replies on A, %llu bad pings on B", (unsigned long long)bad,
             (unsigned long long)peer_bad);
    size_t n = (size_t)g_opt.lat_iters;
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    bc_sort_doubles(v, n);
    res = (lat_res){.p50 = bc_percentile_sorted(v, n, 50), .p99 = bc_percentile_sorted(v, n, 99), .min = v[0],
                    .mean = sum / (double)n, .ok = 1};
    free(v);
  }
  return res;
}

/* ---- output ---- */
static void report(const hnet_props *p, const bw_row *bw, int nbw, const lat_res *lat, const bw_row *multi) {
  const options *o = &g_opt;
  char szb[32];
  if (o->csv) {
    printf("test,size,conns,gbps,p50_us,p99_us,min_us,mean_us,msgs,verified\n");
    for (int z = 0; z < nbw; z++)
      printf("bw,%zu,1,%.4f,,,,,%llu,1\n", bw[z].size, bw[z].gbps, (unsigned long long)bw[z].msgs);
    for (int z = 0; z < nbw; z++)
      if (bw[z].slat_ok)
        printf("sendlat,%zu,1,,%.3f,%.3f,%.3f,%.3f,%llu,1\n", bw[z].size, bw[z].slat_p50, bw[z].slat_p99,
               bw[z].slat_min, bw[z].slat_mean, (unsigned long long)bw[z].msgs * (unsigned long long)o->reps);
    if (lat->ok)
      printf("lat,%d,1,,%.3f,%.3f,%.3f,%.3f,%ld,1\n", LAT_BYTES, lat->p50, lat->p99, lat->min, lat->mean, o->lat_iters);
    if (o->do_multi)
      printf("multi,%zu,%d,%.4f,,,,,%llu,1\n", multi->size, o->conns, multi->gbps, (unsigned long long)multi->msgs);
    return;
  }
  if (o->json) {
    printf("{\"bench\":\"net\",\"plugin\":\"%s\",\"path\":\"%s\",\"net_version\":%d,\"device\":%d,\"device_name\":\"%s\","
           "\"speed_mbps\":%d,\"depth\":%d,\"reps\":%d,\"bandwidth\":[",
           g_loaded.name, g_loaded.path, g_loaded.version, o->dev, p->name, p->speed_mbps, o->depth, o->reps);
    for (int z = 0; z < nbw; z++) {
      printf("%s{\"size\":%zu,\"gbps\":%.4f,\"msgs\":%llu,\"verified\":true", z ? "," : "", bw[z].size, bw[z].gbps,
             (unsigned long long)bw[z].msgs);
      if (bw[z].slat_ok)
        printf(",\"send_completion\":{\"p50_us\":%.3f,\"p99_us\":%.3f,\"min_us\":%.3f,\"mean_us\":%.3f}",
               bw[z].slat_p50, bw[z].slat_p99, bw[z].slat_min, bw[z].slat_mean);
      printf("}");
    }
    printf("]");
    if (lat->ok)
      printf(",\"latency\":{\"size\":%d,\"p50_us\":%.3f,\"p99_us\":%.3f,\"min_us\":%.3f,\"mean_us\":%.3f,\"iters\":%ld}",
             LAT_BYTES, lat->p50, lat->p99, lat->min, lat->mean, o->lat_iters);
    if (o->do_multi)
      printf(",\"multi\":{\"size\":%zu,\"conns\":%d,\"gbps\":%.4f,\"msgs_per_conn\":%llu}", multi->size, o->conns,
             multi->gbps, (unsigned long long)multi->msgs);
    printf("}\n");
    return;
  }
  printf("# rerail-net-bench: plugin %s (ncclNetPlugin_v%d, %s)\n", g_loaded.name, g_loaded.version, g_loaded.path);
  printf("# device %d: %s, %d Mbps; %d requests in flight; best of %d run(s); payloads verified; GB/s = 1e9 B/s\n",
         o->dev, p->name, p->speed_mbps, o->depth, o->reps);
  if (nbw) {
    printf("\n## uni-directional bandwidth, 1 connection\n%-10s %10s %10s\n", "size", "GB/s", "msgs");
    for (int z = 0; z < nbw; z++)
      printf("%-10s %10.3f %10llu\n", bc_fmt_size(bw[z].size, szb, sizeof(szb)), bw[z].gbps,
             (unsigned long long)bw[z].msgs);
    if (o->send_lat) {
      printf("\n## send completion (us): isend to test()=done, %d in flight\n%-10s %10s %10s %10s %10s\n", o->depth,
             "size", "p50", "p99", "min", "mean");
      for (int z = 0; z < nbw; z++)
        if (bw[z].slat_ok)
          printf("%-10s %10.2f %10.2f %10.2f %10.2f\n", bc_fmt_size(bw[z].size, szb, sizeof(szb)), bw[z].slat_p50,
                 bw[z].slat_p99, bw[z].slat_min, bw[z].slat_mean);
    }
  }
  if (lat->ok) {
    printf("\n## %d-byte round trip (us), receives posted ahead, %ld iterations after %ld warmup\n", LAT_BYTES,
           o->lat_iters, o->lat_warmup);
    printf("%10s %10s %10s %10s\n%10.2f %10.2f %10.2f %10.2f\n", "p50", "p99", "min", "mean", lat->p50, lat->p99,
           lat->min, lat->mean);
  }
  if (o->do_multi)
    printf("\n## many connections: %d x %s messages at once: %.3f GB/s aggregate (%llu msgs per connection)\n",
           o->conns, bc_fmt_size(multi->size, szb, sizeof(szb)), multi->gbps, (unsigned long long)multi->msgs);
}

/* ---- main ---- */
static void usage(FILE *f) {
  fprintf(f,
          "usage: rerail-net-bench [--fork | --rank 0|1 --oob-dir DIR] [options]\n"
          "  --plugin NAME|PATH   ncclNet plugin, as NCCL_NET_PLUGIN takes it (default rerail);\n"
          "                       nccl-socket[:LIBNCCL], nccl-ib[:LIBNCCL]: NCCL's own socket or IB\n"
          "                       transport (NCCL_NET=Socket / IB) from libnccl.so.2 (or $NCCL_LIB);\n"
          "                       set NCCL_SOCKET_IFNAME (and NCCL_IB_HCA, NCCL_IB_GID_INDEX for IB)\n"
          "  --net-version N      bind ncclNetPlugin_vN (8..12; default: the newest exported)\n"
          "  --dev N              device index (default 0)\n"
          "  --fork               run both ranks from this command (default)\n"
          "  --rank R --oob-dir D run one rank; handles go through files in D (shared by both)\n"
          "  --min-size S         smallest message (default 4K)\n"
          "  --max-size S         largest message (default 64M)\n"
          "  --factor 2|4         size step (default 2)\n"
          "  --sizes LIST         explicit sizes, e.g. 4K,64K,1M\n"
          "  --depth N            requests in flight per connection (default 8, at most %d)\n"
          "  --bytes S            bytes per bandwidth measurement (default 256M)\n"
          "  --min-msgs N         minimum messages per measurement (default 16)\n"
          "  --max-msgs N         maximum messages per measurement (default 20000)\n"
          "  --reps N             timed runs per bandwidth figure, the best counts (default 1)\n"
          "  --lat-iters N        round trips measured (default 10000)\n"
          "  --lat-warmup N       round trips before measuring (default 1000)\n"
          "  --conns C            connections in the many-connection test (default 8)\n"
          "  --multi-size S       message size of the many-connection test (default 1M)\n"
          "  --multi-bytes S      bytes in the many-connection test, all connections (default 1G)\n"
          "  --no-bw | --no-lat | --no-multi   skip a test\n"
          "  --send-lat           also time each send of the bandwidth runs, isend to test()=done\n"
          "  --send-depth N       sends in flight (default: --depth); the receiver stays --depth ahead,\n"
          "                       so with N < depth every send finds its receive posted\n"
          "  --timeout S          fail after S seconds without progress (default 120)\n"
          "  --csv | --json       machine-readable output on stdout\n",
          MAX_DEPTH);
}

static void parse_options(int argc, char **argv) {
  options *o = &g_opt;
  size_t min_size = 4096, max_size = 64u << 20;
  long factor = 2, v;
  const char *sizes = NULL;
  *o = (options){.plugin = "rerail", .depth = 8, .bytes = 256u << 20, .min_msgs = 16, .max_msgs = 20000,
                 .lat_iters = 10000, .lat_warmup = 1000, .conns = 8, .reps = 1, .multi_size = 1u << 20,
                 .multi_bytes = 1u << 30, .do_bw = true, .do_lat = true, .do_multi = true, .rank = -1,
                 .timeout_s = 120};
  enum { O_PLUGIN = 256, O_NETV, O_DEV, O_FORK, O_RANK, O_OOB, O_MIN, O_MAX, O_FACTOR, O_SIZES, O_DEPTH, O_BYTES,
         O_MINMSGS, O_MAXMSGS, O_LATIT, O_LATWU, O_CONNS, O_MSIZE, O_MBYTES, O_NOBW, O_NOLAT, O_NOMULTI,
         O_TIMEOUT, O_CSV, O_JSON, O_REPS, O_SENDLAT, O_SENDDEPTH, O_HELP };
  static const struct option lo[] = {
      {"plugin", required_argument, 0, O_PLUGIN},   {"net-version", required_argument, 0, O_NETV},
      {"dev", required_argument, 0, O_DEV},         {"fork", no_argument, 0, O_FORK},
      {"rank", required_argument, 0, O_RANK},       {"oob-dir", required_argument, 0, O_OOB},
      {"min-size", required_argument, 0, O_MIN},    {"max-size", required_argument, 0, O_MAX},
      {"factor", required_argument, 0, O_FACTOR},   {"sizes", required_argument, 0, O_SIZES},
      {"depth", required_argument, 0, O_DEPTH},     {"bytes", required_argument, 0, O_BYTES},
      {"min-msgs", required_argument, 0, O_MINMSGS}, {"max-msgs", required_argument, 0, O_MAXMSGS},
      {"lat-iters", required_argument, 0, O_LATIT}, {"lat-warmup", required_argument, 0, O_LATWU},
      {"conns", required_argument, 0, O_CONNS},     {"multi-size", required_argument, 0, O_MSIZE},
      {"multi-bytes", required_argument, 0, O_MBYTES}, {"no-bw", no_argument, 0, O_NOBW},
      {"no-lat", no_argument, 0, O_NOLAT},          {"no-multi", no_argument, 0, O_NOMULTI},
      {"timeout", required_argument, 0, O_TIMEOUT}, {"csv", no_argument, 0, O_CSV},
      {"json", no_argument, 0, O_JSON},             {"help", no_argument, 0, O_HELP},
      {"reps", required_argument, 0, O_REPS},       {"send-lat", no_argument, 0, O_SENDLAT},
      {"send-depth", required_argument, 0, O_SENDDEPTH},
      {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
    switch (c) {
    case O_PLUGIN: o->plugin = optarg; break;
    case O_NETV: if (bc_parse_int(optarg, 0, 12, &v) || (v && v < 8)) bc_die("--net-version is 8..12"); o->net_version = (int)v; break;
    case O_DEV: if (bc_parse_int(optarg, 0, 1024, &v)) bc_die("bad --dev"); o->dev = (int)v; break;
    case O_FORK: o->rank = -1; break;
    case O_RANK: if (bc_parse_int(optarg, 0, 1, &v)) bc_die("--rank is 0 or 1"); o->rank = (int)v; break;
    case O_OOB: o->oob_dir = optarg; break;
    case O_MIN: if (bc_parse_size(optarg, &min_size)) bc_die("bad --min-size"); break;
    case O_MAX: if (bc_parse_size(optarg, &max_size)) bc_die("bad --max-size"); break;
    case O_FACTOR: if (bc_parse_int(optarg, 2, 4, &factor) || factor == 3) bc_die("--factor is 2 or 4"); break;
    case O_SIZES: sizes = optarg; break;
    case O_DEPTH: if (bc_parse_int(optarg, 1, MAX_DEPTH, &v)) bc_die("--depth is 1..%d", MAX_DEPTH); o->depth = (int)v; break;
    case O_BYTES: if (bc_parse_size(optarg, &o->bytes)) bc_die("bad --bytes"); break;
    case O_MINMSGS: if (bc_parse_int(optarg, 2, 1L << 40, &o->min_msgs)) bc_die("--min-msgs is >= 2"); break;
    case O_MAXMSGS: if (bc_parse_int(optarg, 2, 1L << 40, &o->max_msgs)) bc_die("--max-msgs is >= 2"); break;
    case O_LATIT: if (bc_parse_int(optarg, 1, 100000000, &o->lat_iters)) bc_die("bad --lat-iters"); break;
    case O_LATWU: if (bc_parse_int(optarg, 0, 100000000, &o->lat_warmup)) bc_die("bad --lat-warmup"); break;
    case O_CONNS: if (bc_parse_int(optarg, 1, MAX_CONNS, &v)) bc_die("--conns is 1..%d", MAX_CONNS); o->conns = (int)v; break;
    case O_MSIZE: if (bc_parse_size(optarg, &o->multi_size) || o->multi_size < 16) bc_die("bad --multi-size"); break;
    case O_MBYTES: if (bc_parse_size(optarg, &o->multi_bytes)) bc_die("bad --multi-bytes"); break;
    case O_NOBW: o->do_bw = false; break;
    case O_NOLAT: o->do_lat = false; break;
    case O_NOMULTI: o->do_multi = false; break;
    case O_SENDLAT: o->send_lat = true; break;
    case O_SENDDEPTH: if (bc_parse_int(optarg, 1, MAX_DEPTH, &v)) bc_die("--send-depth is 1..%d", MAX_DEPTH); o->send_depth = (int)v; break;
    case O_TIMEOUT: if (bc_parse_int(optarg, 1, 86400, &v)) bc_die("bad --timeout"); o->timeout_s = (double)v; break;
    case O_REPS: if (bc_parse_int(optarg, 1, 1000, &v)) bc_die("bad --reps"); o->reps = (int)v; break;
    case O_CSV: o->csv = true; break;
    case O_JSON: o->json = true; break;
    case O_HELP: case 'h': usage(stdout); exit(0);
    default: usage(stderr); exit(2);
    }
  }
  if (optind != argc) { usage(stderr); exit(2); }
  if (o->csv && o->json) bc_die("--csv and --json are exclusive");
  if (o->rank >= 0 && !o->oob_dir) bc_die("--rank needs --oob-dir");
  if (o->min_msgs > o->max_msgs) bc_die("--min-msgs > --max-msgs");
  if (sizes ? bc_sizes_list(&o->sizes, sizes) : bc_sizes_range(&o->sizes, min_size, max_size, (unsigned)factor))
    bc_die("bad size sweep");
  for (int z = 0; z < o->sizes.n; z++)
    if (o->sizes.v[z] < 16) bc_die("bandwidth sizes must be >= 16 bytes");
}

static void kill_child(void) {
  if (g_child > 0) {
    kill(g_child, SIGTERM);
    waitpid(g_child, NULL, 0);
    g_child = -1;
  }
}

static int run_rank(void) {
  if (hnet_load(g_opt.plugin, g_opt.net_version, &g_net)) bc_die("cannot load plugin '%s'", g_opt.plugin);
  snprintf(g_loaded.name, sizeof(g_loaded.name), "%s", g_net.name ? g_net.name : "?");
  snprintf(g_loaded.path, sizeof(g_loaded.path), "%s", g_net.path);
  g_loaded.version = g_net.version;
  int ndev = 0;
  NCALL("devices", g_net.devices(&g_net, &ndev));
  if (g_opt.dev >= ndev) bc_die("plugin %s has %d device(s); --dev %d", g_opt.plugin, ndev, g_opt.dev);
  hnet_props props;
  memset(&props, 0, sizeof(props));
  NCALL("getProperties", g_net.get_properties(&g_net, g_opt.dev, &props));
  if (!(props.ptr_support & HNET_PTR_HOST)) bc_die("device %d does not support host memory", g_opt.dev);
  if (g_opt.do_multi && props.max_comms > 0 && props.max_comms < 2 * g_opt.conns)
    bc_warn("device %d advertises maxComms %d; the many-connection test opens %d", g_opt.dev, props.max_comms,
            g_opt.conns);
  oob_barrier();

  static bw_row bw[BC_MAX_SIZES];
  bw_row multi = {0};
  lat_res lat = {0};
  int nbw = 0;
  if (g_opt.do_bw) {
    streams_test(1, g_opt.sizes.v, g_opt.sizes.n, g_opt.bytes, bw, "bw");
    nbw = g_opt.sizes.n;
  }
  if (g_opt.do_lat) lat = lat_test();
  if (g_opt.do_multi) streams_test(g_opt.conns, &g_opt.multi_size, 1, g_opt.multi_bytes, &multi, "multi");

  oob_barrier();
  NCALL("finalize", g_net.finalize(&g_net));
  hnet_unload(&g_net);
  if (g_oob.rank == 0) report(&props, bw, nbw, &lat, &multi);
  return 0;
}

int main(int argc, char **argv) {
  bc_set_prog(argv[0]);
  parse_options(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  if (g_opt.rank >= 0) {
    struct stat st;
    if (stat(g_opt.oob_dir, &st) || !S_ISDIR(st.st_mode)) bc_die("--oob-dir %s is not a directory", g_opt.oob_dir);
    g_oob = (oob){.fd = -1, .dir = g_opt.oob_dir, .rank = g_opt.rank, .timeout_s = g_opt.timeout_s};
    return run_rank();
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) bc_die("socketpair: %s", strerror(errno));
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) bc_die("fork: %s", strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive rank 0 */
    if (getppid() == 1) _exit(1);
    close(sv[0]);
    g_oob = (oob){.fd = sv[1], .rank = 1, .timeout_s = g_opt.timeout_s};
    run_rank();
    fflush(stdout);
    _exit(0);
  }
  close(sv[1]);
  g_child = pid;
  atexit(kill_child);
  g_oob = (oob){.fd = sv[0], .rank = 0, .timeout_s = g_opt.timeout_s};
  int rc = run_rank();
  int st;
  waitpid(pid, &st, 0);
  g_child = -1;
  if (!WIFEXITED(st) || WEXITSTATUS(st)) {
    bc_warn("rank 1 failed (%s %d)", WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    return 1;
  }
  return rc;
}
