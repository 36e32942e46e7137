/* The health table's writer: opens or creates the file, claims rows for this
 * process, and publishes row updates under the per-row sequence lock.
 *
 * Each claimed row has a private shadow copy here; an update changes the
 * shadow and then publishes the whole row (a few dozen word stores), so a
 * row in the file is always one coherent picture. A mutex orders this
 * process's own threads; nothing ever waits for another process.
 *
 * A file that another process truncates or rewrites under us. Whoever may
 * write the table (this user, the shared group, root) may also truncate it,
 * and a store into a mapped page past the new end raises SIGBUS. So rows are
 * scanned with pread(), published into the mapping through the kernel
 * (process_vm_writev on this process: a missing page is EFAULT, not a
 * signal; rr_health_table.c), and every update first checks the file's size
 * (one fstat), the heartbeat also its header. A file that changed is left
 * alone (never repaired), warned about once, and this process stops
 * publishing while data keeps moving.
 *
 * What is left: claiming and releasing a row is a compare-and-swap on its
 * owner word, which only a direct access can do; it runs right after an
 * fstat() showed the file whole, a few times per process lifetime, and a
 * truncation landing in that window (well under a microsecond) still
 * faults. Where the kernel refuses process_vm_writev (a seccomp profile),
 * stores are direct too and the same window opens at every update (said
 * once at INFO). */
#include "rr_health_table_internal.h"
#include "rr_log.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DEVS 64   /* local devices one process publishes */
#define MAX_PEERS 128 /* peer rails one process publishes */

typedef struct nic_slot {
  int dev;
  int row;            /* index in the file, -1 when none (table full, or lost) */
  rr_ht_nic_row shadow;
} nic_slot;

typedef struct peer_slot {
  int row;
  rr_ht_peer_row shadow;
} peer_slot;

struct rr_ht_writer {
  /* guards: every field below but stopped (the mapping, slots, shadows); a leaf, held
   * across pread and the row stores (process_vm_writev) of the table. */
  pthread_mutex_t lock;
  char path[PATH_MAX];
  int fd;             /* rows are scanned through it (pread) */
  unsigned char *base; /* the mapping: owner-word compare-and-swap, row stores */
  size_t size;
  int safe;           /* row stores go through the kernel (rr_ht_map_safe_probe) */
  atomic_int stopped; /* the file changed under us: publish nothing more */
  rr_ht_header hdr;
  pid_t pid;          /* a forked child inherits the mapping: it must not write */
  uint64_t start_time, pid_ns, owner, stale_ns;
  nic_slot nic[MAX_DEVS];
  int nnic;
  peer_slot peer[MAX_PEERS];
  int npeer;
};

/* File offset of row i of a kind (peer: 0 NIC rows, 1 peer rows). */
static uint64_t row_off(const rr_ht_writer *w, int peer, int i) {
  return peer ? w->hdr.peer_offset + (uint64_t)i * RR_HT_PEER_ROW_SIZE
              : w->hdr.nic_offset + (uint64_t)i * RR_HT_NIC_ROW_SIZE;
}

/* The file changed under this process: stop publishing, once and for good.
 * The mapping goes at once, so that nothing can touch it any more. Caller
 * holds w->lock. */
static void stop_publishing(rr_ht_writer *w, const char *why) {
  if (atomic_exchange(&w->stopped, 1)) return;
  rr_ht_warn_once(&rr_ht_warned_changed, "health table %s: %s: this process stops publishing "
                  "health; data keeps moving. Remove the file or point RERAIL_HEALTH_PATH "
                  "elsewhere.", w->path, why);
  munmap(w->base, w->size);
  w->base = NULL;
}

/* Is the file still whole (as long as when opened)? Caller holds w->lock.
 * with_header: also compare the header (the heartbeat does, once a second). */
