/* The shared health table: layout, writer/reader round trip, the plugin's
 * process-wide hook, bad files (corrupt, truncated, foreign, another layout
 * version, insecure, scribbled rows), permissions, unwritable places, and
 * rows of processes that are gone or silent.
 *
 * Every test works on a file in its own mkdtemp() directory; warnings are
 * counted through a logger installed with rr_log_set_logger(), the same
 * path NCCL's logger takes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rr_health_bus.h"
#include "health_test_env.h"
#include "rr_health_table.h"
#include "rr_health_table_internal.h"
#include "rr_log.h"

/* ---- fixtures ------------------------------------------------------------------- */

static int setup(void **state) {
  (void)state;
  return ht_test_dir_setup("rr-ht-test", 0);
}

static rr_ht_writer *open_small(uint32_t rows) {
  rr_ht_writer_opts o = {.nic_rows = rows, .peer_rows = rows};
  rr_ht_writer *w = NULL;
  rr_ht_problem p = RR_HT_CORRUPT;
  assert_int_equal(rr_health_table_open_writer(path, &o, &w, &p), RR_OK);
  assert_int_equal(p, RR_HT_FINE);
  assert_non_null(w);
  return w;
}

static const rr_ht_nic_entry *find_nic(const rr_ht_snapshot *s, const char *ifname, uint32_t pid) {
  for (int i = 0; i < s->nic_count; i++)
    if (!strcmp(s->nic[i].row.ifname, ifname) && s->nic[i].row.pid == pid) return &s->nic[i];
  return NULL;
}

static rr_health_event event(rr_health_event_kind kind, int dev, const char *ifname, int to_dev,
                             const char *to_ifname, rr_link_state st, const char *peer,
                             const char *reason) {
  rr_health_event ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = kind;
  ev.dev = dev;
  ev.to_dev = to_dev;
  ev.state = st;
  snprintf(ev.ifname, sizeof ev.ifname, "%s", ifname ? ifname : "");
  snprintf(ev.to_ifname, sizeof ev.to_ifname, "%s", to_ifname ? to_ifname : "");
  snprintf(ev.peer, sizeof ev.peer, "%s", peer ? peer : "");
  snprintf(ev.reason, sizeof ev.reason, "%s", reason ? reason : "");
  return ev;
}

static void read_file(const char *p, void *buf, size_t len) {
  int fd = open(p, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, buf, len, 0), (ssize_t)len);
  close(fd);
}

static void pwrite_at(const void *buf, size_t len, off_t off) {
  int fd = open(path, O_WRONLY);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, buf, len, off), (ssize_t)len);
  close(fd);
}

static size_t file_size(const char *p) {
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  return (size_t)st.st_size;
}

/* ---- layout ---------------------------------------------------------------------- */

static void test_layout(void **state) {
  (void)state;
  assert_int_equal(sizeof(rr_ht_header), 128);
  assert_int_equal(sizeof(rr_ht_nic_row), 320);
  assert_int_equal(sizeof(rr_ht_peer_row), 256);
  assert_int_equal(offsetof(rr_ht_nic_row, seq), 0);
  assert_int_equal(offsetof(rr_ht_nic_row, owner), 8);
  assert_int_equal(offsetof(rr_ht_nic_row, heartbeat_ns), 40);
  assert_int_equal(offsetof(rr_ht_peer_row, heartbeat_ns), 40);
  assert_int_equal(offsetof(rr_ht_peer_row, reason), 152);

  rr_ht_header h;
  rr_ht_header_init(&h, 16, 8);
  char why[200];
  assert_int_equal(rr_ht_header_check(&h, h.file_size, why, sizeof why), RR_HT_FINE);
  assert_int_equal(h.file_size, 128 + 16 * 320 + 8 * 256);
  assert_memory_equal(h.magic, "RERAILHT", 8);

  /* The file a writer creates has exactly that header and zeroed rows. */
  rr_ht_writer *w = open_small(16);
  rr_health_table_close_writer(w);
  rr_ht_header f;
  read_file(path, &f, sizeof f);
  assert_int_equal(f.version, RR_HT_VERSION);
  assert_int_equal(f.nic_rows, 16);
  assert_int_equal(f.peer_rows, 16);
  assert_int_equal(f.checksum, rr_ht_header_checksum(&f));
  assert_int_equal(file_size(path), f.file_size);
  assert_int_equal(f.creator_pid, (uint32_t)getpid());
  /* No temporary file is left beside it. */
  char cmd[PATH_MAX * 2];
  snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", dir);
  assert_int_equal(system(cmd), 0);
}

