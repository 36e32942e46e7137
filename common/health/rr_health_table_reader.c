/* The health table's reader: reads the file through its descriptor, trusts
 * nothing it has not checked (owner, header, sizes, each row's values),
 * copies rows with the sequence lock's retry loop and judges whether their
 * writers still live. It never writes to the file and never waits for a
 * writer beyond a bounded number of retries.
 *
 * It never maps the file: whoever may write the table may also truncate it,
 * and a mapped page past the new end would raise SIGBUS in the reader's
 * process (NCCL's, the tuner's, `rerail status`). pread() past the end is a
 * short read: the snapshot then fails with RR_HT_TRUNCATED and the caller
 * goes on without the table. */
#include "rr_health_table_internal.h"
#include "rr_log.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct rr_ht_reader {
  int fd;
  uint64_t size;       /* the file's size when opened: rows end there */
  rr_ht_header hdr;
  uint64_t self_pid_ns;
  uint64_t *copies;    /* three copies of the rows, see read_rows() */
  char path[PATH_MAX];
};

/* Readers apply the writers' rule of who may use a file (rr_health_table.h),
 * root included: a table another user planted must not mislead `rerail
 * status` or the tuner run by root any more than it may mislead a job. */
static const char *reader_group(void) { return getenv("RERAIL_HEALTH_GROUP"); }

rr_status rr_health_table_reader_open(const char *path, rr_ht_reader **out, rr_ht_problem *problem,
                                      char *detail, size_t detail_len) {
  char why[200] = "";
  rr_ht_problem p = RR_HT_FINE;
  if (!out) return RR_ERR_INVALID;
  *out = NULL;
  if (!path) path = rr_health_table_path();
  /* O_NOFOLLOW: a symbolic link planted at the path is refused, not
   * followed to a file of the planter's choosing. O_NONBLOCK: a FIFO planted
   * there would block this open until someone writes to it. */
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  rr_ht_header h;
  memset(&h, 0, sizeof h);
  uint64_t size = 0;
  if (fd < 0) {
    p = errno == ENOENT ? RR_HT_ABSENT : errno == ELOOP ? RR_HT_INSECURE : RR_HT_NOACCESS;
    snprintf(why, sizeof why, "%s", p == RR_HT_INSECURE ? "is a symbolic link" : strerror(errno));
    if (p == RR_HT_INSECURE) rr_ht_count_refusal(RR_HT_REFUSED_SYMLINK);
  } else if ((p = rr_ht_fd_check(fd, reader_group(), &size, why, sizeof why)) == RR_HT_FINE) {
    ssize_t n = pread(fd, &h, sizeof h, 0);
    uint64_t have = n < 0 ? 0 : (uint64_t)n;
    p = rr_ht_header_check(&h, have < sizeof h ? have : size, why, sizeof why);
  }
  rr_ht_reader *r = NULL;
  if (p == RR_HT_FINE) {
    r = calloc(1, sizeof *r);
    /* size is the header's file_size here, at most ~37 MiB (RR_HT_MAX_ROWS). */
    uint64_t *copies = r ? malloc(3 * (size_t)(size - h.nic_offset)) : NULL;
    if (!copies) {
      free(r);
      if (fd >= 0) close(fd);
      return RR_ERR_NOMEM;
    }
    r->copies = copies;
  }
  if (problem) *problem = p;
  if (detail && detail_len) snprintf(detail, detail_len, "%s", why);
  if (p != RR_HT_FINE) {
    if (fd >= 0) close(fd);
    /* Absent or closed to us is a fact of the host, for the caller to word;
     * a file that is there but wrong is worth a warning. */
    if (p != RR_HT_ABSENT && p != RR_HT_NOACCESS)
      rr_ht_warn_once(&rr_ht_warned_reader, "health table %s: %s (%s): not read", path,
                      rr_ht_problem_str(p), why);
    return p == RR_HT_ABSENT || p == RR_HT_NOACCESS ? RR_ERR_SYSTEM : RR_ERR_INVALID;
  }
  r->fd = fd;
  r->size = size;
  r->hdr = h;
  r->self_pid_ns = rr_ht_self_pid_ns();
  snprintf(r->path, sizeof r->path, "%s", path);
  *out = r;
  return RR_OK;
}

