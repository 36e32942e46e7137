/* The shared health table on a hostile host: a file planted by another user,
 * a symbolic link or a FIFO at the path, and a file truncated or rewritten by
 * another process while readers and writers are live.
 *
 * Claims: every refusal is one clear warning and the plugin carries on
 * without the table; no reader or writer ever dies of SIGBUS; a writer whose
 * file changed stops publishing (warned once), readers report the change and
 * keep going. Root gets no exception: it refuses another user's table like
 * anyone else. The ownership tests need root (they create files for other
 * users and drop privileges in children) and fail without it; CI runs as
 * root. Refusals are judged by their counted reason, never by the words of
 * a warning. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rr_health_bus.h"
#include "health_test_env.h"
#include "rr_health_table.h"
#include "rr_health_table_internal.h"
#include "rr_log.h"

#define OTHER_UID 65534 /* owns the planted file ("nobody") */
#define OTHER_GID 65534
#define CHILD_UID 4242  /* the process that finds it: some third user */
#define CHILD_GID 4242

static int setup(void **state) {
  (void)state;
  /* other users must reach the file */
  return ht_test_dir_setup("rr-ht-hostile", 1);
}

static rr_ht_writer *open_writer(uint32_t rows) {
  rr_ht_writer_opts o = {.nic_rows = rows, .peer_rows = rows, .group = ""};
  rr_ht_writer *w = NULL;
  rr_ht_problem p = RR_HT_CORRUPT;
  assert_int_equal(rr_health_table_open_writer(path, &o, &w, &p), RR_OK);
  assert_int_equal(p, RR_HT_FINE);
  return w;
}

/* A valid table (made by a writer that then leaves), owned as asked. */
static void make_table(uid_t uid, gid_t gid, mode_t mode) {
  rr_health_table_close_writer(open_writer(8));
  assert_int_equal(chown(path, uid, gid), 0);
  assert_int_equal(chmod(path, mode), 0);
}

static void expect_exit0(pid_t child) {
  int status = 0;
  assert_int_equal(waitpid(child, &status, 0), child);
  if (WIFSIGNALED(status)) fail_msg("child %d killed by signal %d", (int)child, WTERMSIG(status));
  assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status)) fail_msg("child %d: check %d failed", (int)child, WEXITSTATUS(status));
}

/* A child must die of a fault, not return into cmocka's runner through the
 * handlers it inherited: the parent then sees the signal. */
static pid_t fork_child(void) {
  fflush(NULL);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    signal(SIGBUS, SIG_DFL);
    signal(SIGSEGV, SIG_DFL);
    signal(SIGABRT, SIG_DFL);
  }
  return child;
}

static void require_root(void) {
  if (geteuid() != 0) fail_msg("these tests need root (they create files for other users)");
}

/* ---- ownership ------------------------------------------------------------------- */

/* The whole file and its modification time, to prove a refusal left every
 * byte alone. The time is first set far in the past: a write would move it
 * to now, however coarse the file system's clock. */
typedef struct file_image {
  unsigned char *bytes;
  size_t size;
  struct timespec mtime;
} file_image;

static file_image image_of(const char *p) {
  file_image im;
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  im.size = (size_t)st.st_size;
  im.mtime = st.st_mtim;
  im.bytes = malloc(im.size + 1);
  assert_non_null(im.bytes);
  int fd = open(p, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, im.bytes, im.size, 0), (ssize_t)im.size);
  close(fd);
  return im;
}

static file_image freeze(const char *p) {
  const struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
  assert_int_equal(utimensat(AT_FDCWD, p, old, AT_SYMLINK_NOFOLLOW), 0);
  return image_of(p);
}

static void expect_unchanged(const char *p, file_image *before) {
  file_image now = image_of(p);
  assert_int_equal(now.size, before->size);
  assert_memory_equal(now.bytes, before->bytes, before->size);
  assert_int_equal(now.mtime.tv_sec, before->mtime.tv_sec);
  assert_int_equal(now.mtime.tv_nsec, before->mtime.tv_nsec);
  free(now.bytes);
  free(before->bytes);
}

/* This process (root in CI) meets the file at the path: the reader and the
 * writer refuse it for reason why, each counted once and said once, the
 * plugin's hook runs without a table, and the file at check (the path, or
 * a link's target; NULL: nothing to compare, a FIFO) keeps every byte. */