static void test_proc_stat(void **state) {
  (void)state;
  uint64_t start = 0;
  char st = 0;
  assert_int_equal(rr_ht_proc_stat(getpid(), &start, &st, NULL), RR_OK);
  assert_true(start > 0);
  assert_true(st == 'R' || st == 'S');
  uint64_t owner = rr_ht_owner_word((uint32_t)getpid(), start);
  assert_int_equal(rr_ht_owner_alive(owner), 1);
  /* Same pid, another start time: the pid was reused. */
  assert_int_equal(rr_ht_owner_alive(rr_ht_owner_word((uint32_t)getpid(), start + 1)), 0);
  assert_int_equal(rr_ht_owner_alive(0), 0);
  assert_true(rr_ht_self_pid_ns() != 0);
}

/* ---- writer and reader ---------------------------------------------------------- */

static void test_roundtrip(void **state) {
  (void)state;
  rr_ht_writer *w = open_small(8);
  assert_int_equal(rr_health_table_claim(w, 0, "eth0"), RR_OK);
  assert_int_equal(rr_health_table_claim(w, 1, "eth1"), RR_OK);
  assert_int_equal(rr_health_table_claim(w, 1, "eth1"), RR_OK); /* idempotent */
  rr_health_table_figures(w, 0, RR_HT_TX, 12500000000ull, 4000, 9000);
  rr_health_table_figures(w, 0, RR_HT_RX, 11000000000ull, 4500, 9500);
  rr_health_table_figures(w, 7, RR_HT_RX, 1, 2, 3); /* never claimed: ignored */

  rr_health_event ev = event(RR_HEV_NIC_STATE, 1, "eth1", -1, NULL, RR_LINK_DOWN, NULL,
                             "link down (netlink)");
  rr_health_table_event(w, &ev);
  ev = event(RR_HEV_RAIL_STATE, 1, "eth1", -1, NULL, RR_LINK_DOWN, "10.77.0.2", "send rail1: reset");
  rr_health_table_event(w, &ev);
  ev = event(RR_HEV_FAILOVER, 1, "eth1", 0, "eth0", RR_LINK_UP, "10.77.0.2", "resumed in epoch 2");
  rr_health_table_event(w, &ev);
  ev = event(RR_HEV_RAIL_STATE, 0, "eth0", -1, NULL, RR_LINK_UP, "10.77.0.3", "healthy");
  rr_health_table_event(w, &ev); /* a rail that is up and was never bad: no row */
  ev = event(RR_HEV_ERROR, 0, "", -1, NULL, RR_LINK_DOWN, "10.77.0.9", "no rail left");
  rr_health_table_event(w, &ev);

  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  assert_int_equal(s.problem, RR_HT_FINE);
  assert_int_equal(s.nic_count, 2);
  assert_int_equal(s.live_nics, 2);
  assert_int_equal(s.peer_count, 1);
  assert_int_equal(s.live_peers, 1);
  assert_int_equal(s.torn_skipped, 0);
  const rr_ht_nic_entry *e0 = find_nic(&s, "eth0", (uint32_t)getpid());
  const rr_ht_nic_entry *e1 = find_nic(&s, "eth1", (uint32_t)getpid());
  assert_non_null(e0);
  assert_non_null(e1);
  assert_int_equal(e0->liveness, RR_HT_LIVE);
  assert_int_equal(e0->row.dev, 0);
  assert_int_equal(e0->row.state, RR_HT_UP);
  assert_int_equal(e0->row.tx.bytes_per_s, 12500000000ull);
  assert_int_equal(e0->row.tx.p50_ns, 4000);
  assert_int_equal(e0->row.rx.p99_ns, 9500);
  assert_int_equal(e0->row.failovers_to, 1);
  assert_int_equal(e0->row.errors, 1);
  assert_int_equal(e1->row.state, RR_HT_DOWN);
  assert_int_equal(e1->row.state_changes, 1);
  assert_int_equal(e1->row.failovers_from, 1);
  assert_string_equal(e1->row.reason, "link down (netlink)");
  assert_true(e1->row.since_ns >= e1->row.claimed_ns);
  uint64_t start = 0;
  assert_int_equal(rr_ht_proc_stat(getpid(), &start, NULL, NULL), RR_OK);
  assert_int_equal(e1->row.start_time, start);
  assert_true(e1->heartbeat_age_ns < 5000000000ull);
  assert_string_equal(s.peer[0].row.ifname, "eth1");
  assert_string_equal(s.peer[0].row.peer, "10.77.0.2");
  assert_int_equal(s.peer[0].row.state, RR_HT_DOWN);
  rr_health_table_snapshot_free(&s);

  /* The port heals: fail-back onto eth1 brings the peer rail back up. */
  ev = event(RR_HEV_NIC_STATE, 1, "eth1", -1, NULL, RR_LINK_UP, NULL, "link up (netlink)");
  rr_health_table_event(w, &ev);
  ev = event(RR_HEV_FAILBACK, 0, "eth0", 1, "eth1", RR_LINK_UP, "10.77.0.2", "healed");
  rr_health_table_event(w, &ev);
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  e1 = find_nic(&s, "eth1", (uint32_t)getpid());
  assert_non_null(e1);
  assert_int_equal(e1->row.state, RR_HT_UP);
  assert_int_equal(e1->row.state_changes, 2);
  assert_int_equal(e1->row.failbacks, 1);
  assert_int_equal(s.peer_count, 1);
  assert_int_equal(s.peer[0].row.state, RR_HT_UP);
  assert_int_equal(s.peer[0].row.changes, 2);
  rr_health_table_snapshot_free(&s);

  /* Closing releases the rows: readers no longer see this process. */
  rr_health_table_close_writer(w);
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  assert_int_equal(s.nic_count, 0);
  assert_int_equal(s.peer_count, 0);
  rr_health_table_snapshot_free(&s);
  assert_int_equal(warns, 0);
}