void rr_health_table_reader_close(rr_ht_reader *r) {
  if (!r) return;
  close(r->fd);
  free(r->copies);
  free(r);
}

/* A consistent copy whose identity fields disagree with its owner word is a
 * claim or a release in progress; values no writer produces mean a bug or a
 * scribbled file: neither is shown. */
static int identity_ok(uint64_t owner, uint32_t pid, uint64_t start_time) {
  return owner != 0 && pid == (uint32_t)owner &&
         (uint32_t)start_time == (uint32_t)(owner >> 32);
}

static int values_ok(uint32_t state, int32_t dev) {
  return state <= RR_HT_RECOVERING && dev >= 0 && dev < (int32_t)RR_HT_MAX_ROWS;
}

static void terminate(char *s, size_t n) { s[n - 1] = '\0'; }

static rr_ht_liveness judge(const rr_ht_reader *r, uint64_t owner, uint64_t pid_ns,
                            uint64_t heartbeat_ns, uint64_t now, uint64_t stale_ns,
                            uint64_t *age) {
  *age = now > heartbeat_ns ? now - heartbeat_ns : 0;
  /* A pid means something only in its own namespace; elsewhere the heartbeat
   * is all there is. */
  if (pid_ns && pid_ns == r->self_pid_ns && rr_ht_owner_alive(owner) == 0) return RR_HT_GONE;
  return *age > stale_ns ? RR_HT_AGED : RR_HT_LIVE;
}

/* A row still torn after every retry: its writer is either slow (preempted
 * inside a write: skip the row this time) or died inside one (show it as
 * gone, fields untrusted, so that its death is visible). */
static int torn_but_gone(uint64_t owner) { return owner && rr_ht_owner_alive(owner) == 0; }

