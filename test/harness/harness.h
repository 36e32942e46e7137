/* rerail-harness internals: options, the deterministic schedule, the payload,
 * the rendezvous directory and the per-connection traffic engine.
 *
 * Files: harness.c (CLI, setup, summary), h_sched.c (schedule + payload),
 * h_rdv.c (handle files, barriers), h_traffic.c (the proxy-like progress
 * engine), h_bad.c (bad-input modes), h_stats.c (timing, counters, watchdog),
 * h_report.c (stall report and throughput timeline). */
#ifndef RERAIL_HARNESS_H
#define RERAIL_HARNESS_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "net_api.h"

#define H_MAX_INFLIGHT 8      /* NCCL_STEPS: requests in flight per connection */
#define H_MAX_GROUP 8         /* grouped receives per irecv */
#define H_GUARD 64            /* canary bytes after every posted receive buffer */
#define H_SLACK_MAX 4096      /* posted size - sent size, at most */
#define H_POISON 0xA5         /* receive buffers are filled with this before each post */
#define H_CANARY 0x5A         /* ...and guarded by this */
#define H_TAIL_OPS 8          /* --duration: ops that follow the end marker */
#define H_MAX_CONNS 4096    /* --scale-report runs open thousands */
#define H_MAX_CONTEXTS 8
#define H_TIMELINE_BUCKET_MS 50

/* exit codes */
enum { H_EXIT_OK = 0, H_EXIT_FAIL = 1, H_EXIT_USAGE = 2, H_EXIT_HANG = 3, H_EXIT_TOO_FAST = 4 };

enum h_role { H_SERVER = 0, H_CLIENT = 1 };
#define H_MAX_SIZES 64
enum h_wrong_token { H_WT_NONE = 0, H_WT_TOKEN, H_WT_ALL_BUT_ADDR };

typedef struct h_opts {
  const char *plugin;
  int net_version;          /* 0 = newest */
  int dev;
  int role;
  const char *rdv;
  int conns;
  int inflight;             /* K */
  int group;                /* G; 0 = device maxRecvs capped at 8 */
  size_t min_size, max_size;
  double duration;          /* seconds; 0 = use iters */
  uint64_t iters;
  uint64_t seed;
  int bidir, threads, quiet, json;
  double timeout;           /* watchdog */
  double rdv_timeout;       /* waiting for the peer's files */
  double max_call_s;        /* a single connect/accept call longer than this fails */
  int recv_hint;            /* use NCCL's optional-completion hint on some single receives */
  int probe;
  int bad_handle;
  int wrong_token;
  char keep_bytes[128];     /* --keep-bytes OFF:LEN[,OFF:LEN] for --wrong-token all-but-addr */
  int die_mid;
  size_t die_size;
  int die_after_ms;
  double die_bound;         /* receiver: the error must come within this many seconds */
  double bad_bound;         /* bad handle: a verdict within this many seconds */
  int64_t selftest_corrupt; /* receiver: flip a byte of op SEQ on connection 0 (-1 = off) */
  int contexts;             /* v11+: init() this many contexts; connection i uses i % contexts */
  int accept_delay_ms;      /* server: wait this long after publishing before the first accept */
  int close_delay_ms;       /* wait this long after both ends finished before closing */
  int close_when_done;      /* close as soon as this side's schedule is done, without the end barrier */
  int stall_report;         /* receiver: longest gap between completions (h_report.c) */
  const char *timeline;     /* receiver: bytes per 50 ms bucket to this file */
  const char *completion_log; /* receiver: every completion to this file */
  int no_peer_abort;        /* traffic: ignore the peer's abort flag (learn failures from the plugin) */
  int no_flush;             /* receiver: no iflush, as NCCL for host memory (its socket transport refuses one) */
  int mem_type;             /* --mem: HNET_PTR_HOST or HNET_PTR_CUDA (host memory typed as GPU memory) */
  int protect;              /* --protect: the buffer is PROT_NONE while the plugin owns it (needs --inflight 1) */
  size_t sizes[H_MAX_SIZES];/* --sizes: every op a single message of sizes[seq % nsizes] */
  int nsizes;
  int scale_report;         /* --scale-report: setup time, memory, fds, threads (h_scale.c) */
  int setup_barrier;        /* --setup-barrier: traffic waits for the peer's setup (h_scale.c) */
} h_opts;

extern h_opts g_opt;

/* ---- schedule and payload (h_sched.c) ---------------------------------- */

typedef struct h_msg {
  size_t size;     /* bytes the sender sends */
  size_t posted;   /* bytes the receiver posts (>= size) */
  int tag;
} h_msg;

typedef struct h_op {
  int n;                       /* 1 = single message, else a group */
  h_msg m[H_MAX_GROUP];
  uint8_t order[H_MAX_GROUP];  /* the sender's isend order (a shuffle for groups) */
  int hint;                    /* receiver: pass the optional-completion hint */
} h_op;

