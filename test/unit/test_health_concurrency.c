/* The health table under fire: 8 writer processes hammer their rows while 3
 * reader processes copy the table continuously.
 *
 * Every figure a writer publishes is derived from one counter c:
 *   bytes_per_s = c, p50_ns = F1(c), p99_ns = F2(c)   (per direction)
 * so a reader that ever sees a row mixing two values of c has seen a torn
 * row. Claims: zero torn rows through the sequence lock; writers never
 * wait: the longest single update is reported, and an update that spent
 * more than 100 ms waiting fails - asleep (a voluntary context switch) or
 * spinning (thread CPU time). Wall time alone would blame the scheduler's
 * doing on the table: with 12 busy processes on a 2-core machine (or a
 * busy hypervisor) a preempted writer waits its turn for tens or hundreds of
 * milliseconds, running no code at all;
 * a SIGKILLed writer's rows turn "gone" within the staleness threshold and
 * a SIGSTOPped writer's rows "aged out", while every other writer stays live.
 *
 * For contrast one reader also copies the same fields without the lock and
 * counts how often that tears: it shows the hammering is real (reported
 * only, it depends on the machine). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rr_health_table.h"
#include "rr_health_table_internal.h"

#define WRITERS 8
#define READERS 3
#define DEVS 2
#define HAMMER_NS 3000000000ull
#define STALE_NS 500000000ull /* readers' heartbeat threshold in this test */
#define STUCK_NS 100000000ull /* a writer update longer than this is a failure */

static uint64_t f1(uint64_t c) { return c * 2654435761u + 17; }
static uint64_t f2(uint64_t c) { return c ^ 0x5bd1e9955bd1e995ull; }

#define BURST 16  /* updates between two looks at the context-switch counters */
#define BUCKETS 40 /* log2 histogram of update times in ns */

typedef struct shared {
  _Atomic int phase;                 /* 0 hammer, 1 idle (heartbeat only), 2 quit */
  _Atomic uint64_t updates[WRITERS];
  _Atomic uint64_t max_update_ns[WRITERS];
  _Atomic uint64_t max_stuck_ns[WRITERS]; /* longest update spent asleep or on the CPU */
  _Atomic uint64_t slept[WRITERS];        /* voluntary context switches inside updates */
  _Atomic uint64_t hist[BUCKETS];
  _Atomic int writer_ok[WRITERS];
  _Atomic int writer_idle[WRITERS];       /* left the hammer loop */
  _Atomic uint64_t snapshots, rows_checked, torn_seen, torn_skipped;
  _Atomic uint64_t raw_checked, raw_torn;
  _Atomic int readers_ok;
} shared;

static shared *sh;
static char path[128];
static pid_t writers[WRITERS], readers[READERS];
static int reaped_w[WRITERS], reaped_r[READERS]; /* the teardown kills only the others */

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- writer processes ------------------------------------------------------------ */