/* Several writers (here: in one process) never share a row; a full table is
 * a warning, once, and the device simply goes unpublished. */
static void test_rows_distinct_and_full(void **state) {
  (void)state;
  rr_ht_writer *a = open_small(3);
  rr_ht_writer *b = open_small(3);
  assert_int_equal(rr_health_table_claim(a, 0, "a0"), RR_OK);
  assert_int_equal(rr_health_table_claim(b, 0, "b0"), RR_OK);
  assert_int_equal(rr_health_table_claim(a, 1, "a1"), RR_OK);
  assert_int_equal(rr_health_table_claim(b, 1, "b1"), RR_ERR_NOMEM);
  assert_int_equal(rr_health_table_claim(b, 2, "b2"), RR_ERR_NOMEM);
  assert_int_equal(warns, 1);
  rr_health_table_figures(a, 0, RR_HT_TX, 111, 1, 1);
  rr_health_table_figures(b, 0, RR_HT_TX, 222, 2, 2);
  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  assert_int_equal(s.nic_count, 3);
  uint64_t seen = 0;
  for (int i = 0; i < s.nic_count; i++) seen += s.nic[i].row.tx.bytes_per_s;
  assert_int_equal(seen, 333);
  rr_health_table_snapshot_free(&s);
  rr_health_table_close_writer(b);
  /* b's row is free again: a can publish its third device. */
  assert_int_equal(rr_health_table_claim(a, 2, "a2"), RR_OK);
  rr_health_table_close_writer(a);
}

/* The plugin's hook: reference counted, fed by rr_health (as a sink), by
 * figures and by the tick. */
static void test_process_hook(void **state) {
  (void)state;
  rr_netif nifs[2];
  memset(nifs, 0, sizeof nifs);
  snprintf(nifs[0].name, sizeof nifs[0].name, "rr0");
  snprintf(nifs[1].name, sizeof nifs[1].name, "rr1");
  assert_false(rr_health_table_active());
  rr_health_table_start(nifs, 2);
  rr_health_table_start(nifs, 2); /* a second communicator */
  assert_true(rr_health_table_active());
  rr_health_nic_state(1, "rr1", RR_LINK_DEGRADED, "slow");
  rr_health_table_set_figures(0, RR_HT_RX, 4999.6, 10, 20); /* the exporter's double, rounded */
  rr_health_table_set_figures(1, RR_HT_TX, -1.0, 1, 2);      /* nonsense in: 0 out */
  rr_health_table_set_figures(1, RR_HT_RX, NAN, 1, 2);
  rr_health_table_tick(1ull << 62); /* due: writes a heartbeat */
  rr_health_table_tick(1ull << 62); /* not due again: cheap no-op */

  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_read(NULL, &s), RR_OK); /* NULL: RERAIL_HEALTH_PATH */
  assert_int_equal(s.live_nics, 2);
  const rr_ht_nic_entry *e0 = find_nic(&s, "rr0", (uint32_t)getpid());
  const rr_ht_nic_entry *e1 = find_nic(&s, "rr1", (uint32_t)getpid());
  assert_non_null(e0);
  assert_non_null(e1);
  assert_int_equal(e0->row.rx.bytes_per_s, 5000);
  assert_int_equal(e1->row.tx.bytes_per_s, 0);
  assert_int_equal(e1->row.rx.bytes_per_s, 0);
  assert_int_equal(e1->row.rx.p99_ns, 2);
  assert_int_equal(e1->row.state, RR_HT_DEGRADED);
  assert_string_equal(e1->row.reason, "slow");
  rr_health_table_snapshot_free(&s);
  rr_health_nic_state(1, "rr1", RR_LINK_UP, "fine again"); /* restore rr_health's view */

  rr_health_table_stop();
  assert_true(rr_health_table_active());
  rr_health_table_stop();
  assert_false(rr_health_table_active());
  rr_health_table_stop(); /* one too many: harmless */
  assert_int_equal(rr_health_table_read(NULL, &s), RR_OK);
  assert_int_equal(s.nic_count, 0);
  rr_health_table_snapshot_free(&s);
  /* Events after stop go nowhere (the sink is gone). */
  rr_health_nic_state(0, "rr0", RR_LINK_UP, "after stop");
  assert_int_equal(warns, 0);
}