static int still_whole(rr_ht_writer *w, int with_header) {
  if (atomic_load_explicit(&w->stopped, memory_order_relaxed)) return 0;
  struct stat st;
  char why[160];
  if (fstat(w->fd, &st) != 0) {
    snprintf(why, sizeof why, "fstat: %s", strerror(errno));
    stop_publishing(w, why);
    return 0;
  }
  if ((uint64_t)st.st_size != w->size) {
    snprintf(why, sizeof why, "it is %llu bytes now, %zu when opened: another process truncated "
             "or rewrote it", (unsigned long long)st.st_size, w->size);
    stop_publishing(w, why);
    return 0;
  }
  rr_ht_header h;
  if (with_header &&
      (rr_ht_pread_full(w->fd, &h, sizeof h, 0, NULL) != RR_OK || memcmp(&h, &w->hdr, sizeof h))) {
    stop_publishing(w, "its header changed since it was opened: another process rewrote it");
    return 0;
  }
  return 1;
}

/* Compare-and-swap a row's owner word, the one access through the mapping:
 * only while the file is whole. Returns 1 when swapped. */
static int cas_owner(rr_ht_writer *w, int peer, int i, uint64_t expected, uint64_t desired) {
  if (!still_whole(w, 0)) return 0;
  rr_ht_word *owner = (rr_ht_word *)(w->base + row_off(w, peer, i)) + 1;
  return atomic_compare_exchange_strong_explicit(owner, &expected, desired, memory_order_acq_rel,
                                                 memory_order_relaxed);
}

/* ---- opening ------------------------------------------------------------------ */

/* Make the file's permissions: 0600, or 0660 with the operator's group. A
 * group that cannot be applied leaves the file private (warned): safer than
 * a file the wrong group can read. */
static void set_mode(int fd, const char *path, const char *group) {
  mode_t mode = 0600;
  if (group && *group) {
    gid_t gid;
    if (rr_ht_resolve_group(group, &gid) != RR_OK)
      rr_ht_warn_once(&rr_ht_warned_group, "health table %s: RERAIL_HEALTH_GROUP=%s is not a group; "
                      "the table is private to this user (0600)", path, group);
    else if (fchown(fd, (uid_t)-1, gid) != 0)
      rr_ht_warn_once(&rr_ht_warned_group, "health table %s: cannot give it group %s (%s); the "
                      "table is private to this user (0600)", path, group, strerror(errno));
    else
      mode = 0660;
  }
  /* Explicitly: mkostemp's mode is filtered by the umask. */
  if (fchmod(fd, mode) != 0) RR_INFO(RR_SUB_INIT, "health table %s: chmod: %s", path, strerror(errno));
}

/* Build a complete file under a temporary name and link() it into place:
 * nobody ever sees a header half written. Returns 0, EEXIST (another process
 * won the race: open theirs) or an errno. */
static int create_file(const char *path, const rr_ht_writer_opts *opts, const char *group) {
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int)sizeof tmp) return ENAMETOOLONG;
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) return errno;
  set_mode(fd, path, group);
  rr_ht_header h;
  rr_ht_header_init(&h, opts && opts->nic_rows ? opts->nic_rows : RR_HT_DEFAULT_NIC_ROWS,
                    opts && opts->peer_rows ? opts->peer_rows : RR_HT_DEFAULT_PEER_ROWS);
  int err = 0;
  /* ftruncate zero-fills: every row starts free (owner 0, seq 0). */
  if (ftruncate(fd, (off_t)h.file_size) != 0 || pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h)
    err = errno ? errno : EIO;
  close(fd);
  if (!err && link(tmp, path) != 0) err = errno;
  unlink(tmp);
  return err;
}

