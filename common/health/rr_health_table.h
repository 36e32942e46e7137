/* The shared health table: writer, reader and the plugin's process-wide hook.
 *
 * Layout and concurrency protocol: include/rerail/health_table.h.
 *
 * Writer. One per process in the plugin (rr_health_table_start/stop, reference
 * counted like every process-wide piece of the net plugin). It subscribes to
 * rr_health and turns NIC_STATE, RAIL_STATE, FAILOVER, FAILBACK and ERROR
 * events into row updates; the telemetry exporter hands it throughput and
 * latency with rr_health_table_set_figures(); the plugin's background thread
 * calls rr_health_table_tick() to keep the heartbeat fresh. None of these
 * ever blocks on another process or fails the caller: when the table cannot
 * be used (path not writable, file corrupt, foreign or of another layout
 * version, table full) the plugin warns once and carries on without it.
 *
 * Bad files are never repaired, moved or overwritten: the file may belong to
 * a newer or older rerail still in use, or to something that is not rerail at
 * all; the warning says which file and why, and removing it (or pointing
 * RERAIL_HEALTH_PATH elsewhere) is the operator's call. /dev/shm is empty
 * after a reboot, and a writer never leaves a half-made file behind.
 *
 * Who may use a file. Writers and readers alike open it with O_NOFOLLOW and
 * judge the opened descriptor (fstat, never stat on the path: the file
 * judged is the file used). A process uses the file only when it is a
 * regular file, not writable by every user (mode & 0002), and either
 *   - owned by the process's effective uid, or
 *   - of the group RERAIL_HEALTH_GROUP names, with exactly the mode a writer
 *     gives such a table (0660): the operator's statement that the users of
 *     that group share one table.
 * Root gets no exception (sshd's StrictModes is the model): a table another
 * user made at the path must neither feed data to root's jobs nor read
 * their health. Everything else is refused as insecure (RR_HT_INSECURE;
 * rr_health_table_refusals() counts the finer reason): the writer publishes
 * nothing, readers read nothing, each says once why, and data keeps moving.
 *
 * Environment:
 *   RERAIL_HEALTH_PATH      the file (default /dev/shm/rerail-health)
 *   RERAIL_HEALTH_GROUP     group name or gid: create the file 0660 with that
 *                           group (default: 0600, this user only), and use
 *                           another user's file of that group and mode 0660
 *   RERAIL_HEALTH_STALE_MS  heartbeat age after which readers call a row
 *                           aged out (default 10000, 100..3600000) */
#ifndef RERAIL_COMMON_HEALTH_TABLE_H
#define RERAIL_COMMON_HEALTH_TABLE_H
#include <stddef.h>
#include <stdint.h>

#include "rerail/health_table.h"
#include "rr_health_bus.h"
#include "rr_netif.h"
#include "rr_status.h"

#define RR_HT_DEFAULT_PATH "/dev/shm/rerail-health"
#define RR_HT_DEFAULT_NIC_ROWS 512u
#define RR_HT_DEFAULT_PEER_ROWS 512u

/* What is wrong with a table file (RR_HT_FINE when nothing). */
typedef enum rr_ht_problem {
  RR_HT_FINE = 0,
  RR_HT_ABSENT,         /* no such file */
  RR_HT_NOACCESS,       /* cannot open, create or map it (permissions, no directory) */
  RR_HT_FOREIGN,        /* not a rerail health table (magic, byte order) */
  RR_HT_OTHER_VERSION,  /* a rerail table of a layout version this build does not know */
  RR_HT_CORRUPT,        /* checksum, sizes or counts do not add up */
  RR_HT_TRUNCATED,      /* shorter than its header says */
  RR_HT_INSECURE,       /* a symbolic link, not a regular file, writable by anyone, or owned
                           by another user (see "Who may use a file" above) */
} rr_ht_problem;

const char *rr_ht_problem_str(rr_ht_problem p);

/* Why a file at the path was refused as RR_HT_INSECURE (see "Who may use a
 * file" above). Callers decide on these codes, never on message text. */
