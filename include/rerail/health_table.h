/* The shared health table: binary layout, version 1.
 *
 * One file per host (default /dev/shm/rerail-health, RERAIL_HEALTH_PATH),
 * mapped by every process of every job that runs the rerail net plugin, and
 * read by the rerail tuner, `rerail status` and anything else that wants to
 * know which NICs of the host are healthy. This header is the contract for
 * those readers; it has no dependency beyond <stdint.h> so that other
 * programs (and other languages, through the offsets below) can use it.
 *
 * File
 *   [0, header_size)                          rr_ht_header
 *   [nic_offset,  nic_offset  + nic_rows  * nic_row_size)   rr_ht_nic_row[]
 *   [peer_offset, peer_offset + peer_rows * peer_row_size)  rr_ht_peer_row[]
 *   file_size == peer_offset + peer_rows * peer_row_size, nothing after it.
 * All integers are in the byte order of the host that wrote them (the file
 * never leaves the host); byte_order tells a reader that guesses wrong.
 *
 * Compatibility. magic (offset 0) and version (offset 8) never move. Any
 * change to anything else - a field, a size, the checksum - bumps version;
 * a reader that does not know a version must not read the rest. Rows have
 * reserved bytes so that version 2 can add fields without moving these.
 *
 * Creation. The creator builds the whole file (header and zeroed rows) under
 * a temporary name in the same directory and link()s it into place, so no
 * process ever sees a file whose header is half written. The header is
 * immutable after that; the checksum covers it.
 *
 * Rows. A row belongs to one process, identified by its `owner` word:
 *   owner = pid | (start_time & 0xffffffff) << 32, 0 when the row is free.
 * A writer claims a row with a compare-and-swap of owner (from 0, or from the
 * owner word of a process that is gone), so two processes never take the same
 * row; the start time in the word makes pid reuse harmless. Everything after
 * owner is written only by the owner, under a per-row sequence lock:
 *   writer: seq += 1 (odd); release fence; store the words; seq += 1 (even,
 *           release store). A writer that finds seq odd (its predecessor
 *           died mid-write) first steps it to even.
 *   reader: s1 = seq (acquire), odd -> retry; copy the row as 64-bit words;
 *           acquire fence; s2 = seq; s1 != s2 -> retry. Bounded retries; a
 *           row still torn is skipped. Readers never write and never block
 *           writers. A consistent copy whose pid/start_time disagree with
 *           its owner word is a claim in progress: skip it as well.
 * Every field is a naturally aligned 64-bit word or lies inside one, so a
 * reader can copy rows word by word with plain atomic loads.
 *
 * Liveness. A row is live when its owner runs (kill(pid, 0) does not fail with
 * ESRCH, the process is not a zombie and its /proc/PID/stat start time equals
 * start_time) and its heartbeat is recent (writers refresh heartbeat_ns at
 * least every RR_HT_HEARTBEAT_MS while their process is active; rerail's
 * readers call a row "aged out" after RERAIL_HEALTH_STALE_MS, default
 * RR_HT_STALE_MS). The pid check only means something inside the writer's
 * pid namespace (pid_ns): a reader in another namespace judges by the
 * heartbeat alone. Rows of processes that are gone stay in the file, with
 * their last figures, until another process claims them (free rows first).
 *
 * Trust. Any process that may write the file may also scribble in it or
 * truncate it, so a reader must check everything it reads (header,
 * checksum, sizes, every row's values, string terminators) and must not
 * die when the file shrinks under it. Rules rerail follows, and other
 * readers should:
 *   - open with O_NOFOLLOW (a symbolic link at the path is refused, never
 *     followed) and O_NONBLOCK (a FIFO planted there cannot block the open),
 *     then fstat the descriptor (not stat the path): a regular file, not
 *     writable by every user, and owned by the reading user's effective uid
 *     - or of the group RERAIL_HEALTH_GROUP names with mode exactly 0660,
 *     as rerail's writers make a table that group shares. Root gets no
 *     exception: another user's file could be planted at the path;
 *   - read rows with pread(), not through a mapping: a mapped page past the
 *     new end of a truncated file raises SIGBUS, pread just comes back
 *     short. The sequence lock works the same way through pread: read seq,
 *     then the row, then seq again, with acquire fences between the calls;
 *   - before each snapshot check that size and header are still those
 *     opened; if not, drop the snapshot and reopen later.
 * rerail's writers keep a mapping (claiming a row is a compare-and-swap) but
 * store rows into it through the kernel (process_vm_writev on themselves:
 * EFAULT, not SIGBUS, on a missing page), check the size before every
 * update and the header at every heartbeat, and stop publishing, warned
 * once, when the file changed. A changed or bad file is never repaired.
 *
 * Times: *_ns fields are CLOCK_REALTIME nanoseconds since the epoch, 0 when
 * never set. Strings are NUL-terminated within their arrays (a reader must
 * still terminate them itself). */