static rr_ht_problem open_and_map(rr_ht_writer *w, const rr_ht_writer_opts *opts, char *detail,
                                  size_t len) {
  const char *group = opts && opts->group ? opts->group : getenv("RERAIL_HEALTH_GROUP");
  int fd = -1;
  for (int attempt = 0; attempt < 4 && fd < 0; attempt++) {
    /* O_NOFOLLOW: never follow a link planted at the path; O_NONBLOCK:
     * never wait on a FIFO planted there. */
    fd = open(w->path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) break;
    if (errno == ELOOP) {
      rr_ht_count_refusal(RR_HT_REFUSED_SYMLINK);
      snprintf(detail, len, "is a symbolic link");
      return RR_HT_INSECURE;
    }
    if (errno != ENOENT) {
      snprintf(detail, len, "cannot open: %s", strerror(errno));
      return RR_HT_NOACCESS;
    }
    int err = create_file(w->path, opts, group);
    if (err && err != EEXIST) {
      snprintf(detail, len, "cannot create: %s", strerror(err));
      return RR_HT_NOACCESS;
    }
  }
  if (fd < 0) {
    snprintf(detail, len, "appears and disappears");
    return RR_HT_NOACCESS;
  }
  uint64_t size = 0;
  rr_ht_header h;
  memset(&h, 0, sizeof h);
  /* Before anything is read, mapped or written: a file this process may
   * not use is left exactly as it was. */
  rr_ht_problem p = rr_ht_fd_check(fd, group, &size, detail, len);
  if (p == RR_HT_FINE) {
    ssize_t n = pread(fd, &h, sizeof h, 0);
    uint64_t have = n < 0 ? 0 : (uint64_t)n;
    p = rr_ht_header_check(&h, have < sizeof h ? have : size, detail, len);
  }
  if (p == RR_HT_FINE) {
    void *m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      snprintf(detail, len, "mmap: %s", strerror(errno));
      p = RR_HT_NOACCESS;
    } else {
      w->base = m;
      w->size = (size_t)size;
      w->hdr = h;
      w->fd = fd;
      int err;
      w->safe = rr_ht_map_safe_probe(m, &err) == RR_OK;
      if (!w->safe)
        RR_INFO(RR_SUB_INIT, "health table %s: process_vm_writev refused (%s): rows are stored "
                "directly, and a truncation of the file by another process at the wrong moment "
                "can raise SIGBUS", w->path, strerror(err));
      return RR_HT_FINE;
    }
  }
  close(fd);
  return p;
}

rr_status rr_health_table_open_writer(const char *path, const rr_ht_writer_opts *opts,
                                      rr_ht_writer **out, rr_ht_problem *problem) {
  if (!out) return RR_ERR_INVALID;
  *out = NULL;
  if (!path) path = rr_health_table_path();
  rr_ht_writer *w = calloc(1, sizeof *w);
  if (!w) return RR_ERR_NOMEM;
  pthread_mutex_init(&w->lock, NULL);
  snprintf(w->path, sizeof w->path, "%s", path);
  w->pid = getpid();
  if (rr_ht_proc_stat(w->pid, &w->start_time, NULL, NULL) != RR_OK) w->start_time = 0;
  w->pid_ns = rr_ht_self_pid_ns();
  w->owner = rr_ht_owner_word((uint32_t)w->pid, w->start_time);
  w->stale_ns = rr_health_table_stale_ns();
  char detail[256] = "";
  rr_ht_problem p = open_and_map(w, opts, detail, sizeof detail);
  if (problem) *problem = p;
  if (p != RR_HT_FINE) {
    rr_ht_warn_once(&rr_ht_warned_writer, "health table %s: %s (%s): this process publishes no "
                    "health; data keeps moving. %s", w->path, rr_ht_problem_str(p), detail,
                    p == RR_HT_NOACCESS ? "Check RERAIL_HEALTH_PATH and its directory."
                                        : "Remove the file or point RERAIL_HEALTH_PATH elsewhere.");
    pthread_mutex_destroy(&w->lock);
    free(w);
    return p == RR_HT_NOACCESS ? RR_ERR_SYSTEM : RR_ERR_INVALID;
  }
  RR_INFO(RR_SUB_INIT, "health table %s: %u NIC rows, %u peer rows", w->path, w->hdr.nic_rows,
          w->hdr.peer_rows);
  *out = w;
  return RR_OK;
}