/* A process that exits without stopping (NCCL never finalized; the plugin is
 * unloaded or the process ends) gives its rows back in a destructor. */
static void test_exit_releases(void **state) {
  (void)state;
  rr_netif nif;
  memset(&nif, 0, sizeof nif);
  snprintf(nif.name, sizeof nif.name, "rr0");
  fflush(NULL);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    rr_health_table_start(&nif, 1);
    exit(rr_health_table_active() ? 0 : 1); /* exit(), not _exit(): destructors run */
  }
  int status;
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  assert_int_equal(s.nic_count, 0);
  rr_health_table_snapshot_free(&s);
}

/* ---- bad files -------------------------------------------------------------------- */

typedef enum { MUT_FLIP, MUT_TRUNC_ROWS, MUT_TRUNC_HEADER, MUT_EMPTY, MUT_FOREIGN, MUT_VERSION,
               MUT_VERSION_RAW, MUT_ROWS, MUT_GROWN, MUT_WORLD_WRITABLE, MUT_SYMLINK } mutation;

static void make_bad(mutation m) {
  rr_ht_writer *w = open_small(4);
  rr_health_table_close_writer(w);
  rr_ht_header h;
  read_file(path, &h, sizeof h);
  unsigned char junk[4096];
  switch (m) {
  case MUT_FLIP: {
    unsigned char b = 0x5a;
    pwrite_at(&b, 1, 100); /* a reserved header byte: only the checksum notices */
    break;
  }
  case MUT_TRUNC_ROWS: assert_int_equal(truncate(path, 1000), 0); break;
  case MUT_TRUNC_HEADER: assert_int_equal(truncate(path, 60), 0); break;
  case MUT_EMPTY: assert_int_equal(truncate(path, 0), 0); break;
  case MUT_FOREIGN:
    memset(junk, 'x', sizeof junk);
    memcpy(junk, "this is not a health table\n", 27);
    assert_int_equal(truncate(path, 0), 0);
    pwrite_at(junk, sizeof junk, 0);
    break;
  case MUT_VERSION:
    h.version = 2;
    h.checksum = rr_ht_header_checksum(&h);
    pwrite_at(&h, sizeof h, 0);
    break;
  case MUT_VERSION_RAW: /* a future layout may checksum differently */
    h.version = 7;
    pwrite_at(&h, sizeof h, 0);
    break;
  case MUT_ROWS:
    h.nic_rows = RR_HT_MAX_ROWS + 1;
    h.checksum = rr_ht_header_checksum(&h);
    pwrite_at(&h, sizeof h, 0);
    break;
  case MUT_GROWN: assert_int_equal(truncate(path, (off_t)h.file_size + 4096), 0); break;
  case MUT_WORLD_WRITABLE: assert_int_equal(chmod(path, 0666), 0); break;
  case MUT_SYMLINK: {
    char real[PATH_MAX + 40];
    snprintf(real, sizeof real, "%s.real", path);
    assert_int_equal(rename(path, real), 0);
    assert_int_equal(symlink(real, path), 0);
    break;
  }
  }
}

static void expect_bad(mutation m, rr_ht_problem want) {
  rr_ht_reset_warnings();
  warns = 0;
  make_bad(m);
  size_t size = (m == MUT_SYMLINK) ? 0 : file_size(path);
  unsigned char *before = calloc(1, size + 1), *after = calloc(1, size + 1);
  assert_non_null(before);
  assert_non_null(after);
  if (size) read_file(path, before, size);

  /* Reader: an error that says what is wrong, one warning, no rows. */
  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_read(path, &s), RR_ERR_INVALID);
  assert_int_equal(s.problem, want);
  assert_true(s.detail[0] != '\0');
  assert_int_equal(s.nic_count, 0);
  rr_health_table_snapshot_free(&s);
  assert_int_equal(rr_health_table_read(path, &s), RR_ERR_INVALID);
  rr_health_table_snapshot_free(&s);
  assert_int_equal(warns, 1);

  /* Writer: no table, one warning however often the plugin starts. */
  rr_ht_writer *w = (rr_ht_writer *)1;
  rr_ht_problem p = RR_HT_FINE;
  assert_int_not_equal(rr_health_table_open_writer(path, NULL, &w, &p), RR_OK);
  assert_null(w);
  assert_int_equal(p, want);
  assert_int_equal(warns, 2);
  assert_non_null(strstr(last_warn, path));
  start_without_table();
  assert_int_equal(warns, 2);

  /* Never trusted, never repaired: the file is as it was. */
  if (size) {
    assert_int_equal(file_size(path), size);
    read_file(path, after, size);
    assert_memory_equal(before, after, size);
  }
  free(before);
  free(after);
}