#ifndef RERAIL_HEALTH_TABLE_LAYOUT_H
#define RERAIL_HEALTH_TABLE_LAYOUT_H
#include <stddef.h>
#include <stdint.h>

#define RR_HT_MAGIC "RERAILHT"              /* 8 bytes, no terminator */
#define RR_HT_VERSION 1u
#define RR_HT_BYTE_ORDER 0x0102030405060708ull
#define RR_HT_HEADER_SIZE 128u
#define RR_HT_NIC_ROW_SIZE 320u             /* 5 cache lines: rows of different */
#define RR_HT_PEER_ROW_SIZE 256u            /* processes never share a line */
#define RR_HT_MAX_ROWS 65536u               /* per kind; a larger count is corrupt */
#define RR_HT_HEARTBEAT_MS 1000u
#define RR_HT_STALE_MS 10000u

/* Row states: the values of rr_link_state (common/health/rr_nic_state.h). */
enum rr_ht_state { RR_HT_UP = 0, RR_HT_DEGRADED = 1, RR_HT_DOWN = 2, RR_HT_RECOVERING = 3 };

typedef struct rr_ht_header {
  char magic[8];           /*   0   8  RR_HT_MAGIC */
  uint32_t version;        /*   8   4  RR_HT_VERSION */
  uint32_t header_size;    /*  12   4  RR_HT_HEADER_SIZE */
  uint32_t nic_row_size;   /*  16   4  RR_HT_NIC_ROW_SIZE */
  uint32_t nic_rows;       /*  20   4  1..RR_HT_MAX_ROWS */
  uint32_t peer_row_size;  /*  24   4  RR_HT_PEER_ROW_SIZE */
  uint32_t peer_rows;      /*  28   4  1..RR_HT_MAX_ROWS */
  uint64_t nic_offset;     /*  32   8  == header_size */
  uint64_t peer_offset;    /*  40   8  == nic_offset + nic_rows * nic_row_size */
  uint64_t file_size;      /*  48   8  == peer_offset + peer_rows * peer_row_size */
  uint64_t created_ns;     /*  56   8  when the file was made */
  uint64_t byte_order;     /*  64   8  RR_HT_BYTE_ORDER as written by the creator */
  uint32_t creator_pid;    /*  72   4  for humans only */
  uint32_t flags;          /*  76   4  0 */
  uint8_t reserved[40];    /*  80  40  0 */
  uint64_t checksum;       /* 120   8  FNV-1a 64 of bytes [0, 120) */
} rr_ht_header;

/* Throughput and latency of one direction over the telemetry window. */
typedef struct rr_ht_figures {
  uint64_t bytes_per_s;    /* +0   8 */
  uint64_t p50_ns;         /* +8   8  median work-request latency */
  uint64_t p99_ns;         /* +16  8 */
} rr_ht_figures;