/* ---- claiming rows ------------------------------------------------------------- */

/* May this process take a row whose owner word is owner (row copied into
 * words, consistent or not)? Free rows always; rows of processes that are
 * gone; rows from another pid namespace only when silent for long, since
 * their pid means nothing here (an owner that was merely idle notices the
 * loss at its next write and claims another row). */
static int row_expired(const rr_ht_writer *w, uint64_t owner, int consistent, uint32_t pid,
                       uint64_t pid_ns, uint64_t heartbeat_ns, uint64_t now) {
  if (owner == 0) return 1;
  if (owner == w->owner) return 0;
  if (!consistent || (uint32_t)owner != pid) return rr_ht_owner_alive(owner) == 0;
  if (pid_ns && pid_ns == w->pid_ns) return rr_ht_owner_alive(owner) == 0;
  return heartbeat_ns + 6 * w->stale_ns < now;
}

/* Claim a row of one kind: free rows first (dead processes' rows keep their
 * last words for `rerail status` as long as possible), then expired ones. */
static int claim_row(rr_ht_writer *w, int peer) {
  uint32_t rows = peer ? w->hdr.peer_rows : w->hdr.nic_rows;
  size_t nwords = peer ? RR_HT_PEER_WORDS : RR_HT_NIC_WORDS;
  uint64_t now = rr_ht_realtime_ns();
  if (!still_whole(w, 1)) return -1; /* rare: worth checking the header too */
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t i = 0; i < rows; i++) {
      if (atomic_load_explicit(&w->stopped, memory_order_relaxed)) return -1;
      uint64_t off = row_off(w, peer, (int)i), owner;
      if (rr_ht_pread_full(w->fd, &owner, sizeof owner, off + 8, NULL) != RR_OK) {
        still_whole(w, 0); /* a short read: the file shrank (stops publishing) */
        return -1;
      }
      if (pass == 0 && owner != 0) continue;
      if (pass == 1) {
        if (owner == 0 || owner == w->owner) continue;
        uint64_t words[RR_HT_NIC_WORDS];
        memset(words, 0, sizeof words);
        int ok = rr_ht_row_pread(w->fd, off, nwords, words);
        if (ok < 0) {
          still_whole(w, 0);
          return -1;
        }
        /* Torn for good (its writer died inside a write): only the owner
         * word, always whole, can be judged. */
        if (ok) owner = words[1];
        uint32_t pid;
        uint64_t ns, hb;
        if (peer) {
          rr_ht_peer_row r;
          memcpy(&r, words, sizeof r);
          pid = r.pid, ns = r.pid_ns, hb = r.heartbeat_ns;
        } else {
          rr_ht_nic_row r;
          memcpy(&r, words, sizeof r);
          pid = r.pid, ns = r.pid_ns, hb = r.heartbeat_ns;
        }
        if (!row_expired(w, owner, ok, pid, ns, hb, now)) continue;
      }
      if (cas_owner(w, peer, (int)i, owner, w->owner)) return (int)i;
    }
  }
  return -1;
}

static void stamp(rr_ht_writer *w, uint32_t *pid, uint64_t *start, uint64_t *ns, uint64_t *hb) {
  *pid = (uint32_t)w->pid;
  *start = w->start_time;
  *ns = w->pid_ns;
  *hb = rr_ht_realtime_ns();
}

static nic_slot *find_nic(rr_ht_writer *w, int dev) {
  for (int i = 0; i < w->nnic; i++)
    if (w->nic[i].dev == dev) return &w->nic[i];
  return NULL;
}

static void publish_nic(rr_ht_writer *w, nic_slot *s);