static void expect_refused_as(rr_ht_refusal why, const char *check) {
  file_image before = {0};
  if (check) before = freeze(check);
  rr_ht_reset_warnings();
  warns = 0;
  uint64_t n0 = rr_health_table_refusals(why);

  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_read(path, &s), RR_ERR_INVALID);
  assert_int_equal(s.problem, RR_HT_INSECURE);
  assert_int_equal(s.nic_count, 0);
  rr_health_table_snapshot_free(&s);
  assert_int_equal(rr_health_table_refusals(why), n0 + 1);
  assert_int_equal(warns, 1);

  rr_ht_writer *w = NULL;
  rr_ht_problem p = RR_HT_FINE;
  assert_int_equal(rr_health_table_open_writer(path, NULL, &w, &p), RR_ERR_INVALID);
  assert_null(w);
  assert_int_equal(p, RR_HT_INSECURE);
  assert_int_equal(rr_health_table_refusals(why), n0 + 2);
  assert_int_equal(warns, 2);

  /* The plugin keeps working without the table, and says nothing more. */
  start_without_table();
  assert_int_equal(rr_health_table_refusals(why), n0 + 5);
  assert_int_equal(warns, 2);
  if (check) expect_unchanged(check, &before);
}

/* This process uses the file at the path: reads it, publishes into it. */
static void expect_used(void) {
  uint64_t n0[RR_HT_REFUSAL_KINDS];
  for (int k = 0; k < RR_HT_REFUSAL_KINDS; k++) n0[k] = rr_health_table_refusals((rr_ht_refusal)k);
  rr_ht_reset_warnings();
  warns = 0;
  rr_ht_writer *w = NULL;
  rr_ht_problem p = RR_HT_CORRUPT;
  assert_int_equal(rr_health_table_open_writer(path, NULL, &w, &p), RR_OK);
  assert_int_equal(p, RR_HT_FINE);
  assert_int_equal(rr_health_table_claim(w, 0, "eth0"), RR_OK);
  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_read(path, &s), RR_OK);
  assert_int_equal(s.problem, RR_HT_FINE);
  assert_int_equal(s.nic_count, 1);
  rr_health_table_snapshot_free(&s);
  rr_health_table_close_writer(w);
  for (int k = 0; k < RR_HT_REFUSAL_KINDS; k++)
    assert_int_equal(rr_health_table_refusals((rr_ht_refusal)k), n0[k]);
  assert_int_equal(warns, 0);
}

/* In a child running as CHILD_UID: what do a reader and a writer make of the
 * file? want RR_HT_TRUSTED: both use it; else the reader refuses it for that
 * reason, warned once, and the writer refuses it too (for that reason, or
 * as not accessible when the mode does not even let it open the file for
 * writing). Exit code: 0, or the number of the check that failed. */
static int child_checks(rr_ht_refusal want, int writer_may_open) {
  if (setgroups(0, NULL) != 0 || setresgid(CHILD_GID, CHILD_GID, CHILD_GID) != 0 ||
      setresuid(CHILD_UID, CHILD_UID, CHILD_UID) != 0)
    return 90;
  rr_ht_reset_warnings();
  warns = 0;
  uint64_t n0 = rr_health_table_refusals(want);
  rr_ht_snapshot s;
  rr_status st = rr_health_table_read(path, &s);
  rr_health_table_snapshot_free(&s);
  if (want == RR_HT_TRUSTED) {
    if (st != RR_OK) return 1;
  } else {
    if (st != RR_ERR_INVALID || s.problem != RR_HT_INSECURE) return 2;
    if (rr_health_table_refusals(want) != n0 + 1) return 3;
    if (warns != 1) return 4;
  }
  rr_ht_writer *w = NULL;
  rr_ht_problem p = RR_HT_FINE;
  st = rr_health_table_open_writer(path, NULL, &w, &p);
  if (want == RR_HT_TRUSTED) {
    if (st != RR_OK || !w) return 5;
    if (rr_health_table_claim(w, 0, "eth0") != RR_OK) return 6;
    rr_health_table_close_writer(w);
    return 0;
  }
  if (st == RR_OK || w) return 7;
  if (p != (writer_may_open ? RR_HT_INSECURE : RR_HT_NOACCESS)) return 8;
  if (rr_health_table_refusals(want) != n0 + 1 + (writer_may_open ? 1 : 0)) return 11;
  /* The plugin carries on without the table, warned once. */
  rr_health_table_start(NULL, 0);
  int active = rr_health_table_active();
  rr_health_table_set_figures(0, RR_HT_TX, 1, 2, 3);
  rr_health_table_stop();
  if (active) return 9;
  return warns == 2 ? 0 : 10;
}