typedef struct h_sched {
  uint64_t key;         /* seed, direction and connection folded */
  int group;            /* G */
  size_t min_size, max_size;
  size_t single_cap;    /* largest single message */
  size_t sub_cap;       /* largest message of a group */
  size_t sub_stride;    /* bytes between group sub-buffers in a slot */
  size_t slot_bytes;    /* bytes per in-flight slot */
  int single_slack_min; /* 1 in --duration mode: a single's posted size exceeds its size */
  int conn;
  const size_t *sizes;  /* --sizes: fixed single sizes in turn (NULL: the random schedule) */
  int nsizes;
} h_sched;

/* dir: 0 = server->client, 1 = client->server. */
void h_sched_init(h_sched *s, uint64_t seed, int dir, int conn, int group, size_t min_size,
                  size_t max_size, int duration_mode);
void h_sched_op(const h_sched *s, uint64_t seq, h_op *op);
/* Byte offset of message i of an op inside its slot. */
size_t h_sched_offset(const h_sched *s, const h_op *op, int i);

uint64_t h_payload_key(const h_sched *s, uint64_t seq, int tag);
void h_payload_fill(void *buf, size_t size, uint64_t key);
/* Returns the number of bytes that differ; *first_bad, *exp, *got describe the first. */
size_t h_payload_check(const void *buf, size_t size, uint64_t key, size_t *first_bad, uint8_t *exp,
                       uint8_t *got);
uint64_t h_mix64(uint64_t x);

/* ---- rendezvous (h_rdv.c) ---------------------------------------------- */

/* The parameters both ends must agree on, written with every handle. */
typedef struct h_params {
  uint64_t seed, iters;
  int conns, group, bidir, duration_mode, die, wrong_token;
  size_t min_size, max_size, die_size;
  int version;   /* informational */
} h_params;

void h_params_from_opts(h_params *p, int group);
const char *h_role_name(int role);
/* Atomically (write + rename) publish a handle for connection conn. */
int h_rdv_put_handle(int role, int conn, const void *handle, const h_params *p);
/* Poll for the peer's handle for connection conn; checks that params agree. */
int h_rdv_get_handle(int peer_role, int conn, void *handle, const h_params *mine, double timeout_s);
/* Flag files: "<role>.<name>". */
int h_rdv_put_flag(int role, const char *name, const char *text);
int h_rdv_has_flag(int role, const char *name);
int h_rdv_read_flag(int role, const char *name, char *buf, size_t len);
/* Wait for the peer's flag; returns 0, -1 on timeout, -2 if the peer aborted. */
int h_rdv_wait_flag(int peer_role, const char *name, double timeout_s);
void h_rdv_clean(int role);
int h_peer_aborted(void);   /* rate-limited check for "<peer>.abort" */

/* ---- timing, counters, watchdog (h_stats.c) ---------------------------- */

enum h_api { A_CONNECT, A_ACCEPT, A_LISTEN, A_REGMR, A_DEREGMR, A_ISEND, A_IRECV, A_TEST, A_IFLUSH,
             A_CLOSE, A_CONSUMED, A_NAPI };
extern const char *const h_api_names[A_NAPI];

typedef struct h_counters {
  _Atomic uint64_t max_ns[A_NAPI];
  _Atomic uint64_t calls[A_NAPI];
  _Atomic uint64_t slow[A_NAPI][3];   /* calls longer than 1 ms, 10 ms, 100 ms */
  _Atomic uint64_t null_isend, null_irecv, null_connect, null_accept, hints, flush_reqs;
  _Atomic uint64_t errors;
} h_counters;
extern h_counters g_cnt;

double h_now(void);          /* monotonic seconds */
uint64_t h_now_ns(void);
void h_note_call(int api, uint64_t ns);
void h_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));  /* counts + prints */
void h_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));   /* unless --quiet */
/* Watchdog: after timeout_s prints the state dump and _exit(H_EXIT_HANG). */
void h_watchdog_start(double timeout_s);
void h_watchdog_set_dump(void (*dump)(void));
void h_watchdog_phase(const char *phase);   /* what the process is doing, for the dump */
extern _Atomic int g_abort;  /* stop everything: an error happened */

/* Timed wrappers: each measures the call and records the maximum. */
#define H_CALL(api, expr)                                   \
  ({                                                        \
    uint64_t h_t0_ = h_now_ns();                            \
    int h_rc_ = (expr);                                     \
    h_note_call((api), h_now_ns() - h_t0_);                 \
    h_rc_;                                                  \
  })

/* ---- traffic (h_traffic.c) --------------------------------------------- */