/* Caller holds w->lock. */
static nic_slot *claim_nic_locked(rr_ht_writer *w, int dev, const char *ifname) {
  nic_slot *s = find_nic(w, dev);
  if (s && s->row >= 0) return s;
  if (!s) {
    if (w->nnic == MAX_DEVS) return NULL;
    s = &w->nic[w->nnic++];
    memset(s, 0, sizeof *s);
    s->dev = dev;
    uint64_t now = rr_ht_realtime_ns();
    s->shadow.dev = dev;
    s->shadow.claimed_ns = now;
    s->shadow.since_ns = now;
    s->shadow.state = (uint32_t)rr_health_nic_get(dev);
    snprintf(s->shadow.reason, sizeof s->shadow.reason, "%s", "state when publishing began");
  }
  if (ifname && *ifname) snprintf(s->shadow.ifname, sizeof s->shadow.ifname, "%s", ifname);
  s->row = claim_row(w, 0);
  if (s->row < 0 && atomic_load(&w->stopped)) return NULL; /* warned already */
  if (s->row < 0) {
    rr_ht_warn_once(&rr_ht_warned_full, "health table %s: no free NIC row for %s (%u rows, all "
                    "in use): that device is not published", w->path, s->shadow.ifname,
                    w->hdr.nic_rows);
    return NULL;
  }
  publish_nic(w, s);
  return s;
}

/* ---- publishing ---------------------------------------------------------------- */

/* A row that another process took (it judged us dead: another pid namespace,
 * a long silence) is given up and claimed anew at the next update. */
static void lost_row(rr_ht_writer *w, int *row, const char *what) {
  rr_ht_warn_once(&rr_ht_warned_lost, "health table %s: another process took this process's %s "
                  "row %d; claiming another", w->path, what, *row);
  *row = -1;
}

/* Store a row's words, or learn that the row was taken, or that the file
 * changed under us (then publishing stops). */
static void publish_row(rr_ht_writer *w, int peer, int *row, const uint64_t *words, size_t nwords) {
  if (!still_whole(w, 0)) return;
  int rc = rr_ht_row_publish((rr_ht_word *)(w->base + row_off(w, peer, *row)), nwords, words,
                             w->owner, w->safe);
  if (rc == 1) {
    /* Taken by another process - or the whole file was rewritten (zeroed
     * owner words): then the header shows it, and publishing stops. */
    if (still_whole(w, 1)) lost_row(w, row, peer ? "peer" : "NIC");
  } else if (rc < 0) {
    char why[160];
    snprintf(why, sizeof why, "storing into row %d failed (%s): another process truncated it",
             *row, strerror(-rc));
    stop_publishing(w, why);
  }
}

static void publish_nic(rr_ht_writer *w, nic_slot *s) {
  if (getpid() != w->pid || atomic_load_explicit(&w->stopped, memory_order_relaxed)) return;
  if (s->row < 0 && (s->row = claim_row(w, 0)) < 0) return;
  stamp(w, &s->shadow.pid, &s->shadow.start_time, &s->shadow.pid_ns, &s->shadow.heartbeat_ns);
  uint64_t words[RR_HT_NIC_WORDS];
  memcpy(words, &s->shadow, sizeof words);
  publish_row(w, 0, &s->row, words, RR_HT_NIC_WORDS);
}

static void publish_peer(rr_ht_writer *w, peer_slot *s) {
  if (getpid() != w->pid || atomic_load_explicit(&w->stopped, memory_order_relaxed)) return;
  if (s->row < 0 && (s->row = claim_row(w, 1)) < 0) return;
  stamp(w, &s->shadow.pid, &s->shadow.start_time, &s->shadow.pid_ns, &s->shadow.heartbeat_ns);
  uint64_t words[RR_HT_PEER_WORDS];
  memcpy(words, &s->shadow, sizeof words);
  publish_row(w, 1, &s->row, words, RR_HT_PEER_WORDS);
}

rr_status rr_health_table_claim(rr_ht_writer *w, int dev, const char *ifname) {
  if (!w || dev < 0) return RR_ERR_INVALID;
  pthread_mutex_lock(&w->lock);
  nic_slot *s = claim_nic_locked(w, dev, ifname);
  pthread_mutex_unlock(&w->lock);
  return s ? RR_OK : atomic_load(&w->stopped) ? RR_ERR_SYSTEM : RR_ERR_NOMEM;
}