static void test_bad_corrupt(void **state) { (void)state; expect_bad(MUT_FLIP, RR_HT_CORRUPT); }
static void test_bad_counts(void **state) { (void)state; expect_bad(MUT_ROWS, RR_HT_CORRUPT); }
static void test_bad_grown(void **state) { (void)state; expect_bad(MUT_GROWN, RR_HT_CORRUPT); }
static void test_bad_truncated(void **state) { (void)state; expect_bad(MUT_TRUNC_ROWS, RR_HT_TRUNCATED); }
static void test_bad_truncated_header(void **state) {
  (void)state;
  expect_bad(MUT_TRUNC_HEADER, RR_HT_TRUNCATED);
}
static void test_bad_empty(void **state) { (void)state; expect_bad(MUT_EMPTY, RR_HT_FOREIGN); }
static void test_bad_foreign(void **state) { (void)state; expect_bad(MUT_FOREIGN, RR_HT_FOREIGN); }
static void test_bad_version(void **state) {
  (void)state;
  expect_bad(MUT_VERSION, RR_HT_OTHER_VERSION);
  assert_non_null(strstr(last_warn, "version 2"));
}
static void test_bad_version_raw(void **state) {
  (void)state;
  expect_bad(MUT_VERSION_RAW, RR_HT_OTHER_VERSION);
}
static void test_bad_world_writable(void **state) {
  (void)state;
  expect_bad(MUT_WORLD_WRITABLE, RR_HT_INSECURE);
}
static void test_bad_symlink(void **state) { (void)state; expect_bad(MUT_SYMLINK, RR_HT_INSECURE); }

/* Rows are checked too: scribbled rows are skipped, never crash the reader,
 * and never reach a caller with impossible values. */
static void test_bad_rows(void **state) {
  (void)state;
  rr_ht_writer *w = open_small(16);
  assert_int_equal(rr_health_table_claim(w, 0, "good0"), RR_OK);
  rr_ht_header h;
  read_file(path, &h, sizeof h);
  uint64_t start;
  assert_int_equal(rr_ht_proc_stat(getpid(), &start, NULL, NULL), RR_OK);

  /* A row that claims to be ours, with a state no writer writes. */
  rr_ht_nic_row bad;
  memset(&bad, 0, sizeof bad);
  bad.owner = rr_ht_owner_word((uint32_t)getpid(), start);
  bad.pid = (uint32_t)getpid();
  bad.start_time = start;
  bad.state = 99;
  memset(bad.ifname, 'A', sizeof bad.ifname); /* unterminated */
  pwrite_at(&bad, sizeof bad, (off_t)(h.nic_offset + 5 * RR_HT_NIC_ROW_SIZE));
  /* Identity copy disagreeing with the owner word: a claim in progress. */
  bad.state = 0;
  bad.pid = 1;
  pwrite_at(&bad, sizeof bad, (off_t)(h.nic_offset + 6 * RR_HT_NIC_ROW_SIZE));
  /* Valid, but unterminated strings: shown, terminated. */
  bad.pid = (uint32_t)getpid();
  bad.dev = 3;
  pwrite_at(&bad, sizeof bad, (off_t)(h.nic_offset + 7 * RR_HT_NIC_ROW_SIZE));
  /* Odd sequence that never moves, owner alive: a writer "stuck" mid-write. */
  bad.seq = 7;
  pwrite_at(&bad, sizeof bad, (off_t)(h.nic_offset + 8 * RR_HT_NIC_ROW_SIZE));

  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  assert_int_equal(s.invalid_skipped, 1);
  assert_int_equal(s.torn_skipped, 1);
  assert_int_equal(s.nic_count, 2);
  for (int i = 0; i < s.nic_count; i++) {
    assert_true(strlen(s.nic[i].row.ifname) < sizeof s.nic[i].row.ifname);
    assert_true(s.nic[i].row.state <= RR_HT_RECOVERING);
  }
  rr_health_table_snapshot_free(&s);

  /* Random bytes over every row, many times: always a clean read. */
  srand(1234);
  unsigned char junk[RR_HT_NIC_ROW_SIZE * 4];
  for (int round = 0; round < 300; round++) {
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rand();
    if (round % 3 == 0) /* sometimes make the owner word plausible */
      memcpy(junk + 8 + 320 * (round % 4), &bad.owner, 8);
    off_t off = (off_t)(h.nic_offset + (size_t)(round % 12) * RR_HT_NIC_ROW_SIZE);
    pwrite_at(junk, sizeof junk, off);
    assert_int_equal(rr_health_table_read(path, &s), RR_OK);
    for (int i = 0; i < s.nic_count; i++) {
      assert_true(s.nic[i].row.state <= RR_HT_RECOVERING || s.nic[i].torn);
      assert_true(strlen(s.nic[i].row.reason) < sizeof s.nic[i].row.reason);
    }
    rr_health_table_snapshot_free(&s);
  }
  rr_health_table_close_writer(w);
}

