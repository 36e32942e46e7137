/* The health table's shared core: header checks, the per-row sequence lock,
 * process identity and liveness, settings. Writer and reader build on it
 * (rr_health_table_writer.c, rr_health_table_reader.c). */
#include "rr_health_table_internal.h"
#include "rr_log.h"
#include "rr_params.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

atomic_int rr_ht_warned_writer, rr_ht_warned_reader, rr_ht_warned_full, rr_ht_warned_group,
    rr_ht_warned_lost, rr_ht_warned_changed;

void rr_ht_reset_warnings(void) {
  atomic_store(&rr_ht_warned_writer, 0);
  atomic_store(&rr_ht_warned_reader, 0);
  atomic_store(&rr_ht_warned_full, 0);
  atomic_store(&rr_ht_warned_group, 0);
  atomic_store(&rr_ht_warned_lost, 0);
  atomic_store(&rr_ht_warned_changed, 0);
}

void rr_ht_warn_once(atomic_int *flag, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* The same broken file is met again at every communicator's init: say it
   * loudly once, then only for those who asked for details. */
  if (atomic_exchange(flag, 1) == 0) RR_WARN("%s", msg);
  else RR_INFO(RR_SUB_INIT, "%s", msg);
}

const char *rr_ht_problem_str(rr_ht_problem p) {
  switch (p) {
  case RR_HT_FINE: return "fine";
  case RR_HT_ABSENT: return "absent";
  case RR_HT_NOACCESS: return "not accessible";
  case RR_HT_FOREIGN: return "not a rerail health table";
  case RR_HT_OTHER_VERSION: return "another layout version";
  case RR_HT_CORRUPT: return "corrupt";
  case RR_HT_TRUNCATED: return "truncated";
  case RR_HT_INSECURE: return "insecure";
  }
  return "unknown";
}

const char *rr_health_table_path(void) {
  const char *p = getenv("RERAIL_HEALTH_PATH");
  return p && *p ? p : RR_HT_DEFAULT_PATH;
}

uint64_t rr_health_table_stale_ns(void) {
  /* Readers ask on every snapshot: parse (and warn about a bad value) only
   * when the variable changed, not on every call. */
  /* guards: seen, ms; a leaf. */
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static char seen[64] = "\1"; /* matches no value: the first call parses */
  static uint64_t ms;
  const char *v = getenv("RERAIL_HEALTH_STALE_MS");
  pthread_mutex_lock(&lock);
  if (strncmp(seen, v ? v : "", sizeof seen)) {
    ms = rr_param_parse_u64("RERAIL_HEALTH_STALE_MS", v, RR_HT_STALE_MS, 100, 3600000);
    snprintf(seen, sizeof seen, "%s", v ? v : "");
  }
  uint64_t r = ms * 1000000ull;
  pthread_mutex_unlock(&lock);
  return r;
}

uint64_t rr_ht_realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- sequence lock, without SIGBUS -----------------------------------------
 *
 * Whoever may write the table (its owner, the shared group, root) may also
 * truncate it, and touching a mapped page past the new end raises SIGBUS,
 * which would kill NCCL's process. So:
 *
 * Readers copy rows with pread(): a read past the end is a short read,
 * reported as such. (pread takes no lock a writer waits on.)
 *
 * Writers keep the mapping - claiming a row is a compare-and-swap, which
 * needs shared memory - but store into it with process_vm_writev() on their
 * own process: the kernel resolves the page itself and answers EFAULT where
 * a direct store would fault. Not pwrite(): it takes the inode lock, so one
 * writer preempted inside it would stall every other writer of the host.
 * Where the kernel refuses process_vm_* (a seccomp profile), writers store
 * directly and rely on the fstat() before each update (rr_health_table_writer.c).
 *
 * The kernel's copy may move an 8-byte word in pieces (it does not for an
 * aligned word on x86-64 or arm64, but nothing promises it). The protocol
 * stays sound: a writer's odd store changes only the lowest bit, and a
 * reader accepts a copy only when two reads of seq, before and after the
 * data, are equal and even - a seq caught mid-store is either odd or a value
 * no later read equals. Fences between the system calls order them as the
 * atomic loads and stores of the mapped protocol are ordered. */

#define COPY_TRIES 256