/* One local NIC as one process uses it (one row per (process, device)). */
typedef struct rr_ht_nic_row {
  uint64_t seq;            /*   0   8  sequence lock, odd while written */
  uint64_t owner;          /*   8   8  claim word (see above); 0 = free */
  uint32_t pid;            /*  16   4  owner's pid (copy, under the lock) */
  int32_t dev;             /*  20   4  the plugin's device index */
  uint64_t start_time;     /*  24   8  /proc/PID/stat field 22 (clock ticks) */
  uint64_t pid_ns;         /*  32   8  inode of /proc/PID/ns/pid, 0 unknown */
  uint64_t heartbeat_ns;   /*  40   8  last sign of life */
  uint64_t claimed_ns;     /*  48   8  when this process took the row */
  char ifname[16];         /*  56  16  "eth0" */
  uint32_t state;          /*  72   4  enum rr_ht_state */
  uint32_t flags;          /*  76   4  0 */
  uint64_t since_ns;       /*  80   8  last state change (claim time if none) */
  uint64_t state_changes;  /*  88   8 */
  uint64_t failovers_from; /*  96   8  traffic moved off this NIC */
  uint64_t failovers_to;   /* 104   8  traffic moved onto this NIC */
  uint64_t failbacks;      /* 112   8  traffic returned to this NIC */
  uint64_t errors;         /* 120   8  connections that failed for good */
  uint64_t figures_ns;     /* 128   8  when tx/rx were last set */
  rr_ht_figures tx;        /* 136  24  send direction */
  rr_ht_figures rx;        /* 160  24  receive direction */
  char reason[96];         /* 184  96  why the last state change happened */
  uint8_t reserved[40];    /* 280  40  0 */
} rr_ht_nic_row;

/* A rail to a remote peer that this host saw degrade or go down (and what
 * it is now: a row stays, with state up, after the rail healed). */
typedef struct rr_ht_peer_row {
  uint64_t seq;            /*   0   8  sequence lock */
  uint64_t owner;          /*   8   8  claim word; 0 = free */
  uint32_t pid;            /*  16   4 */
  int32_t dev;             /*  20   4  local device index */
  uint64_t start_time;     /*  24   8 */
  uint64_t pid_ns;         /*  32   8 */
  uint64_t heartbeat_ns;   /*  40   8 */
  uint64_t since_ns;       /*  48   8  last state change */
  uint32_t state;          /*  56   4  enum rr_ht_state */
  uint32_t flags;          /*  60   4  0 */
  uint64_t changes;        /*  64   8  state changes seen */
  char ifname[16];         /*  72  16  local interface */
  char peer[64];           /*  88  64  remote address, "10.77.0.2" */
  char reason[96];         /* 152  96 */
  uint8_t reserved[8];     /* 248   8  0 */
} rr_ht_peer_row;

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(rr_ht_header) == RR_HT_HEADER_SIZE, "header size");
_Static_assert(offsetof(rr_ht_header, version) == 8, "version never moves");
_Static_assert(offsetof(rr_ht_header, byte_order) == 64, "header layout");
_Static_assert(offsetof(rr_ht_header, checksum) == 120, "checksum is last");
_Static_assert(sizeof(rr_ht_figures) == 24, "figures");
_Static_assert(sizeof(rr_ht_nic_row) == RR_HT_NIC_ROW_SIZE, "NIC row size");
_Static_assert(RR_HT_NIC_ROW_SIZE % 64 == 0, "NIC rows fill whole cache lines");
_Static_assert(offsetof(rr_ht_nic_row, owner) == 8, "NIC row layout");
_Static_assert(offsetof(rr_ht_nic_row, ifname) == 56, "NIC row layout");
_Static_assert(offsetof(rr_ht_nic_row, state) == 72, "NIC row layout");
_Static_assert(offsetof(rr_ht_nic_row, since_ns) == 80, "NIC row layout");
_Static_assert(offsetof(rr_ht_nic_row, figures_ns) == 128, "NIC row layout");
_Static_assert(offsetof(rr_ht_nic_row, tx) == 136, "NIC row layout");
_Static_assert(offsetof(rr_ht_nic_row, rx) == 160, "NIC row layout");
_Static_assert(offsetof(rr_ht_nic_row, reason) == 184, "NIC row layout");
_Static_assert(sizeof(rr_ht_peer_row) == RR_HT_PEER_ROW_SIZE, "peer row size");
_Static_assert(RR_HT_PEER_ROW_SIZE % 64 == 0, "peer rows fill whole cache lines");
_Static_assert(offsetof(rr_ht_peer_row, owner) == 8, "peer row layout");
_Static_assert(offsetof(rr_ht_peer_row, state) == 56, "peer row layout");
_Static_assert(offsetof(rr_ht_peer_row, ifname) == 72, "peer row layout");
_Static_assert(offsetof(rr_ht_peer_row, peer) == 88, "peer row layout");
_Static_assert(offsetof(rr_ht_peer_row, reason) == 152, "peer row layout");
#endif

#endif