/* ---- permissions and places ---------------------------------------------------------- */

static unsigned mode_of(const char *p) {
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  return (unsigned)(st.st_mode & 0777);
}

static void test_mode_private(void **state) {
  (void)state;
  mode_t old = umask(0177); /* a hostile umask must not make it 0400 */
  rr_ht_writer *w = open_small(4);
  umask(old);
  assert_int_equal(mode_of(path), 0600);
  rr_health_table_close_writer(w);
  assert_int_equal(warns, 0);
}

static int in_group_root(void) {
  if (geteuid() == 0) return 1;
  gid_t groups[256];
  int n = getgroups(256, groups);
  for (int i = 0; i < n; i++)
    if (groups[i] == 0) return 1;
  return getegid() == 0;
}

static void check_group(const char *group) {
  unlink(path);
  setenv("RERAIL_HEALTH_GROUP", group, 1);
  rr_ht_writer *w = open_small(4);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  if (in_group_root()) {
    assert_int_equal(st.st_mode & 0777, 0660);
    assert_int_equal(st.st_gid, 0);
  } else { /* cannot give the file that group: private, warned */
    assert_int_equal(st.st_mode & 0777, 0600);
  }
  rr_health_table_close_writer(w);
  unsetenv("RERAIL_HEALTH_GROUP");
}

static void test_mode_group(void **state) {
  (void)state;
  struct group *g = getgrgid(0);
  assert_non_null(g);
  check_group(g->gr_name); /* by name ("root") */
  check_group("0");        /* by gid */
  assert_int_equal(warns, in_group_root() ? 0 : 1);
  /* An unknown group: warned, the table stays private. */
  unlink(path);
  rr_ht_reset_warnings();
  warns = 0;
  setenv("RERAIL_HEALTH_GROUP", "no-such-group-rerail", 1);
  rr_ht_writer *w = open_small(4);
  assert_int_equal(mode_of(path), 0600);
  assert_int_equal(warns, 1);
  assert_non_null(strstr(last_warn, "no-such-group-rerail"));
  rr_health_table_close_writer(w);
  unsetenv("RERAIL_HEALTH_GROUP");
}

static void expect_no_table(const char *p) {
  rr_ht_writer *w = (rr_ht_writer *)1;
  rr_ht_problem prob = RR_HT_FINE;
  assert_int_equal(rr_health_table_open_writer(p, NULL, &w, &prob), RR_ERR_SYSTEM);
  assert_null(w);
  assert_int_equal(prob, RR_HT_NOACCESS);
  setenv("RERAIL_HEALTH_PATH", p, 1);
  for (int i = 0; i < 3; i++) {
    rr_health_table_start(NULL, 0);
    assert_false(rr_health_table_active());
    rr_health_table_set_figures(0, RR_HT_TX, 1, 1, 1);
    rr_health_table_stop();
  }
  setenv("RERAIL_HEALTH_PATH", path, 1);
}