static void run_child(rr_ht_refusal want, int writer_may_open) {
  pid_t child = fork_child();
  if (child == 0) _exit(child_checks(want, writer_may_open));
  expect_exit0(child);
}

/* A table another user planted: readable by all, writable by nobody else. */
static void test_other_owner_refused(void **state) {
  (void)state;
  require_root();
  make_table(OTHER_UID, OTHER_GID, 0644);
  run_child(RR_HT_REFUSED_OWNER, 0);
}

/* Writable through the group: still another user's file, refused, unless
 * RERAIL_HEALTH_GROUP names that group (the operator shares the table). */
static void test_other_owner_group(void **state) {
  (void)state;
  require_root();
  make_table(OTHER_UID, CHILD_GID, 0660);
  run_child(RR_HT_REFUSED_OWNER, 1);
  setenv("RERAIL_HEALTH_GROUP", "4242", 1);
  run_child(RR_HT_TRUSTED, 1);
  setenv("RERAIL_HEALTH_GROUP", "4243", 1); /* another group: no */
  run_child(RR_HT_REFUSED_OWNER, 1);
  unsetenv("RERAIL_HEALTH_GROUP");
}

/* Root gets no exception: another user's table, readable by all or writable
 * by all, is neither read nor written by root, and keeps every byte. */
static void test_root_refuses_other_owner(void **state) {
  (void)state;
  require_root();
  make_table(OTHER_UID, OTHER_GID, 0644);
  expect_refused_as(RR_HT_REFUSED_OWNER, path);
  assert_int_equal(chmod(path, 0666), 0);
  expect_refused_as(RR_HT_REFUSED_OTHER_WRITABLE, path);
  /* Naming a group the file does not carry changes nothing. */
  assert_int_equal(chmod(path, 0660), 0);
  setenv("RERAIL_HEALTH_GROUP", "4243", 1);
  expect_refused_as(RR_HT_REFUSED_OWNER, path);
  unsetenv("RERAIL_HEALTH_GROUP");
}

/* The group rule, as root: another user's file of RERAIL_HEALTH_GROUP's
 * group is used with exactly the mode a writer gives it (0660); writable by
 * all, or of any other mode, it is refused. */
static void test_root_group_rule(void **state) {
  (void)state;
  require_root();
  make_table(OTHER_UID, CHILD_GID, 0660);
  setenv("RERAIL_HEALTH_GROUP", "4242", 1);
  expect_used();
  assert_int_equal(chmod(path, 0666), 0);
  expect_refused_as(RR_HT_REFUSED_OTHER_WRITABLE, path);
  assert_int_equal(chmod(path, 0640), 0);
  expect_refused_as(RR_HT_REFUSED_GROUP_MODE, path);
  assert_int_equal(chmod(path, 0664), 0);
  expect_refused_as(RR_HT_REFUSED_GROUP_MODE, path);
  assert_int_equal(chmod(path, 02660), 0);
  expect_refused_as(RR_HT_REFUSED_GROUP_MODE, path);
  unsetenv("RERAIL_HEALTH_GROUP");
  assert_int_equal(chmod(path, 0660), 0);
  expect_refused_as(RR_HT_REFUSED_OWNER, path);
}

/* The control: this process's own file is used, whatever group it carries
 * and as long as no other user may write it. */
static void test_own_file(void **state) {
  (void)state;
  require_root();
  make_table(geteuid(), OTHER_GID, 0644);
  expect_used();
  make_table(CHILD_UID, CHILD_GID, 0600); /* the owner itself, not root */
  run_child(RR_HT_TRUSTED, 1);
}

/* ---- things planted at the path ------------------------------------------------------ */

/* A link to a valid table of this user is still refused: never followed,
 * and its target keeps every byte. */