/* Both row kinds open with the same fields at the same offsets. */
typedef struct row_head {
  uint64_t seq, owner;
  uint32_t pid;
  int32_t dev;
  uint64_t start_time, pid_ns, heartbeat_ns;
} row_head;
#define SAME_HEAD(T)                                                                               \
  _Static_assert(offsetof(T, owner) == offsetof(row_head, owner) &&                                \
                     offsetof(T, dev) == offsetof(row_head, dev) &&                                \
                     offsetof(T, start_time) == offsetof(row_head, start_time) &&                  \
                     offsetof(T, heartbeat_ns) == offsetof(row_head, heartbeat_ns),                \
                 #T " opens with the common row head")
SAME_HEAD(rr_ht_nic_row);
SAME_HEAD(rr_ht_peer_row);

/* What the reader makes of one row, NIC or peer. */
typedef struct row_verdict {
  rr_ht_liveness *liveness;
  int *torn;
  uint64_t *age;
} row_verdict;

/* The rows as three whole copies taken one after the other (before, data,
 * after: one pread each, ordered by fences). A row's data copy is
 * consistent when its sequence word read the same even value in the copies
 * before and after it: no write began in between. That costs three system
 * calls for the whole table instead of three per row; only rows a writer
 * was inside are read again on their own (rr_ht_row_pread). */
typedef struct row_copies {
  const uint64_t *before, *data, *after;
  uint64_t base; /* file offset of word 0 */
} row_copies;

/* Copy one row of nwords words at file offset off into out (its entry's
 * row, zeroed) and judge it. Returns 1 when the entry is to be listed, 0 to
 * skip the row (free, torn by a live writer, foreign or invalid; the
 * snapshot counts why), or a negative errno when the file no longer holds it. */
static int read_row(const rr_ht_reader *r, rr_ht_snapshot *snap, const row_copies *c,
                    uint64_t off, uint32_t nwords, void *out, size_t state_off, uint64_t now,
                    row_verdict v) {
  size_t w0 = (size_t)((off - c->base) / 8);
  if (c->data[w0 + 1] == 0) return 0; /* free */
  uint64_t words[RR_HT_NIC_WORDS > RR_HT_PEER_WORDS ? RR_HT_NIC_WORDS : RR_HT_PEER_WORDS];
  row_head h;
  int ok = 1;
  if (c->before[w0] == c->after[w0] && !(c->before[w0] & 1)) {
    memcpy(words, c->data + w0, (size_t)nwords * 8);
    words[0] = c->before[w0];
  } else if (c->before[w0] == c->after[w0] && torn_but_gone(c->data[w0 + 1])) {
    ok = 0; /* its writer died inside a write: retrying cannot help */
  } else if ((ok = rr_ht_row_pread(r->fd, off, nwords, words)) < 0) {
    return ok;
  }
  if (!ok) {
    uint64_t owner = 0;
    int err;
    if (rr_ht_pread_full(r->fd, &owner, sizeof owner, off + 8, &err) != RR_OK) return -err;
    if (!torn_but_gone(owner)) {
      snap->torn_skipped++;
      return 0;
    }
    h = (row_head){.owner = owner, .pid = (uint32_t)owner, .dev = -1};
    memcpy(out, &h, sizeof h);
    *v.liveness = RR_HT_GONE;
    *v.torn = 1;
    return 1;
  }
  memcpy(out, words, (size_t)nwords * 8);
  memcpy(&h, out, sizeof h);
  uint32_t state;
  memcpy(&state, (const char *)out + state_off, sizeof state);
  if (!identity_ok(h.owner, h.pid, h.start_time)) return 0;
  if (!values_ok(state, h.dev)) {
    snap->invalid_skipped++;
    return 0;
  }
  *v.liveness = judge(r, h.owner, h.pid_ns, h.heartbeat_ns, now, snap->stale_after_ns, v.age);
  return 1;
}

/* Is the file still the one that was opened? Another process that may write
 * it can truncate, grow or rewrite it at any time. */
static rr_ht_problem still_same(const rr_ht_reader *r, char *why, size_t len) {
  uint64_t size = 0;
  rr_ht_problem p = rr_ht_fd_check(r->fd, reader_group(), &size, why, len);
  if (p != RR_HT_FINE) return p;
  if (size != r->size) {
    snprintf(why, len, "%llu bytes now, %llu when opened: another process truncated or rewrote it",
             (unsigned long long)size, (unsigned long long)r->size);
    return size < r->size ? RR_HT_TRUNCATED : RR_HT_CORRUPT;
  }
  rr_ht_header h;
  int shrank = rr_ht_pread_full(r->fd, &h, sizeof h, 0, NULL) != RR_OK;
  if (shrank || memcmp(&h, &r->hdr, sizeof h)) {
    snprintf(why, len, "%s", shrank ? "shrank while being read" : "its header changed since it was opened");
    return shrank ? RR_HT_TRUNCATED : RR_HT_CORRUPT;
  }
  return RR_HT_FINE;
}

/* Fill snap from the file; RR_HT_FINE or what went wrong (why says more). */
static rr_ht_problem read_rows(rr_ht_reader *r, rr_ht_snapshot *snap, char *why, size_t len) {
  rr_ht_problem p = still_same(r, why, len);
  if (p != RR_HT_FINE) return p;
  size_t bytes = (size_t)(r->size - r->hdr.nic_offset), words = bytes / 8;
  uint64_t *copy[3] = {r->copies, r->copies + words, r->copies + 2 * words};
  for (int k = 0; k < 3; k++) {
    if (k) atomic_thread_fence(memory_order_acquire);
    if (rr_ht_pread_full(r->fd, copy[k], bytes, r->hdr.nic_offset, NULL) != RR_OK) goto shrank;
  }
  row_copies c = {copy[0], copy[1], copy[2], r->hdr.nic_offset};
  uint64_t now = snap->taken_ns;
  for (uint32_t i = 0; i < r->hdr.nic_rows; i++) {
    rr_ht_nic_entry *e = &snap->nic[snap->nic_count];
    memset(e, 0, sizeof *e);
    int rc = read_row(r, snap, &c, r->hdr.nic_offset + (uint64_t)i * RR_HT_NIC_ROW_SIZE,
                      RR_HT_NIC_WORDS, &e->row, offsetof(rr_ht_nic_row, state), now,
                      (row_verdict){&e->liveness, &e->torn, &e->heartbeat_age_ns});
    if (rc < 0) goto shrank;
    if (!rc) continue;
    terminate(e->row.ifname, sizeof e->row.ifname);
    terminate(e->row.reason, sizeof e->row.reason);
    snap->live_nics += e->liveness == RR_HT_LIVE;
    snap->nic_count++;
  }
  for (uint32_t i = 0; i < r->hdr.peer_rows; i++) {
    rr_ht_peer_entry *e = &snap->peer[snap->peer_count];
    memset(e, 0, sizeof *e);
    int rc = read_row(r, snap, &c, r->hdr.peer_offset + (uint64_t)i * RR_HT_PEER_ROW_SIZE,
                      RR_HT_PEER_WORDS, &e->row, offsetof(rr_ht_peer_row, state), now,
                      (row_verdict){&e->liveness, &e->torn, &e->heartbeat_age_ns});
    if (rc < 0) goto shrank;
    if (!rc) continue;
    terminate(e->row.ifname, sizeof e->row.ifname);
    terminate(e->row.peer, sizeof e->row.peer);
    terminate(e->row.reason, sizeof e->row.reason);
    snap->live_peers += e->liveness == RR_HT_LIVE;
    snap->peer_count++;
  }
  return RR_HT_FINE;
shrank:
  snprintf(why, len, "shrank while being read: another process truncated it");
  return RR_HT_TRUNCATED;
}

rr_status rr_health_table_reader_read(rr_ht_reader *r, uint64_t stale_after_ns,
                                      rr_ht_snapshot *snap) {
  if (!r || !snap) return RR_ERR_INVALID;
  memset(snap, 0, sizeof *snap);
  snap->header = r->hdr;
  snap->stale_after_ns = stale_after_ns ? stale_after_ns : rr_health_table_stale_ns();
  snap->nic = calloc(r->hdr.nic_rows, sizeof *snap->nic);
  snap->peer = calloc(r->hdr.peer_rows, sizeof *snap->peer);
  if (!snap->nic || !snap->peer) {
    rr_health_table_snapshot_free(snap);
    return RR_ERR_NOMEM;
  }
  snap->taken_ns = rr_ht_realtime_ns();
  rr_ht_problem p = read_rows(r, snap, snap->detail, sizeof snap->detail);
  if (p == RR_HT_FINE) return RR_OK;
  /* Nothing half read reaches the caller: no rows, the problem and why. */
  rr_health_table_snapshot_free(snap);
  snap->problem = p;
  snap->live_nics = snap->live_peers = 0;
  rr_ht_warn_once(&rr_ht_warned_changed, "health table %s: %s (%s): not read; reopen it to try "
                  "again", r->path, rr_ht_problem_str(p), snap->detail);
  return RR_ERR_INVALID;
}

rr_status rr_health_table_read_ex(const char *path, uint64_t stale_after_ns, rr_ht_snapshot *snap) {
  if (!snap) return RR_ERR_INVALID;
  memset(snap, 0, sizeof *snap);
  rr_ht_reader *r;
  rr_ht_problem p;
  rr_status st = rr_health_table_reader_open(path, &r, &p, snap->detail, sizeof snap->detail);
  if (st != RR_OK) {
    snap->problem = p;
    return st;
  }
  st = rr_health_table_reader_read(r, stale_after_ns, snap);
  rr_health_table_reader_close(r);
  return st;
}

rr_status rr_health_table_read(const char *path, rr_ht_snapshot *snap) {
  return rr_health_table_read_ex(path, 0, snap);
}

void rr_health_table_snapshot_free(rr_ht_snapshot *snap) {
  if (!snap) return;
  free(snap->nic);
  free(snap->peer);
  snap->nic = NULL;
  snap->peer = NULL;
  snap->nic_count = snap->peer_count = 0;
}