static void test_unwritable_dir(void **state) {
  (void)state;
  char p[PATH_MAX + 64];
  /* A directory that does not exist. */
  snprintf(p, sizeof p, "%s/no/such/dir/health", dir);
  expect_no_table(p);
  assert_int_equal(warns, 1);
  assert_non_null(strstr(last_warn, p));

  /* A directory this user may not write. Root writes everywhere: drop to
   * nobody in a child for this part. */
  char ro[PATH_MAX + 8];
  snprintf(ro, sizeof ro, "%s/ro", dir);
  assert_int_equal(mkdir(ro, 0555), 0);
  assert_int_equal(chmod(dir, 0755), 0);
  snprintf(p, sizeof p, "%s/health", ro);
  fflush(NULL);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(3);
    rr_ht_reset_warnings();
    warns = 0;
    rr_ht_writer *w = NULL;
    rr_ht_problem prob = RR_HT_FINE;
    rr_status st = rr_health_table_open_writer(p, NULL, &w, &prob);
    rr_health_table_start(NULL, 0);
    int active = rr_health_table_active();
    rr_health_table_stop();
    _exit(st == RR_ERR_SYSTEM && !w && prob == RR_HT_NOACCESS && !active && warns == 1 ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_int_equal(access(p, F_OK), -1);
}

/* ---- liveness ------------------------------------------------------------------------ */

/* A child that claims rows and then waits to be killed (or exits). */
static pid_t spawn_writer(const char *ifname, int exit_at_once) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  fflush(NULL);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    close(fds[0]);
    rr_ht_writer *w = NULL;
    if (rr_health_table_open_writer(path, NULL, &w, NULL) != RR_OK) _exit(2);
    if (rr_health_table_claim(w, 0, ifname) != RR_OK) _exit(3);
    char c = 'r';
    if (write(fds[1], &c, 1) != 1) _exit(4);
    if (exit_at_once) _exit(0); /* no close: rows left behind, as after a crash */
    for (;;) pause();
  }
  close(fds[1]);
  char c = 0;
  assert_int_equal(read(fds[0], &c, 1), 1);
  close(fds[0]);
  return child;
}

static void test_dead_rows(void **state) {
  (void)state;
  rr_ht_writer *w = open_small(3);
  assert_int_equal(rr_health_table_claim(w, 0, "mine"), RR_OK);
  pid_t killed = spawn_writer("killed", 0);
  pid_t exited = spawn_writer("exited", 1);
  int status;
  assert_int_equal(waitpid(exited, &status, 0), exited);
  assert_int_equal(kill(killed, SIGKILL), 0);
  /* Not reaped yet: a zombie is as dead as it gets. */
  usleep(50000);

  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  assert_int_equal(s.nic_count, 3);
  assert_int_equal(s.live_nics, 1);
  const rr_ht_nic_entry *e = find_nic(&s, "killed", (uint32_t)killed);
  assert_non_null(e);
  assert_int_equal(e->liveness, RR_HT_GONE);
  e = find_nic(&s, "exited", (uint32_t)exited);
  assert_non_null(e);
  assert_int_equal(e->liveness, RR_HT_GONE);
  assert_int_equal(find_nic(&s, "mine", (uint32_t)getpid())->liveness, RR_HT_LIVE);
  rr_health_table_snapshot_free(&s);
  assert_int_equal(waitpid(killed, &status, 0), killed);

  /* The table is full: a new process takes over a dead process's row. */
  rr_ht_writer *w2 = open_small(3);
  assert_int_equal(rr_health_table_claim(w2, 0, "taker"), RR_OK);
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  assert_int_equal(s.nic_count, 3);
  assert_int_equal(s.live_nics, 2);
  assert_non_null(find_nic(&s, "taker", (uint32_t)getpid()));
  rr_health_table_snapshot_free(&s);

  /* Pid reuse: a row whose pid runs, but with another start time. */
  rr_health_table_close_writer(w2);
  rr_ht_header h;
  read_file(path, &h, sizeof h);
  uint64_t start;
  assert_int_equal(rr_ht_proc_stat(getpid(), &start, NULL, NULL), RR_OK);
  rr_ht_nic_row r;
  memset(&r, 0, sizeof r);
  r.owner = rr_ht_owner_word((uint32_t)getpid(), start - 1);
  r.pid = (uint32_t)getpid();
  r.start_time = start - 1;
  r.pid_ns = rr_ht_self_pid_ns();
  r.heartbeat_ns = rr_ht_realtime_ns();
  snprintf(r.ifname, sizeof r.ifname, "reused");
  int slot = -1;
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  for (int i = 0; i < 3 && slot < 0; i++) { /* the one row no one holds now */
    uint64_t owner;
    int fd = open(path, O_RDONLY);
    assert_int_equal(pread(fd, &owner, 8, (off_t)(h.nic_offset + (size_t)i * 320 + 8)), 8);
    close(fd);
    if (!owner) slot = i;
  }
  rr_health_table_snapshot_free(&s);
  assert_true(slot >= 0);
  pwrite_at(&r, sizeof r, (off_t)(h.nic_offset + (size_t)slot * 320));
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  e = find_nic(&s, "reused", (uint32_t)getpid());
  assert_non_null(e);
  assert_int_equal(e->liveness, RR_HT_GONE);
  rr_health_table_snapshot_free(&s);

  /* A process that died inside a write: sequence stuck odd. Shown as gone
   * (fields untrusted), not skipped: its death must be visible. */
  r.seq = 41;
  r.owner = rr_ht_owner_word((uint32_t)killed, 12345);
  pwrite_at(&r, sizeof r, (off_t)(h.nic_offset + (size_t)slot * 320));
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  int torn_gone = 0;
  for (int i = 0; i < s.nic_count; i++) torn_gone += s.nic[i].torn && s.nic[i].liveness == RR_HT_GONE;
  assert_int_equal(torn_gone, 1);
  rr_health_table_snapshot_free(&s);
  /* ... and such a row can be claimed again (two claims: the other dead row
   * and this one); its sequence comes back even. */
  rr_ht_writer *w3 = open_small(3);
  assert_int_equal(rr_health_table_claim(w3, 0, "after-torn0"), RR_OK);
  assert_int_equal(rr_health_table_claim(w3, 1, "after-torn1"), RR_OK);
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  assert_int_equal(s.live_nics, 3);
  assert_non_null(find_nic(&s, "after-torn0", (uint32_t)getpid()));
  assert_non_null(find_nic(&s, "after-torn1", (uint32_t)getpid()));
  rr_health_table_snapshot_free(&s);
  uint64_t seq = 0;
  int fd = open(path, O_RDONLY);
  assert_int_equal(pread(fd, &seq, 8, (off_t)(h.nic_offset + (size_t)slot * 320)), 8);
  close(fd);
  assert_true(seq > 41 && seq % 2 == 0);
  rr_health_table_close_writer(w3);
  rr_health_table_close_writer(w);
}