static void test_symlink(void **state) {
  (void)state;
  char real[PATH_MAX + 40];
  snprintf(real, sizeof real, "%s.real", path);
  rr_health_table_close_writer(open_writer(4));
  assert_int_equal(rename(path, real), 0);
  assert_int_equal(symlink(real, path), 0);
  expect_refused_as(RR_HT_REFUSED_SYMLINK, real);
}

/* A FIFO would block an open for reading until someone writes to it: it is
 * refused at once (the alarm turns a hang into a failure). */
static void test_fifo(void **state) {
  (void)state;
  assert_int_equal(mkfifo(path, 0600), 0);
  alarm(10);
  expect_refused_as(RR_HT_REFUSED_NOT_REGULAR, NULL);
  alarm(0);
}

/* ---- truncation under live readers and writers ---------------------------------------- */

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct shared {
  _Atomic int quit;
  _Atomic int ready;
  _Atomic uint64_t reads_ok, reads_failed, updates;
  _Atomic int writer_stopped, writer_warns;
} shared;

/* Reads in a loop: one long-lived reader and open-read-close snapshots. A
 * failed read says why (truncated, corrupt, foreign...) and the loop goes on,
 * reopening. */
static int reader_child(shared *sh) {
  rr_ht_reader *r = NULL;
  if (rr_health_table_reader_open(path, &r, NULL, NULL, 0) != RR_OK) return 20;
  atomic_fetch_add(&sh->ready, 1);
  while (!atomic_load(&sh->quit)) {
    rr_ht_snapshot s;
    if (!r) rr_health_table_reader_open(path, &r, NULL, NULL, 0); /* may fail: the file is bad */
    if (r) {
      if (rr_health_table_reader_read(r, 0, &s) == RR_OK) {
        atomic_fetch_add(&sh->reads_ok, 1);
      } else {
        if (s.problem == RR_HT_FINE || s.nic_count || !s.detail[0]) return 21; /* says nothing */
        atomic_fetch_add(&sh->reads_failed, 1);
        rr_health_table_reader_close(r);
        r = NULL;
      }
      rr_health_table_snapshot_free(&s);
    }
    if (rr_health_table_read(path, &s) == RR_OK) atomic_fetch_add(&sh->reads_ok, 1);
    else if (s.problem == RR_HT_FINE) return 22;
    else atomic_fetch_add(&sh->reads_failed, 1);
    rr_health_table_snapshot_free(&s);
  }
  rr_health_table_reader_close(r);
  return 0;
}

/* Publishes as fast as it can (every update stores into the mapping) until
 * told to quit; it must notice the change, say so once and stop. */
static int writer_child(shared *sh) {
  rr_ht_reset_warnings();
  warns = 0;
  rr_ht_writer *w = NULL;
  if (rr_health_table_open_writer(path, NULL, &w, NULL) != RR_OK) return 30;
  if (rr_health_table_claim(w, 0, "eth0") != RR_OK || rr_health_table_claim(w, 1, "eth1") != RR_OK)
    return 31;
  atomic_fetch_add(&sh->ready, 1);
  for (uint64_t i = 1; !atomic_load(&sh->quit); i++) {
    rr_health_table_figures(w, (int)(i & 1), RR_HT_TX, i, i, i);
    if (!(i % 64)) rr_health_table_heartbeat(w);
    atomic_fetch_add(&sh->updates, 1);
    if (!rr_health_table_publishing(w)) atomic_store(&sh->writer_stopped, 1);
  }
  atomic_store(&sh->writer_warns, warns);
  rr_health_table_close_writer(w);
  return 0;
}

static pid_t spawn(shared *sh, int (*fn)(shared *)) {
  pid_t child = fork_child();
  if (child == 0) _exit(fn(sh));
  return child;
}

static void wait_updates(shared *sh, uint64_t more) {
  uint64_t want = atomic_load(&sh->updates) + more, t0 = mono_ns();
  while (atomic_load(&sh->updates) < want && mono_ns() - t0 < 5000000000ull) usleep(1000);
}