typedef enum rr_ht_refusal {
  RR_HT_TRUSTED = 0,            /* not refused */
  RR_HT_REFUSED_SYMLINK,        /* a symbolic link at the path: never followed */
  RR_HT_REFUSED_NOT_REGULAR,    /* a FIFO, device, directory or socket */
  RR_HT_REFUSED_OTHER_WRITABLE, /* mode & 0002: any user could scribble into it */
  RR_HT_REFUSED_OWNER,          /* another user's, and not of RERAIL_HEALTH_GROUP's group */
  RR_HT_REFUSED_GROUP_MODE,     /* another user's of that group, but its mode is not 0660 */
  RR_HT_REFUSAL_KINDS
} rr_ht_refusal;

/* How many times this process refused a table file for reason why: writers'
 * and readers' opens, and readers' re-checks before each snapshot. 0 for
 * RR_HT_TRUSTED or an unknown reason. */
uint64_t rr_health_table_refusals(rr_ht_refusal why);

/* Send and receive, as the telemetry recorder numbers them (RR_TEL_TX/RX). */
enum rr_ht_dir { RR_HT_TX = 0, RR_HT_RX = 1 };

/* ---- writer ------------------------------------------------------------------ */

typedef struct rr_ht_writer rr_ht_writer;

typedef struct rr_ht_writer_opts {
  uint32_t nic_rows;    /* rows of a file this writer creates; 0 = default */
  uint32_t peer_rows;
  const char *group;    /* NULL: RERAIL_HEALTH_GROUP; "": none (0600) */
} rr_ht_writer_opts;

/* Open (or create) the table at path (NULL: RERAIL_HEALTH_PATH or the
 * default) for writing. opts may be NULL. On failure warns (once per process),
 * returns an error and leaves *out NULL; *problem (may be NULL) says why. */
rr_status rr_health_table_open_writer(const char *path, const rr_ht_writer_opts *opts,
                                      rr_ht_writer **out, rr_ht_problem *problem);

/* Claim a row for local device dev (idempotent): RR_OK, or RR_ERR_NOMEM when
 * the table has no free row (warned once), RR_ERR_SYSTEM when the writer has
 * stopped publishing (below), RR_ERR_INVALID for a bad dev. */
rr_status rr_health_table_claim(rr_ht_writer *w, int dev, const char *ifname);

/* Row updates. Unknown devices (never claimed) are ignored. */
void rr_health_table_event(rr_ht_writer *w, const rr_health_event *ev);
void rr_health_table_figures(rr_ht_writer *w, int dev, int dir, uint64_t bytes_per_s,
                             uint64_t p50_ns, uint64_t p99_ns);
void rr_health_table_heartbeat(rr_ht_writer *w);

/* Release this writer's rows (readers stop showing them) and unmap. */
void rr_health_table_close_writer(rr_ht_writer *w);

/* Does w still publish? A writer stops for good, warned once, when the file
 * changes under it (another process truncated, grew or rewrote it): every
 * update checks the file's size first, the heartbeat also its header. The
 * calls above then do nothing. */
int rr_health_table_publishing(rr_ht_writer *w);

/* ---- the plugin's process-wide writer ------------------------------------------ */

/* Reference counted: the first call opens the table at RERAIL_HEALTH_PATH,
 * claims a row for each of the count devices, subscribes to rr_health; later
 * calls only count. Never fails: without a usable table the hooks below do
 * nothing. Call rr_health_table_stop() once per start. */
void rr_health_table_start(const rr_netif *nifs, int count);
void rr_health_table_stop(void);

/* Is this process publishing into a table right now? (Not after the file
 * changed under it: see rr_health_table_publishing.) */
int rr_health_table_active(void);

/* Heartbeat; cheap when called often (at most one table write per
 * RR_HT_HEARTBEAT_MS). now_ns: CLOCK_MONOTONIC (rr_now_ns()). */
void rr_health_table_tick(uint64_t now_ns);

