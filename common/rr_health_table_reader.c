/* The health table's reader: maps the file read-only, trusts nothing it has
 * not checked (header, sizes, each row's values), copies rows with the
 * sequence lock's retry loop and judges whether their writers still live.
 * It never writes to the file and never waits for a writer beyond a bounded
 * number of retries. */
#include "rr_health_table_internal.h"
#include "rr_log.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct rr_ht_reader {
  const unsigned char *base;
  size_t size;
  rr_ht_header hdr;
  uint64_t self_pid_ns;
};

rr_status rr_health_table_reader_open(const char *path, rr_ht_reader **out, rr_ht_problem *problem,
                                      char *detail, size_t detail_len) {
  char why[200] = "";
  rr_ht_problem p = RR_HT_FINE;
  if (!out) return RR_ERR_INVALID;
  *out = NULL;
  if (!path) path = rr_health_table_path();
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  rr_ht_header h;
  memset(&h, 0, sizeof h);
  uint64_t size = 0;
  if (fd < 0) {
    p = errno == ENOENT ? RR_HT_ABSENT : errno == ELOOP ? RR_HT_INSECURE : RR_HT_NOACCESS;
    snprintf(why, sizeof why, "%s", p == RR_HT_INSECURE ? "is a symbolic link" : strerror(errno));
  } else if ((p = rr_ht_fd_check(fd, &size, why, sizeof why)) == RR_HT_FINE) {
    ssize_t n = pread(fd, &h, sizeof h, 0);
    uint64_t have = n < 0 ? 0 : (uint64_t)n;
    p = rr_ht_header_check(&h, have < sizeof h ? have : size, why, sizeof why);
  }
  void *m = MAP_FAILED;
  if (p == RR_HT_FINE) {
    m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      p = RR_HT_NOACCESS;
      snprintf(why, sizeof why, "mmap: %s", strerror(errno));
    }
  }
  if (fd >= 0) close(fd);
  if (problem) *problem = p;
  if (detail && detail_len) snprintf(detail, detail_len, "%s", why);
  if (p != RR_HT_FINE) {
    /* Absent or closed to us is a fact of the host, for the caller to word;
     * a file that is there but wrong is worth a warning. */
    if (p != RR_HT_ABSENT && p != RR_HT_NOACCESS)
      rr_ht_warn_once(&rr_ht_warned_reader, "health table %s: %s (%s): not read", path,
                      rr_ht_problem_str(p), why);
    return p == RR_HT_ABSENT || p == RR_HT_NOACCESS ? RR_ERR_SYSTEM : RR_ERR_INVALID;
  }
  rr_ht_reader *r = calloc(1, sizeof *r);
  if (!r) {
    munmap(m, (size_t)size);
    return RR_ERR_NOMEM;
  }
  r->base = m;
  r->size = (size_t)size;
  r->hdr = h;
  r->self_pid_ns = rr_ht_self_pid_ns();
  *out = r;
  return RR_OK;
}

void rr_health_table_reader_close(rr_ht_reader *r) {
  if (!r) return;
  munmap((void *)r->base, r->size);
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

/* Copy one row of nwords words into out (its entry's row, zeroed) and judge
 * it. Returns 1 when the entry is to be listed, 0 to skip the row (free,
 * torn by a live writer, foreign or invalid; the snapshot counts why). */
static int read_row(const rr_ht_reader *r, rr_ht_snapshot *snap, const rr_ht_word *row,
                    uint32_t nwords, void *out, size_t state_off, uint64_t now, row_verdict v) {
  if (atomic_load_explicit(&row[1], memory_order_relaxed) == 0) return 0;
  uint64_t words[RR_HT_NIC_WORDS > RR_HT_PEER_WORDS ? RR_HT_NIC_WORDS : RR_HT_PEER_WORDS];
  row_head h;
  if (!rr_ht_row_copy(row, nwords, words)) {
    uint64_t owner = atomic_load_explicit(&row[1], memory_order_acquire);
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
  uint64_t now = rr_ht_realtime_ns();
  snap->taken_ns = now;
  for (uint32_t i = 0; i < r->hdr.nic_rows; i++) {
    const rr_ht_word *row =
        (const rr_ht_word *)(r->base + r->hdr.nic_offset + (size_t)i * RR_HT_NIC_ROW_SIZE);
    rr_ht_nic_entry *e = &snap->nic[snap->nic_count];
    memset(e, 0, sizeof *e);
    if (!read_row(r, snap, row, RR_HT_NIC_WORDS, &e->row, offsetof(rr_ht_nic_row, state), now,
                  (row_verdict){&e->liveness, &e->torn, &e->heartbeat_age_ns}))
      continue;
    terminate(e->row.ifname, sizeof e->row.ifname);
    terminate(e->row.reason, sizeof e->row.reason);
    snap->live_nics += e->liveness == RR_HT_LIVE;
    snap->nic_count++;
  }
  for (uint32_t i = 0; i < r->hdr.peer_rows; i++) {
    const rr_ht_word *row =
        (const rr_ht_word *)(r->base + r->hdr.peer_offset + (size_t)i * RR_HT_PEER_ROW_SIZE);
    rr_ht_peer_entry *e = &snap->peer[snap->peer_count];
    memset(e, 0, sizeof *e);
    if (!read_row(r, snap, row, RR_HT_PEER_WORDS, &e->row, offsetof(rr_ht_peer_row, state), now,
                  (row_verdict){&e->liveness, &e->torn, &e->heartbeat_age_ns}))
      continue;
    terminate(e->row.ifname, sizeof e->row.ifname);
    terminate(e->row.peer, sizeof e->row.peer);
    terminate(e->row.reason, sizeof e->row.reason);
    snap->live_peers += e->liveness == RR_HT_LIVE;
    snap->peer_count++;
  }
  return RR_OK;
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