/* A peer rail's row: found by (device, peer); created only for a rail that is
 * not up (a healthy rail is not news). Caller holds w->lock. */
static peer_slot *peer_for(rr_ht_writer *w, int dev, const char *ifname, const char *peer,
                           int create) {
  for (int i = 0; i < w->npeer; i++)
    if (w->peer[i].shadow.dev == dev && !strcmp(w->peer[i].shadow.peer, peer)) return &w->peer[i];
  if (!create) return NULL;
  if (w->npeer == MAX_PEERS) {
    rr_ht_warn_once(&rr_ht_warned_full, "health table %s: this process already publishes %d peer "
                    "rails; %s is not published", w->path, MAX_PEERS, peer);
    return NULL;
  }
  peer_slot *s = &w->peer[w->npeer];
  memset(s, 0, sizeof *s);
  s->row = claim_row(w, 1);
  if (s->row < 0 && atomic_load(&w->stopped)) return NULL; /* warned already */
  if (s->row < 0) {
    rr_ht_warn_once(&rr_ht_warned_full, "health table %s: no free peer row (%u rows, all in use): "
                    "rail %s to %s is not published", w->path, w->hdr.peer_rows, ifname, peer);
    return NULL;
  }
  w->npeer++;
  s->shadow.dev = dev;
  s->shadow.state = RR_HT_UP;
  snprintf(s->shadow.ifname, sizeof s->shadow.ifname, "%s", ifname);
  snprintf(s->shadow.peer, sizeof s->shadow.peer, "%s", peer);
  return s;
}

static void peer_state(rr_ht_writer *w, int dev, const char *ifname, const char *peer,
                       rr_link_state st, const char *reason, uint64_t now) {
  if (!peer[0] || dev < 0) return;
  peer_slot *s = peer_for(w, dev, ifname, peer, st != RR_LINK_UP);
  if (!s) return;
  if (s->shadow.state != (uint32_t)st || !s->shadow.since_ns) {
    s->shadow.state = (uint32_t)st;
    s->shadow.since_ns = now;
    s->shadow.changes++;
  }
  if (ifname[0]) snprintf(s->shadow.ifname, sizeof s->shadow.ifname, "%s", ifname);
  snprintf(s->shadow.reason, sizeof s->shadow.reason, "%s", reason);
  publish_peer(w, s);
}

/* The NIC row of dev, claimed on first mention when the event names it
 * (*fresh set then: the event is its first news, not a repeat). */
static nic_slot *nic_for(rr_ht_writer *w, int dev, const char *ifname, int *fresh) {
  if (fresh) *fresh = 0;
  if (dev < 0) return NULL;
  nic_slot *s = find_nic(w, dev);
  if (s || !ifname || !ifname[0]) return s;
  if (fresh) *fresh = 1;
  return claim_nic_locked(w, dev, ifname);
}