typedef struct h_slot {
  uint64_t seq;
  h_op op;
  int prepared;            /* buffers filled (sender) or poisoned (receiver) */
  int nposted;             /* sender: isends posted so far (in op.order) */
  void *req[H_MAX_GROUP];  /* sender: requests in posting order */
  int ntested;             /* sender: requests found done */
  void *rreq;              /* receiver */
  void *freq;              /* receiver: iflush request */
  int sizes[HNET_TEST_SIZES];
  double t_done;
  int marker;              /* sender: this op carries the end marker */
} h_slot;

typedef struct h_dir_stats {
  uint64_t msgs, bytes, ops;
  double t_first, t_last;
} h_dir_stats;

/* A gap between consecutive receive completions (monotonic ns). */
typedef struct h_gap {
  uint64_t len_ns, start_ns, end_ns;
  int conn;                /* the connection whose completion ended it */
} h_gap;

typedef struct h_conn {
  int idx;
  int is_send;
  hnet *net;
  void *listen;            /* receiver: until accept returns */
  void *comm;
  void *mh;
  char *buf;
  size_t buf_bytes;
  unsigned char handle[HNET_HANDLE_SIZE];
  h_sched sched;
  uint64_t posted, received, retired, last;
  int posting;             /* sender: op `posted` is partially posted */
  int marker_sent;
  h_slot slots[H_MAX_INFLIGHT];
  h_dir_stats st;
  int failed, finished;
  int id_published;        /* its connection id is in the rendezvous directory (h_conn_publish_id) */
  uint64_t rng;            /* receiver-side choices (hint) */
  double deadline;         /* --duration: sender's stop time */
  unsigned errors_printed;
  /* --stall-report (receiver) */
  uint64_t cmpl_last_ns, completions;
  h_gap gap;               /* the longest gap between this connection's completions */
} h_conn;

int h_conn_alloc(h_conn *c);                 /* buffers for K slots */
/* Publish the connection's id (rerailConnId_v1) in the rendezvous directory:
 * a receive comm's when accept() returns it, a send comm's once its first
 * isend() returned a request (or before it closes). 0, or -1 (reported). */
int h_conn_publish_id(h_conn *c);
int h_conn_publish_due(void); /* ids published as they become final (not under --scale-report) */
int h_conn_register(h_conn *c);
void h_conn_release(h_conn *c);              /* deregMr + close (timed), free */
/* One progress pass, NCCL proxy style. Returns 1 while work remains. */
int h_conn_progress(h_conn *c);
void h_conn_dump(const h_conn *c);
/* Die-mid-message extras on connection 0 after the schedule. */
int h_die_sender(h_conn *c);                 /* never returns on success (_exit) */
int h_die_receiver(h_conn *c);               /* 0 = error seen in time (pass) */

/* ---- stall report and timeline (h_report.c) ---------------------------- */

extern int h_report_receives;  /* set when this process has receive connections */
void h_report_init(void);    /* after parsing the options */
void h_report_start(void);   /* traffic starts (the first call counts) */
void h_report_error(void);   /* an error happened (the first call counts) */
/* A receive op completed at `now` (monotonic ns) with `bytes` bytes. */
void h_report_completion(h_conn *c, uint64_t now, uint64_t bytes);
int h_report_write_timeline(void);
int h_report_write_completions(void);
void h_report_print_text(h_conn *recv, int nrecv);
void h_report_print_json(h_conn *recv, int nrecv);   /* "key":value, pairs, each ending in ',' */

/* ---- --scale-report (h_scale.c) -------------------------------------- */

void h_scale_before_listen(void);      /* the baseline: harness buffers allocated and touched */
void h_scale_listened(double listen_s);/* server: every listen() done, taking this long */
int h_scale_wait_listened(void);       /* client: wait for the server's listen phase to end */
void h_scale_connecting(void);         /* client: every handle read, first connect() next */
void h_scale_connected(void);          /* this side's last comm came */
int h_scale_setup_barrier(void);      /* --setup-barrier: wait for the peer's last comm; -1 on timeout */
void h_scale_after_traffic(void);
void h_scale_print(int json);          /* json: "scale":{...}, */

/* ---- bad-input modes (h_bad.c) ----------------------------------------- */

int h_mode_bad_handle(hnet *n);
int h_mode_wrong_token(hnet *n);
int h_drive(h_conn **cs, int n);             /* progress until all finish; -1 on failure */

/* ---- connection setup (h_connect.c) ------------------------------------ */
int h_connect_all(hnet *n, h_conn *send, int nsend, h_conn *recv, int nrecv);
/* NCCL's attribute hints (v11+); xfer_*: those of a transfer's first post. */
void h_set_attrs(hnet *n, int xfer_send, int xfer_recv);

/* ---- shared with harness.c --------------------------------------------- */
int h_resolved_group(void);

#endif