/* cut: the sizes the file is truncated to, one after the other. */
static void truncate_under_load(const off_t *cut, int ncut) {
  shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(sh != MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  rr_ht_writer *w = open_writer(64); /* this process writes too, at its own pace */
  assert_int_equal(rr_health_table_claim(w, 0, "parent0"), RR_OK);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  pid_t kids[3] = {spawn(sh, writer_child), spawn(sh, reader_child), spawn(sh, reader_child)};
  uint64_t t0 = mono_ns();
  while (atomic_load(&sh->ready) < 3 && mono_ns() - t0 < 5000000000ull) usleep(1000);
  assert_int_equal(atomic_load(&sh->ready), 3);
  wait_updates(sh, 1000);
  uint64_t ok_before = atomic_load(&sh->reads_ok);
  for (int i = 0; i < ncut; i++) {
    assert_int_equal(truncate(path, cut[i]), 0);
    wait_updates(sh, 1000); /* the writer keeps calling; its calls now do nothing */
    usleep(20000);
  }
  atomic_store(&sh->quit, 1);
  for (int i = 0; i < 3; i++) expect_exit0(kids[i]);

  assert_true(ok_before > 0);
  assert_true(atomic_load(&sh->reads_failed) > 0);
  assert_int_equal(atomic_load(&sh->writer_stopped), 1);
  assert_int_equal(atomic_load(&sh->writer_warns), 1);
  /* This process's writer notices at its next update, says so once, stops;
   * the plugin would carry on without the table. */
  rr_health_table_figures(w, 0, RR_HT_TX, 5, 5, 5);
  rr_health_table_heartbeat(w);
  assert_false(rr_health_table_publishing(w));
  assert_int_equal(warns, 1);
  assert_non_null(strstr(last_warn, "stops publishing"));
  rr_health_table_close_writer(w);
  munmap(sh, sizeof *sh);
}

static void test_truncate_to_zero(void **state) {
  (void)state;
  const off_t cut[] = {0};
  truncate_under_load(cut, 1);
}

static void test_truncate_to_half_then_zero(void **state) {
  (void)state;
  rr_health_table_close_writer(open_writer(64));
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  const off_t cut[] = {st.st_size / 2, st.st_size / 4 + 100, 0};
  truncate_under_load(cut, 3);
}

/* Rewritten to the same size (truncated to zero, grown back): the size
 * check cannot see it, the header check at the next heartbeat does (and an
 * update that finds its row's owner word gone looks at the header before
 * taking another row). */
static void test_rewritten_same_size(void **state) {
  (void)state;
  rr_ht_writer *w = open_writer(8);
  assert_int_equal(rr_health_table_claim(w, 0, "eth0"), RR_OK);
  rr_ht_reader *r = NULL;
  assert_int_equal(rr_health_table_reader_open(path, &r, NULL, NULL, 0), RR_OK);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(truncate(path, 0), 0);
  assert_int_equal(truncate(path, st.st_size), 0);
  rr_health_table_heartbeat(w);
  assert_false(rr_health_table_publishing(w));
  assert_int_equal(warns, 1);
  assert_non_null(strstr(last_warn, "header changed"));
  assert_non_null(strstr(last_warn, "stops publishing"));
  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_reader_read(r, 0, &s), RR_ERR_INVALID);
  assert_int_equal(s.problem, RR_HT_CORRUPT);
  assert_int_equal(s.nic_count, 0);
  rr_health_table_snapshot_free(&s);
  rr_health_table_reader_close(r);
  rr_health_table_close_writer(w);

  /* The same, noticed by an update instead of the heartbeat. */
  unlink(path);
  w = open_writer(8);
  assert_int_equal(rr_health_table_claim(w, 0, "eth0"), RR_OK);
  assert_int_equal(truncate(path, 0), 0);
  assert_int_equal(truncate(path, st.st_size), 0);
  rr_ht_reset_warnings();
  warns = 0;
  rr_health_table_figures(w, 0, RR_HT_TX, 1, 1, 1);
  assert_false(rr_health_table_publishing(w));
  assert_int_equal(warns, 1);
  assert_non_null(strstr(last_warn, "header changed"));
  rr_health_table_close_writer(w);
  /* Never repaired: the zeros stay. */
  rr_ht_header h;
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, &h, sizeof h, 0), (ssize_t)sizeof h);
  close(fd);
  assert_int_equal(h.version, 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_other_owner_refused), T(test_other_owner_group),  T(test_root_refuses_other_owner),
      T(test_root_group_rule),     T(test_own_file),           T(test_symlink),
      T(test_fifo),                T(test_truncate_to_zero),   T(test_truncate_to_half_then_zero),
      T(test_rewritten_same_size),
  };
  return cmocka_run_group_tests_name("health_hostile", tests, NULL, NULL);
}