void rr_health_table_event(rr_ht_writer *w, const rr_health_event *ev) {
  if (!w || !ev) return;
  uint64_t now = ev->wall_ns ? ev->wall_ns : rr_ht_realtime_ns();
  pthread_mutex_lock(&w->lock);
  nic_slot *s;
  int fresh;
  switch (ev->kind) {
  case RR_HEV_NIC_STATE:
    if ((s = nic_for(w, ev->dev, ev->ifname, &fresh))) {
      if (fresh || s->shadow.state != (uint32_t)ev->state) {
        s->shadow.state = (uint32_t)ev->state;
        s->shadow.since_ns = now;
        s->shadow.state_changes++;
        snprintf(s->shadow.reason, sizeof s->shadow.reason, "%s", ev->reason);
      }
      publish_nic(w, s);
    }
    break;
  case RR_HEV_RAIL_STATE:
    peer_state(w, ev->dev, ev->ifname, ev->peer, ev->state, ev->reason, now);
    break;
  case RR_HEV_FAILOVER:
  case RR_HEV_FAILBACK:
    if ((s = nic_for(w, ev->dev, ev->ifname, NULL))) {
      if (ev->kind == RR_HEV_FAILOVER) s->shadow.failovers_from++;
      publish_nic(w, s);
    }
    if ((s = nic_for(w, ev->to_dev, ev->to_ifname, NULL))) {
      if (ev->kind == RR_HEV_FAILOVER) s->shadow.failovers_to++;
      else s->shadow.failbacks++;
      publish_nic(w, s);
    }
    /* A fail-back is also the news that the rail to the peer healed. */
    if (ev->kind == RR_HEV_FAILBACK)
      peer_state(w, ev->to_dev, ev->to_ifname, ev->peer, RR_LINK_UP, ev->reason, now);
    break;
  case RR_HEV_ERROR:
    if ((s = nic_for(w, ev->dev, ev->ifname, NULL))) {
      s->shadow.errors++;
      publish_nic(w, s);
    }
    break;
  case RR_HEV_ANOMALY: /* the telemetry exporter's business */
    break;
  }
  pthread_mutex_unlock(&w->lock);
}

void rr_health_table_figures(rr_ht_writer *w, int dev, int dir, uint64_t bytes_per_s,
                             uint64_t p50_ns, uint64_t p99_ns) {
  if (!w || (dir != RR_HT_TX && dir != RR_HT_RX)) return;
  pthread_mutex_lock(&w->lock);
  nic_slot *s = find_nic(w, dev);
  if (s) {
    rr_ht_figures *f = dir == RR_HT_TX ? &s->shadow.tx : &s->shadow.rx;
    f->bytes_per_s = bytes_per_s;
    f->p50_ns = p50_ns;
    f->p99_ns = p99_ns;
    s->shadow.figures_ns = rr_ht_realtime_ns();
    publish_nic(w, s);
  }
  pthread_mutex_unlock(&w->lock);
}

void rr_health_table_heartbeat(rr_ht_writer *w) {
  if (!w) return;
  pthread_mutex_lock(&w->lock);
  /* Once a second: is the file still the one opened, header and all? */
  still_whole(w, 1);
  for (int i = 0; i < w->nnic; i++) publish_nic(w, &w->nic[i]);
  for (int i = 0; i < w->npeer; i++) publish_peer(w, &w->peer[i]);
  pthread_mutex_unlock(&w->lock);
}

/* Release: clear the row under the lock (readers then see pid 0 and skip it),
 * then free the owner word. */
static void release_row(rr_ht_writer *w, int peer, int i) {
  uint64_t zero[RR_HT_NIC_WORDS];
  memset(zero, 0, sizeof zero);
  if (!still_whole(w, 0)) return;
  size_t nwords = peer ? RR_HT_PEER_WORDS : RR_HT_NIC_WORDS;
  if (rr_ht_row_publish((rr_ht_word *)(w->base + row_off(w, peer, i)), nwords, zero, w->owner,
                        w->safe) != 0)
    return;
  cas_owner(w, peer, i, w->owner, 0);
}

void rr_health_table_close_writer(rr_ht_writer *w) {
  if (!w) return;
  pthread_mutex_lock(&w->lock);
  /* A forked child must not release its parent's rows. */
  if (getpid() == w->pid) {
    for (int i = 0; i < w->nnic; i++)
      if (w->nic[i].row >= 0) release_row(w, 0, w->nic[i].row);
    for (int i = 0; i < w->npeer; i++)
      if (w->peer[i].row >= 0) release_row(w, 1, w->peer[i].row);
  }
  if (w->base) munmap(w->base, w->size);
  close(w->fd);
  pthread_mutex_unlock(&w->lock);
  pthread_mutex_destroy(&w->lock);
  free(w);
}

int rr_health_table_publishing(rr_ht_writer *w) {
  return w && !atomic_load_explicit(&w->stopped, memory_order_relaxed);
}