static void writer_main(int id) {
  rr_ht_writer *w = NULL;
  if (rr_health_table_open_writer(path, NULL, &w, NULL) != RR_OK) _exit(2);
  for (int d = 0; d < DEVS; d++) {
    char name[16];
    snprintf(name, sizeof name, "w%d-%d", id, d);
    if (rr_health_table_claim(w, d, name) != RR_OK) _exit(3);
  }
  atomic_store(&sh->writer_ok[id], 1);
  uint64_t c = (uint64_t)id << 40, max = 0, stuck = 0, slept = 0, n = 0;
  uint64_t hist[BUCKETS] = {0};
  while (atomic_load_explicit(&sh->phase, memory_order_relaxed) == 0) {
    /* A burst of updates between two reads of this thread's context-switch
     * counters (the system calls stay outside the timed updates). */
    struct rusage r0, r1;
    struct timespec c0, c1;
    getrusage(RUSAGE_THREAD, &r0);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    uint64_t burst_max = 0;
    for (int k = 0; k < BURST / (DEVS * 2); k++) {
      c++;
      for (int d = 0; d < DEVS; d++)
        for (int dir = RR_HT_TX; dir <= RR_HT_RX; dir++) {
          uint64_t t0 = mono_ns();
          rr_health_table_figures(w, d, dir, c, f1(c), f2(c));
          uint64_t dt = mono_ns() - t0;
          if (dt > burst_max) burst_max = dt;
          int b = 0;
          while (b < BUCKETS - 1 && (dt >> (b + 1))) b++;
          hist[b]++;
          n++;
        }
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    getrusage(RUSAGE_THREAD, &r1);
    long vol = r1.ru_nvcsw - r0.ru_nvcsw;
    uint64_t cpu = (uint64_t)((c1.tv_sec - c0.tv_sec) * 1000000000ll + (c1.tv_nsec - c0.tv_nsec));
    slept += (uint64_t)vol;
    if (burst_max > max) max = burst_max;
    /* Stuck means waiting: asleep (a voluntary switch: the whole wall time
     * counts) or spinning (CPU time). Preemption - by this kernel or by the
     * hypervisor under it - is neither: the thread simply did not run. */
    uint64_t waited = vol > 0 ? burst_max : cpu < burst_max ? cpu : burst_max;
    if (waited > stuck) stuck = waited;
  }
  atomic_store(&sh->updates[id], n);
  atomic_store(&sh->max_update_ns[id], max);
  atomic_store(&sh->max_stuck_ns[id], stuck);
  atomic_store(&sh->slept[id], slept);
  for (int b = 0; b < BUCKETS; b++) atomic_fetch_add(&sh->hist[b], hist[b]);
  atomic_store(&sh->writer_idle[id], 1);
  /* Idle, as a process between collectives: heartbeats only. */
  while (atomic_load(&sh->phase) == 1) {
    rr_health_table_heartbeat(w);
    usleep(20000);
  }
  rr_health_table_close_writer(w);
  _exit(0);
}

/* ---- reader processes ------------------------------------------------------------ */

static int consistent(const rr_ht_figures *f) {
  /* 0/0/0 before the first update of that direction. */
  if (!f->bytes_per_s && !f->p50_ns && !f->p99_ns) return 1;
  return f->p50_ns == f1(f->bytes_per_s) && f->p99_ns == f2(f->bytes_per_s);
}

/* The contrast: the same three fields, copied with no lock, last one first so
 * that a write in between shows. */
static void raw_pass(const unsigned char *base, const rr_ht_header *h) {
  for (uint32_t i = 0; i < WRITERS * DEVS + 4 && i < h->nic_rows; i++) {
    const rr_ht_word *row = (const rr_ht_word *)(base + h->nic_offset + (size_t)i * RR_HT_NIC_ROW_SIZE);
    size_t at = offsetof(rr_ht_nic_row, tx) / 8;
    uint64_t p99 = atomic_load_explicit(&row[at + 2], memory_order_relaxed);
    uint64_t p50 = atomic_load_explicit(&row[at + 1], memory_order_relaxed);
    uint64_t bytes = atomic_load_explicit(&row[at], memory_order_relaxed);
    if (!bytes) continue;
    atomic_fetch_add(&sh->raw_checked, 1);
    if (p50 != f1(bytes) || p99 != f2(bytes)) atomic_fetch_add(&sh->raw_torn, 1);
  }
}

static void reader_main(int id) {
  rr_ht_reader *r = NULL;
  if (rr_health_table_reader_open(path, &r, NULL, NULL, 0) != RR_OK) _exit(2);
  const unsigned char *raw = NULL;
  rr_ht_header h;
  int fd = open(path, O_RDONLY);
  if (fd < 0 || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) _exit(3);
  if (id == 0) {
    raw = mmap(NULL, h.file_size, PROT_READ, MAP_SHARED, fd, 0);
    if (raw == MAP_FAILED) _exit(4);
  }
  close(fd);
  atomic_fetch_add(&sh->readers_ok, 1);
  while (atomic_load_explicit(&sh->phase, memory_order_relaxed) == 0) {
    rr_ht_snapshot s;
    if (rr_health_table_reader_read(r, STALE_NS, &s) != RR_OK) _exit(5);
    uint64_t torn = 0;
    for (int i = 0; i < s.nic_count; i++) {
      if (s.nic[i].torn) continue; /* a dead writer's row, fields untrusted by contract */
      torn += !consistent(&s.nic[i].row.tx) + !consistent(&s.nic[i].row.rx);
    }
    atomic_fetch_add(&sh->snapshots, 1);
    atomic_fetch_add(&sh->rows_checked, (uint64_t)s.nic_count);
    atomic_fetch_add(&sh->torn_seen, torn);
    atomic_fetch_add(&sh->torn_skipped, (uint64_t)s.torn_skipped);
    rr_health_table_snapshot_free(&s);
    if (raw)
      for (int k = 0; k < 64; k++) raw_pass(raw, &h);
  }
  rr_health_table_reader_close(r);
  _exit(0);
}

/* ---- the test -------------------------------------------------------------------- */

static int count_state(const rr_ht_snapshot *s, uint32_t pid, rr_ht_liveness l) {
  int n = 0;
  for (int i = 0; i < s->nic_count; i++) n += s->nic[i].row.pid == pid && s->nic[i].liveness == l;
  return n;
}

/* Poll until writer pid's rows are all in state l, while no other writer's
 * row is gone (strict: every other row live). Returns how long that took,
 * or UINT64_MAX. Non-strict is for the hammer phase: a writer the scheduler
 * starves longer than the threshold is rightly "aged" there, and says
 * nothing about the killed one. */
static uint64_t wait_for(pid_t pid, rr_ht_liveness l, const pid_t *all, int strict) {
  uint64_t t0 = mono_ns();
  while (mono_ns() - t0 < 3 * STALE_NS) {
    rr_ht_snapshot s;
    assert_int_equal(rr_health_table_read_ex(path, STALE_NS, &s), RR_OK);
    int others_ok = 1;
    for (int i = 0; i < WRITERS; i++)
      if (all[i] != pid && all[i] > 0)
        others_ok &= strict ? count_state(&s, (uint32_t)all[i], RR_HT_LIVE) == DEVS
                            : count_state(&s, (uint32_t)all[i], RR_HT_GONE) == 0;
    int mine = count_state(&s, (uint32_t)pid, l);
    rr_health_table_snapshot_free(&s);
    if (mine == DEVS && others_ok) return mono_ns() - t0;
    usleep(5000);
  }
  return UINT64_MAX;
}

static void test_hammer(void **state) {
  (void)state;
  snprintf(path, sizeof path, "/dev/shm/rr-ht-concurrency-%d", (int)getpid());
  if (access("/dev/shm", W_OK) != 0) snprintf(path, sizeof path, "/tmp/rr-ht-concurrency-%d", (int)getpid());
  unlink(path);
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(sh != MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  rr_ht_writer_opts o = {.nic_rows = 64, .peer_rows = 16};
  rr_ht_writer *creator = NULL;
  assert_int_equal(rr_health_table_open_writer(path, &o, &creator, NULL), RR_OK);
  rr_health_table_close_writer(creator);

  fflush(NULL);
  for (int i = 0; i < WRITERS; i++)
    if ((writers[i] = fork()) == 0) writer_main(i);
  uint64_t t0 = mono_ns();
  while (mono_ns() - t0 < 2000000000ull) {
    int ok = 1;
    for (int i = 0; i < WRITERS; i++) ok &= atomic_load(&sh->writer_ok[i]);
    if (ok) break;
    usleep(1000);
  }
  for (int i = 0; i < READERS; i++)
    if ((readers[i] = fork()) == 0) reader_main(i);
  for (int i = 0; i < WRITERS; i++) assert_int_equal(atomic_load(&sh->writer_ok[i]), 1);

  /* Hammer; kill writer 0 in the middle of it (it may die inside a write). */
  uint64_t start = mono_ns();
  usleep((useconds_t)(HAMMER_NS * 2 / 3 / 1000));
  assert_int_equal(kill(writers[0], SIGKILL), 0);
  /* From its death (a zombie, not reaped: WNOWAIT) to "gone" in a snapshot. */
  siginfo_t si;
  assert_int_equal(waitid(P_PID, (id_t)writers[0], &si, WEXITED | WNOWAIT), 0);
  uint64_t gone_after = wait_for(writers[0], RR_HT_GONE, writers, 0);
  while (mono_ns() - start < HAMMER_NS) usleep(10000);
  atomic_store(&sh->phase, 1);
  for (int i = 0; i < READERS; i++) {
    int st;
    assert_int_equal(waitpid(readers[i], &st, 0), readers[i]);
    reaped_r[i] = 1;
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  int st;
  assert_int_equal(waitpid(writers[0], &st, 0), writers[0]);
  reaped_w[0] = 1;
  assert_true(WIFSIGNALED(st));
  /* Still gone once reaped; the others still live while idle. */
  uint64_t gone_reaped = wait_for(writers[0], RR_HT_GONE, writers, 0);

  /* Every writer left the hammer loop (its figures are final): a stop
   * below must not be counted as a slow update. */
  t0 = mono_ns();
  for (int i = 1; i < WRITERS; i++)
    while (!atomic_load(&sh->writer_idle[i]) && mono_ns() - t0 < 5000000000ull) usleep(1000);
  for (int i = 1; i < WRITERS; i++) assert_int_equal(atomic_load(&sh->writer_idle[i]), 1);

  /* A writer that stops (SIGSTOP: alive, silent) ages out; back, it is live. */
  assert_int_equal(kill(writers[1], SIGSTOP), 0);
  pid_t without0[WRITERS];
  memcpy(without0, writers, sizeof without0);
  without0[0] = -1;
  uint64_t aged_after = wait_for(writers[1], RR_HT_AGED, without0, 1);
  assert_int_equal(kill(writers[1], SIGCONT), 0);
  uint64_t live_again = wait_for(writers[1], RR_HT_LIVE, without0, 1);

  atomic_store(&sh->phase, 2);
  for (int i = 1; i < WRITERS; i++) {
    assert_int_equal(waitpid(writers[i], &st, 0), writers[i]);
    reaped_w[i] = 1;
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  /* Closed writers released their rows; only the killed one's remain. */
  rr_ht_snapshot s;
  assert_int_equal(rr_health_table_read_ex(path, STALE_NS, &s), RR_OK);
  assert_int_equal(s.live_nics, 0);
  assert_int_equal(s.nic_count, DEVS);
  rr_health_table_snapshot_free(&s);

  /* Writer 0 was killed: its figures never reached the shared page. */
  uint64_t total = 0, worst = 0, stuck = 0, slept = 0, counted = 0;
  for (int i = 1; i < WRITERS; i++) {
    total += atomic_load(&sh->updates[i]);
    if (atomic_load(&sh->max_update_ns[i]) > worst) worst = atomic_load(&sh->max_update_ns[i]);
    if (atomic_load(&sh->max_stuck_ns[i]) > stuck) stuck = atomic_load(&sh->max_stuck_ns[i]);
    slept += atomic_load(&sh->slept[i]);
  }
  for (int b = 0; b < BUCKETS; b++) counted += atomic_load(&sh->hist[b]);
  double pct[3] = {0.5, 0.99, 0.9999};
  uint64_t at[3] = {0, 0, 0};
  for (int q = 0; q < 3; q++) {
    uint64_t seen = 0;
    for (int b = 0; b < BUCKETS; b++) {
      seen += atomic_load(&sh->hist[b]);
      if ((double)seen >= pct[q] * (double)counted) {
        at[q] = 2ull << b; /* upper bound of the bucket */
        break;
      }
    }
  }
  printf("health table concurrency: %d writers x %d rows, %d readers, %.1f s hammer\n"
         "  writer updates: %llu (%.2f M/s); update time p50 < %llu ns, p99 < %llu ns, "
         "p99.99 < %llu ns\n"
         "  longest single update: %.3f ms wall, of which at most %.3f ms running or asleep; "
         "sleeps inside updates: %llu\n"
         "  reader snapshots: %llu, rows checked: %llu, torn rows seen: %llu, rows skipped "
         "as still torn after retries: %llu\n"
         "  without the lock (contrast): %llu of %llu copies torn\n"
         "  SIGKILLed writer: gone after %.1f ms (%.1f ms once reaped); SIGSTOPped writer: "
         "aged out after %.0f ms (threshold %.0f ms), live again after %.1f ms\n",
         WRITERS, DEVS, READERS, (double)HAMMER_NS / 1e9, (unsigned long long)total,
         (double)total / ((double)HAMMER_NS / 1e9) / 1e6, (unsigned long long)at[0],
         (unsigned long long)at[1], (unsigned long long)at[2], (double)worst / 1e6,
         (double)stuck / 1e6, (unsigned long long)slept,
         (unsigned long long)atomic_load(&sh->snapshots),
         (unsigned long long)atomic_load(&sh->rows_checked),
         (unsigned long long)atomic_load(&sh->torn_seen),
         (unsigned long long)atomic_load(&sh->torn_skipped),
         (unsigned long long)atomic_load(&sh->raw_torn),
         (unsigned long long)atomic_load(&sh->raw_checked), (double)gone_after / 1e6,
         (double)gone_reaped / 1e6, (double)aged_after / 1e6, (double)STALE_NS / 1e6,
         (double)live_again / 1e6);
  fflush(stdout);

  assert_int_equal(atomic_load(&sh->readers_ok), READERS);
  assert_true(atomic_load(&sh->snapshots) > 100);
  assert_true(total > 10000);
  assert_int_equal(atomic_load(&sh->torn_seen), 0);
  assert_true(stuck < STUCK_NS);
  assert_true(gone_after <= STALE_NS);
  assert_true(gone_reaped <= STALE_NS);
  assert_true(aged_after != UINT64_MAX && aged_after <= 3 * STALE_NS);
  assert_true(live_again != UINT64_MAX);
  unlink(path);
  munmap(sh, sizeof *sh);
  sh = NULL;
}

/* After a failed assert: no child left hammering, no file left in /dev/shm. */
static int teardown(void **state) {
  (void)state;
  if (sh && sh != MAP_FAILED) atomic_store(&sh->phase, 2);
  for (int i = 0; i < WRITERS; i++)
    if (writers[i] > 0 && !reaped_w[i] && kill(writers[i], SIGKILL) == 0) waitpid(writers[i], NULL, 0);
  for (int i = 0; i < READERS; i++)
    if (readers[i] > 0 && !reaped_r[i] && kill(readers[i], SIGKILL) == 0) waitpid(readers[i], NULL, 0);
  if (path[0]) unlink(path);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test_teardown(test_hammer, teardown)};
  return cmocka_run_group_tests_name("health_table_concurrency", tests, NULL, NULL);
}