static void test_heartbeat_ages(void **state) {
  (void)state;
  rr_ht_writer *w = open_small(4);
  assert_int_equal(rr_health_table_claim(w, 0, "quiet"), RR_OK);
  usleep(150000);
  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_read_ex(path, 100000000ull, &s), RR_OK); /* 100 ms */
  assert_int_equal(s.nic_count, 1);
  assert_int_equal(s.nic[0].liveness, RR_HT_AGED);
  assert_true(s.nic[0].heartbeat_age_ns >= 100000000ull);
  assert_int_equal(s.live_nics, 0);
  rr_health_table_snapshot_free(&s);
  rr_health_table_heartbeat(w);
  assert_int_equal(rr_health_table_read_ex(path, 100000000ull, &s), RR_OK);
  assert_int_equal(s.nic[0].liveness, RR_HT_LIVE);
  rr_health_table_snapshot_free(&s);
  /* The default threshold comes from RERAIL_HEALTH_STALE_MS. */
  setenv("RERAIL_HEALTH_STALE_MS", "250", 1);
  assert_int_equal(rr_health_table_stale_ns(), 250000000ull);
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  assert_int_equal(s.stale_after_ns, 250000000ull);
  rr_health_table_snapshot_free(&s);
  unsetenv("RERAIL_HEALTH_STALE_MS");
  rr_health_table_close_writer(w);
}

/* A forked child inherits the mapping: it must neither write nor release
 * its parent's rows. */
static void test_fork_child_silent(void **state) {
  (void)state;
  rr_ht_writer *w = open_small(4);
  assert_int_equal(rr_health_table_claim(w, 0, "parent"), RR_OK);
  rr_health_table_figures(w, 0, RR_HT_TX, 100, 1, 2);
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    rr_health_table_figures(w, 0, RR_HT_TX, 666, 6, 6);
    rr_health_table_close_writer(w);
    _exit(0);
  }
  int status;
  assert_int_equal(waitpid(child, &status, 0), child);
  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  assert_int_equal(s.live_nics, 1);
  assert_int_equal(s.nic[0].row.tx.bytes_per_s, 100);
  rr_health_table_snapshot_free(&s);
  rr_health_table_close_writer(w);
}

static void test_absent(void **state) {
  (void)state;
  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_read(path, &s), RR_ERR_SYSTEM);
  assert_int_equal(s.problem, RR_HT_ABSENT);
  rr_health_table_snapshot_free(&s);
  assert_int_equal(warns, 0); /* no job on the host is not worth a warning */
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_layout),           T(test_proc_stat),         T(test_roundtrip),
      T(test_rows_distinct_and_full), T(test_process_hook), T(test_exit_releases),
      T(test_bad_corrupt),
      T(test_bad_counts),       T(test_bad_grown),         T(test_bad_truncated),
      T(test_bad_truncated_header), T(test_bad_empty),     T(test_bad_foreign),
      T(test_bad_version),      T(test_bad_version_raw),   T(test_bad_world_writable),
      T(test_bad_symlink),      T(test_bad_rows),          T(test_mode_private),
      T(test_mode_group),       T(test_unwritable_dir),    T(test_dead_rows),
      T(test_heartbeat_ages),   T(test_fork_child_silent), T(test_absent),
  };
  return cmocka_run_group_tests_name("health_table", tests, NULL, NULL);
}
