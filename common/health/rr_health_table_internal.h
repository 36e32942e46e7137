/* Pieces the health table's writer and reader share (and its unit tests use):
 * header checks, the row sequence lock, process identity and liveness. Not
 * part of the API: include rr_health_table.h instead. */
#ifndef RERAIL_COMMON_HEALTH_TABLE_INTERNAL_H
#define RERAIL_COMMON_HEALTH_TABLE_INTERNAL_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rr_health_table.h"

/* A row as the mapped memory is touched: 64-bit atomic words, so that the
 * sequence lock is free of data races in C11 terms (the layout guarantees
 * every field lies inside one aligned word). Word 0 is seq, word 1 owner.
 * Only writers map the file; see "without SIGBUS" in rr_health_table.c. */
typedef _Atomic uint64_t rr_ht_word;
_Static_assert(sizeof(rr_ht_word) == 8, "rows are copied as 8-byte atomic words");
#define RR_HT_NIC_WORDS (RR_HT_NIC_ROW_SIZE / 8)
#define RR_HT_PEER_WORDS (RR_HT_PEER_ROW_SIZE / 8)

/* pread exactly len bytes at off: RR_OK, or RR_ERR_SYSTEM with *err (when
 * err is not NULL) ENODATA when the file ends first (it shrank), else errno. */
rr_status rr_ht_pread_full(int fd, void *buf, size_t len, uint64_t off, int *err);
/* Copy the row of nwords words at file offset off into out under the
 * sequence lock. Returns 1 when the copy is consistent (no writer was inside
 * it), 0 when it stayed torn through every retry, or a negative errno
 * (-ENODATA: the file no longer reaches the row). */
int rr_ht_row_pread(int fd, uint64_t off, size_t nwords, uint64_t *out);
/* Can this process store into its mapping of the table through the kernel
 * (process_vm_writev on itself), so that a truncated file is an error and
 * not SIGBUS? map: any mapped word. RR_OK yes, else RR_ERR_UNSUPPORTED with
 * the errno in *err (seccomp: EPERM). */
rr_status rr_ht_map_safe_probe(const void *map, int *err);
/* Publish words [2, nwords) of src into the mapped row, which must be owned
 * by owner. safe: through the kernel (see rr_ht_map_safe_probe), else plain
 * stores. Returns 0; 1 (nothing written) when the row's owner word is no
 * longer owner: another process took it; or a negative errno (safe only;
 * -EFAULT: the file no longer reaches the row). */
int rr_ht_row_publish(rr_ht_word *row, size_t nwords, const uint64_t *src, uint64_t owner,
                      int safe);

/* FNV-1a 64 of the header's bytes before the checksum field. */
uint64_t rr_ht_header_checksum(const rr_ht_header *h);
/* Fill a header for a new file of the given row counts. */
void rr_ht_header_init(rr_ht_header *h, uint32_t nic_rows, uint32_t peer_rows);
/* Check a header read from a file of file_size bytes. */
rr_ht_problem rr_ht_header_check(const rr_ht_header *h, uint64_t file_size, char *detail,
                                 size_t len);
/* The mode a writer gives a table shared through RERAIL_HEALTH_GROUP, and
 * the only mode another user's table may have to be used. */
#define RR_HT_GROUP_MODE 0660

struct stat;
/* Does the file st describes pass the rule of "Who may use a file"
 * (rr_health_table.h) for a process of effective uid euid? group: the
 * RERAIL_HEALTH_GROUP in force (NULL or "": none). */
rr_ht_refusal rr_ht_trust(const struct stat *st, uid_t euid, const char *group);
/* Count one refusal for rr_health_table_refusals(). */
void rr_ht_count_refusal(rr_ht_refusal why);
/* The check every table user makes on the descriptor it opened (O_NOFOLLOW):
 * rr_ht_trust for this process, counted and described in detail when it
 * fails (RR_HT_INSECURE). *size is the file's size. */
rr_ht_problem rr_ht_fd_check(int fd, const char *group, uint64_t *size, char *detail, size_t len);

/* RERAIL_HEALTH_GROUP's value, a group name or a gid: RR_OK, or
 * RR_ERR_INVALID when no such group is known. */
rr_status rr_ht_resolve_group(const char *g, gid_t *gid);

/* CLOCK_REALTIME in nanoseconds: the clock of every *_ns field of the file. */
uint64_t rr_ht_realtime_ns(void);

/* Process identity: start time in clock ticks since boot (/proc/PID/stat field
 * 22) and state letter. Returns RR_OK, or RR_ERR_SYSTEM with the errno in
 * *err when err is not NULL (ENOENT: no such process; EIO: unreadable). */
rr_status rr_ht_proc_stat(pid_t pid, uint64_t *start_time, char *state, int *err);
/* Inode of this process's pid namespace, 0 when unknown. */
uint64_t rr_ht_self_pid_ns(void);
static inline uint64_t rr_ht_owner_word(uint32_t pid, uint64_t start_time) {
  return (uint64_t)pid | (start_time & 0xffffffffull) << 32;
}
/* Does the process an owner word names still run (as seen from this pid
 * namespace)? 1 yes, 0 no (exited, zombie, pid reused), -1 cannot tell. */
int rr_ht_owner_alive(uint64_t owner);

/* Per-process "warn once" flags; tests reset them. */
void rr_ht_reset_warnings(void);
/* Log fmt once per process at WARN for flag, later at INFO. */
void rr_ht_warn_once(atomic_int *flag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
extern atomic_int rr_ht_warned_writer, rr_ht_warned_reader, rr_ht_warned_full, rr_ht_warned_group,
    rr_ht_warned_lost, rr_ht_warned_changed;

#endif