/* Windowed throughput and latency of local device dev; dir: RR_HT_TX/RR_HT_RX.
 * bytes_per_s is a double because that is what the exporter computes; the
 * row stores it rounded (negative or NaN: 0). The telemetry exporter calls
 * this through a weak reference (common/telemetry/rr_tel_health_feed.c) that repeats
 * this prototype: change both together. */
void rr_health_table_set_figures(int dev, int dir, double bytes_per_s, uint64_t p50_ns,
                                 uint64_t p99_ns);

/* ---- reader ------------------------------------------------------------------ */

typedef enum rr_ht_liveness {
  RR_HT_LIVE = 0,
  RR_HT_GONE = 1,   /* its process exited (or its pid now belongs to another process) */
  RR_HT_AGED = 2,   /* its process may run, but gave no heartbeat within the threshold */
} rr_ht_liveness;

typedef struct rr_ht_nic_entry {
  rr_ht_nic_row row;
  rr_ht_liveness liveness;
  int torn;                  /* GONE rows only: died mid-write, fields are not trustworthy */
  uint64_t heartbeat_age_ns;
} rr_ht_nic_entry;

typedef struct rr_ht_peer_entry {
  rr_ht_peer_row row;
  rr_ht_liveness liveness;
  int torn;
  uint64_t heartbeat_age_ns;
} rr_ht_peer_entry;

typedef struct rr_ht_snapshot {
  rr_ht_problem problem;     /* RR_HT_FINE when the rest is valid */
  char detail[200];          /* human-readable why, when problem != RR_HT_FINE */
  rr_ht_header header;
  uint64_t taken_ns;         /* CLOCK_REALTIME */
  uint64_t stale_after_ns;   /* the heartbeat threshold used */
  int nic_count;             /* claimed rows, live or not */
  rr_ht_nic_entry *nic;
  int peer_count;
  rr_ht_peer_entry *peer;
  int live_nics, live_peers;
  int torn_skipped;          /* rows of live writers still torn after the retries */
  int invalid_skipped;       /* rows with impossible values (state, device) */
} rr_ht_snapshot;

typedef struct rr_ht_reader rr_ht_reader;

/* Open a table for reading (never mapped: reads go through the descriptor,
 * so a file truncated under the reader cannot raise SIGBUS) and validate it.
 * Errors: RR_ERR_INVALID (bad file: *problem says which kind, warned once
 * per process) or RR_ERR_SYSTEM (absent or not accessible: not warned, the
 * caller decides). */
rr_status rr_health_table_reader_open(const char *path, rr_ht_reader **out, rr_ht_problem *problem,
                                      char *detail, size_t detail_len);
/* Copy every claimed row. stale_after_ns 0: RERAIL_HEALTH_STALE_MS. Checks
 * first that the file is still the one opened (owner, mode, size, header):
 * RR_ERR_INVALID with snap->problem (RR_HT_TRUNCATED, RR_HT_CORRUPT,
 * RR_HT_INSECURE) and snap->detail, no rows and a warning once per process,
 * when another process truncated or rewrote it; close the reader then and
 * open again later. */
rr_status rr_health_table_reader_read(rr_ht_reader *r, uint64_t stale_after_ns, rr_ht_snapshot *snap);
void rr_health_table_reader_close(rr_ht_reader *r);

/* Open, read and close. path NULL: RERAIL_HEALTH_PATH or the default. On
 * error snap->problem and snap->detail say why; free the snapshot either way. */
rr_status rr_health_table_read(const char *path, rr_ht_snapshot *snap);
rr_status rr_health_table_read_ex(const char *path, uint64_t stale_after_ns, rr_ht_snapshot *snap);
void rr_health_table_snapshot_free(rr_ht_snapshot *snap);

/* ---- shared helpers ------------------------------------------------------------ */

/* The path in use: RERAIL_HEALTH_PATH, or the default. */
const char *rr_health_table_path(void);
/* RERAIL_HEALTH_STALE_MS in nanoseconds. */
uint64_t rr_health_table_stale_ns(void);

#endif