/* pread_full with the errno as the result (0: none), for row_pread's callers. */
static int pread_errno(int fd, void *buf, size_t len, uint64_t off) {
  unsigned char *p = buf;
  while (len) {
    ssize_t n = pread(fd, p, len, (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return ENODATA; /* the file ends before the range does */
    p += n, off += (uint64_t)n, len -= (size_t)n;
  }
  return 0;
}

rr_status rr_ht_pread_full(int fd, void *buf, size_t len, uint64_t off, int *err) {
  int e = pread_errno(fd, buf, len, off);
  if (err) *err = e;
  return e ? RR_ERR_SYSTEM : RR_OK;
}

int rr_ht_row_pread(int fd, uint64_t off, size_t nwords, uint64_t *out) {
  for (int t = 0; t < COPY_TRIES; t++) {
    uint64_t s1, s2;
    int rc = pread_errno(fd, &s1, sizeof s1, off);
    if (rc) return -rc;
    if (s1 & 1) {
      /* A writer is inside: it finishes in microseconds unless it was
       * preempted, so let it run rather than spin against it. */
      if (t & 1) sched_yield();
      continue;
    }
    atomic_thread_fence(memory_order_acquire);
    if ((rc = pread_errno(fd, out, nwords * 8, off))) return -rc;
    atomic_thread_fence(memory_order_acquire);
    if ((rc = pread_errno(fd, &s2, sizeof s2, off))) return -rc;
    if (s1 == s2) {
      out[0] = s1;
      return 1;
    }
  }
  return 0;
}

/* Copy len bytes from src to dst, one of which lies in the mapped table,
 * through the kernel: 0, -EFAULT when the page is gone (the file shrank), or
 * another -errno (-ENOSYS, -EPERM: process_vm_* refused). */
static int vm_copy(void *dst, const void *src, size_t len, int to_map) {
  struct iovec local = {to_map ? (void *)src : dst, len};
  struct iovec remote = {to_map ? dst : (void *)src, len};
  for (;;) {
    ssize_t n = to_map ? process_vm_writev(getpid(), &local, 1, &remote, 1, 0)
                       : process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    return (size_t)n == len ? 0 : -EFAULT; /* a partial copy stopped at a missing page */
  }
}

rr_status rr_ht_map_safe_probe(const void *map, int *err) {
  uint64_t w;
  int rc = vm_copy(&w, map, sizeof w, 0);
  if (err) *err = -rc;
  return rc ? RR_ERR_UNSUPPORTED : RR_OK;
}

int rr_ht_row_publish(rr_ht_word *row, size_t nwords, const uint64_t *src, uint64_t owner,
                      int safe) {
  uint64_t now_owner, s;
  int rc;
  if (!safe) {
    if (atomic_load_explicit(&row[1], memory_order_acquire) != owner) return 1;
    s = atomic_load_explicit(&row[0], memory_order_relaxed);
  } else if ((rc = vm_copy(&now_owner, &row[1], 8, 0)) || (rc = vm_copy(&s, &row[0], 8, 0))) {
    return rc;
  } else if (now_owner != owner) {
    return 1;
  }
  atomic_thread_fence(memory_order_acquire);
  /* Odd here means the row's previous owner died inside a write. */
  uint64_t odd = (s & 1) ? s + 2 : s + 1, even = odd + 1;
  if (safe) {
    if ((rc = vm_copy(&row[0], &odd, 8, 1))) return rc;
    /* Orders the odd sequence before every data store below: a reader that
     * sees any new word also sees the sequence move. */
    atomic_thread_fence(memory_order_release);
    if ((rc = vm_copy(&row[2], &src[2], (nwords - 2) * 8, 1))) return rc;
    atomic_thread_fence(memory_order_release);
    return vm_copy(&row[0], &even, 8, 1);
  }
  atomic_store_explicit(&row[0], odd, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  for (size_t i = 2; i < nwords; i++) atomic_store_explicit(&row[i], src[i], memory_order_relaxed);
  atomic_store_explicit(&row[0], even, memory_order_release);
  return 0;
}

/* ---- header ------------------------------------------------------------------- */

uint64_t rr_ht_header_checksum(const rr_ht_header *h) {
  const unsigned char *p = (const unsigned char *)h;
  uint64_t x = 1469598103934665603ull;
  for (size_t i = 0; i < offsetof(rr_ht_header, checksum); i++) x = (x ^ p[i]) * 1099511628211ull;
  return x;
}

void rr_ht_header_init(rr_ht_header *h, uint32_t nic_rows, uint32_t peer_rows) {
  memset(h, 0, sizeof *h);
  memcpy(h->magic, RR_HT_MAGIC, sizeof h->magic);
  h->version = RR_HT_VERSION;
  h->header_size = RR_HT_HEADER_SIZE;
  h->nic_row_size = RR_HT_NIC_ROW_SIZE;
  h->nic_rows = nic_rows;
  h->peer_row_size = RR_HT_PEER_ROW_SIZE;
  h->peer_rows = peer_rows;
  h->nic_offset = RR_HT_HEADER_SIZE;
  h->peer_offset = h->nic_offset + (uint64_t)nic_rows * RR_HT_NIC_ROW_SIZE;
  h->file_size = h->peer_offset + (uint64_t)peer_rows * RR_HT_PEER_ROW_SIZE;
  h->created_ns = rr_ht_realtime_ns();
  h->byte_order = RR_HT_BYTE_ORDER;
  h->creator_pid = (uint32_t)getpid();
  h->checksum = rr_ht_header_checksum(h);
}

#define FAIL(problem, ...)                                                                         \
  do {                                                                                             \
    snprintf(detail, len, __VA_ARGS__);                                                            \
    return (problem);                                                                              \
  } while (0)

rr_ht_problem rr_ht_header_check(const rr_ht_header *h, uint64_t file_size, char *detail,
                                 size_t len) {
  if (file_size < sizeof *h)
    FAIL(file_size >= 12 && !memcmp(h->magic, RR_HT_MAGIC, 8) ? RR_HT_TRUNCATED : RR_HT_FOREIGN,
         "%llu bytes, shorter than a header", (unsigned long long)file_size);
  if (memcmp(h->magic, RR_HT_MAGIC, sizeof h->magic)) FAIL(RR_HT_FOREIGN, "wrong magic");
  /* version before anything else: nothing past it is known for another one. */
  if (h->version != RR_HT_VERSION)
    FAIL(RR_HT_OTHER_VERSION, "layout version %u, this build reads %u", h->version, RR_HT_VERSION);
  if (h->byte_order != RR_HT_BYTE_ORDER) FAIL(RR_HT_FOREIGN, "written with another byte order");
  if (h->checksum != rr_ht_header_checksum(h)) FAIL(RR_HT_CORRUPT, "header checksum mismatch");
  if (h->header_size != RR_HT_HEADER_SIZE || h->nic_row_size != RR_HT_NIC_ROW_SIZE ||
      h->peer_row_size != RR_HT_PEER_ROW_SIZE)
    FAIL(RR_HT_CORRUPT, "header/row sizes %u/%u/%u, expected %u/%u/%u", h->header_size,
         h->nic_row_size, h->peer_row_size, RR_HT_HEADER_SIZE, RR_HT_NIC_ROW_SIZE,
         RR_HT_PEER_ROW_SIZE);
  if (h->nic_rows < 1 || h->nic_rows > RR_HT_MAX_ROWS || h->peer_rows < 1 ||
      h->peer_rows > RR_HT_MAX_ROWS)
    FAIL(RR_HT_CORRUPT, "row counts %u/%u out of range", h->nic_rows, h->peer_rows);
  uint64_t peer_off = h->header_size + (uint64_t)h->nic_rows * h->nic_row_size;
  uint64_t size = peer_off + (uint64_t)h->peer_rows * h->peer_row_size;
  if (h->nic_offset != h->header_size || h->peer_offset != peer_off || h->file_size != size)
    FAIL(RR_HT_CORRUPT, "offsets do not match the row counts");
  if (file_size < size)
    FAIL(RR_HT_TRUNCATED, "%llu bytes, the header says %llu", (unsigned long long)file_size,
         (unsigned long long)size);
  if (file_size > size)
    FAIL(RR_HT_CORRUPT, "%llu bytes, the header says %llu", (unsigned long long)file_size,
         (unsigned long long)size);
  return RR_HT_FINE;
}

rr_status rr_ht_resolve_group(const char *g, gid_t *gid) {
  char *end;
  unsigned long v = strtoul(g, &end, 10);
  if (*g && !*end) {
    *gid = (gid_t)v;
    return RR_OK;
  }
  struct group grp, *res = NULL;
  char buf[4096];
  if (getgrnam_r(g, &grp, buf, sizeof buf, &res) != 0 || !res) return RR_ERR_INVALID;
  *gid = res->gr_gid;
  return RR_OK;
}

/* ---- who may use a file ------------------------------------------------------ */

static _Atomic uint64_t refusals[RR_HT_REFUSAL_KINDS];

void rr_ht_count_refusal(rr_ht_refusal why) {
  if (why > RR_HT_TRUSTED && why < RR_HT_REFUSAL_KINDS)
    atomic_fetch_add_explicit(&refusals[why], 1, memory_order_relaxed);
}

uint64_t rr_health_table_refusals(rr_ht_refusal why) {
  if (why <= RR_HT_TRUSTED || why >= RR_HT_REFUSAL_KINDS) return 0;
  return atomic_load_explicit(&refusals[why], memory_order_relaxed);
}

/* Whose table may this process use? Its own (owner == euid), or one the
 * operator shares through RERAIL_HEALTH_GROUP, made as a writer makes such
 * a table (that group, mode 0660). Root gets no exception: root could open
 * any file, and that is the danger - an unprivileged user who pre-creates
 * the path would otherwise feed data to root's jobs (and its readers), or
 * read their health, or truncate the table under them. The mode is exact
 * so that a table someone chmod'ed open (or to a mode no writer gives)
 * stops being trusted rather than being guessed about. */
rr_ht_refusal rr_ht_trust(const struct stat *st, uid_t euid, const char *group) {
  if (!S_ISREG(st->st_mode)) return RR_HT_REFUSED_NOT_REGULAR;
  /* Anyone could scribble into it: nothing it says can be trusted. */
  if (st->st_mode & S_IWOTH) return RR_HT_REFUSED_OTHER_WRITABLE;
  if (st->st_uid == euid) return RR_HT_TRUSTED;
  gid_t gid;
  if (!group || !*group || rr_ht_resolve_group(group, &gid) != RR_OK || st->st_gid != gid)
    return RR_HT_REFUSED_OWNER;
  if ((st->st_mode & 07777) != RR_HT_GROUP_MODE) return RR_HT_REFUSED_GROUP_MODE;
  return RR_HT_TRUSTED;
}

/* Say why st was refused, in words an operator acts on. */
static void describe_refusal(rr_ht_refusal why, const struct stat *st, uid_t euid,
                             const char *group, char *detail, size_t len) {
  unsigned mode = (unsigned)(st->st_mode & 07777);
  switch (why) {
  case RR_HT_REFUSED_NOT_REGULAR: snprintf(detail, len, "not a regular file"); break;
  case RR_HT_REFUSED_OTHER_WRITABLE:
    snprintf(detail, len, "writable by every user (mode %04o)", mode);
    break;
  case RR_HT_REFUSED_OWNER:
    if (group && *group)
      snprintf(detail, len, "owned by uid %u, not by this user (uid %u), and not of the group "
               "RERAIL_HEALTH_GROUP=%s", (unsigned)st->st_uid, (unsigned)euid, group);
    else
      snprintf(detail, len, "owned by uid %u, not by this user (uid %u), and RERAIL_HEALTH_GROUP "
               "is unset", (unsigned)st->st_uid, (unsigned)euid);
    break;
  case RR_HT_REFUSED_GROUP_MODE:
    snprintf(detail, len, "owned by uid %u, not by this user (uid %u), of the group "
             "RERAIL_HEALTH_GROUP=%s but mode %04o, not %04o", (unsigned)st->st_uid,
             (unsigned)euid, group, mode, (unsigned)RR_HT_GROUP_MODE);
    break;
  case RR_HT_REFUSED_SYMLINK: snprintf(detail, len, "is a symbolic link"); break;
  default: snprintf(detail, len, "refused"); break;
  }
}

rr_ht_problem rr_ht_fd_check(int fd, const char *group, uint64_t *size, char *detail, size_t len) {
  struct stat st;
  /* fstat on the descriptor, never stat on the path: the file judged is the
   * file used, whatever is renamed into the path meanwhile. */
  if (fstat(fd, &st) != 0) FAIL(RR_HT_NOACCESS, "fstat: %s", strerror(errno));
  uid_t euid = geteuid();
  rr_ht_refusal why = rr_ht_trust(&st, euid, group);
  if (why != RR_HT_TRUSTED) {
    rr_ht_count_refusal(why);
    describe_refusal(why, &st, euid, group, detail, len);
    return RR_HT_INSECURE;
  }
  *size = (uint64_t)st.st_size;
  return RR_HT_FINE;
}

/* ---- process identity ------------------------------------------------------- */

/* proc_stat with the errno as the result (0: none). */
static int proc_stat_errno(pid_t pid, uint64_t *start_time, char *state) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  int err = errno;
  close(fd);
  if (n <= 0) return n < 0 ? err : EIO;
  buf[n] = '\0';
  /* comm (field 2) may hold spaces and parentheses: fields restart after the
   * last ')'. There: state is field 3, starttime field 22. */
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return EIO;
  p += 2;
  if (state) *state = *p;
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) return EIO;
    p++;
  }
  char *end;
  unsigned long long v = strtoull(p, &end, 10);
  if (end == p) return EIO;
  if (start_time) *start_time = v;
  return 0;
}

rr_status rr_ht_proc_stat(pid_t pid, uint64_t *start_time, char *state, int *err) {
  int e = proc_stat_errno(pid, start_time, state);
  if (err) *err = e;
  return e ? RR_ERR_SYSTEM : RR_OK;
}

uint64_t rr_ht_self_pid_ns(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

int rr_ht_owner_alive(uint64_t owner) {
  pid_t pid = (pid_t)(uint32_t)owner;
  if (pid <= 0) return 0;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  uint64_t start;
  char state;
  int err;
  if (rr_ht_proc_stat(pid, &start, &state, &err) != RR_OK)
    return err == ENOENT || err == ESRCH ? 0 /* exited between the two calls */
                                         : -1; /* /proc hidden (hidepid): cannot tell */
  if (state == 'Z' || state == 'X') return 0;  /* killed, not reaped yet */
  return (uint32_t)start == (uint32_t)(owner >> 32) ? 1 : 0;
}
