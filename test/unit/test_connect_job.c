/* connect_job.c: a reopened rail's endpoint connects on a thread of its own
 * when its device says connect may block, at once otherwise; the caller
 * polls, or abandons it and the endpoint is destroyed once the connect has
 * returned (never while it runs). A fake transport whose connect waits on a
 * gate stands in for a RoCE queue pair resolving its peer's address.
 * Teardown (rr_connect_job_drain) waits for job threads, within a bound.
 *
 * The job threads are process-wide state, so every case starts with none
 * (setup checks) and leaves none (teardown opens the gate, abandons the jobs
 * the case still owns and drains): a case that fails half-way must not leave
 * a thread stuck on the gate for the next case's drain to wait on. Waits are
 * on conditions, bounded by WAIT_MS, which only a real hang reaches: this
 * runs on loaded 2-core CI machines, where a thread may not run for seconds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "connect_job.h"

/* Bound of every wait on a condition: far past anything a loaded machine
 * takes, short enough that a hang fails within the test's 60 s timeout. */
#define WAIT_MS 15000u

static _Atomic int gate_open;      /* the fake connect returns once this is set */
static _Atomic int connects_running;
static _Atomic int destroyed;
static _Atomic int destroyed_connecting; /* endpoints destroyed while their connect ran */
static _Atomic int threads_exited; /* job threads past their last instruction */
static _Atomic int slow_exit;      /* job threads take 200 ms to exit */
static _Atomic pid_t job_tids[8];  /* the threads the blocking connects ran on */
static _Atomic int njob_tids;
static _Atomic rr_status connect_result;
static _Atomic int seen_blob_ok, seen_fd;

/* A fake endpoint knows whether its own connect runs: other jobs' connects
 * may still be running when one is destroyed, legitimately. */
typedef struct fake_ep {
  rr_rail_ep ep;
  _Atomic int connecting;
} fake_ep_t;

static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;

/* Runs as a job thread exits, after the library's code has returned: slow
 * when asked, so that a drain which only saw threads count themselves
 * through (and did not join them) returns before this counts them exited. */
static void thread_exiting(void *v) {
  (void)v;
  if (atomic_load(&slow_exit)) usleep(200000);
  atomic_fetch_add(&threads_exited, 1);
}

static void exit_key_init(void) { pthread_key_create(&exit_key, thread_exiting); }

static rr_status fake_connect(rr_rail_ep *ep, const rr_rail_connect_args *a) {
  fake_ep_t *fe = rr_container_of(ep, fake_ep_t, ep);
  atomic_store(&fe->connecting, 1);
  atomic_fetch_add(&connects_running, 1);
  /* A connect that may block runs on a job thread: note when it exits. */
  if (ep->dev->attr.caps & RR_RAIL_CAP_CONNECT_MAY_BLOCK) {
    pthread_once(&exit_key_once, exit_key_init);
    pthread_setspecific(exit_key, ep);
    int i = atomic_fetch_add(&njob_tids, 1);
    if (i < 8) atomic_store(&job_tids[i], gettid());
  }
  seen_blob_ok = a->peer_addr_len == 3 && memcmp(a->peer_addr, "abc", 3) == 0;
  seen_fd = a->nfds == 1 ? a->fds[0] : -1;
  while (!atomic_load(&gate_open)) usleep(1000);
  atomic_fetch_sub(&connects_running, 1);
  atomic_store(&fe->connecting, 0);
  return atomic_load(&connect_result);
}

/* Also runs on job threads (abandoned jobs), where a cmocka assertion would
 * jump into the main thread's stack: count, the cases assert. */
static void fake_destroy(rr_rail_ep *ep) {
  fake_ep_t *fe = rr_container_of(ep, fake_ep_t, ep);
  if (atomic_load(&fe->connecting)) atomic_fetch_add(&destroyed_connecting, 1);
  atomic_fetch_add(&destroyed, 1);
  free(fe);
}

static const rr_rail_ops fake_ops = {.name = "fake", .ep_connect = fake_connect, .destroy = fake_destroy};

static rr_rail_dev blocking_dev = {.ops = &fake_ops, .attr = {.caps = RR_RAIL_CAP_CONNECT_MAY_BLOCK}};
static rr_rail_dev quick_dev = {.ops = &fake_ops};

static rr_rail_ep *fake_ep(rr_rail_dev *dev) {
  fake_ep_t *fe = calloc(1, sizeof *fe);
  assert_non_null(fe);
  fe->ep = (rr_rail_ep){.ops = &fake_ops, .dev = dev};
  return &fe->ep;
}

static uint64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* Polls cond until it holds or WAIT_MS pass; the caller asserts it. */
#define WAIT_FOR(cond)                                                      \
  do {                                                                      \
    uint64_t until_ = mono_ms() + WAIT_MS;                                  \
    while (!(cond) && mono_ms() < until_) usleep(1000);                     \
  } while (0)

/* Jobs the running case started and still owns (neither finished nor
 * abandoned): teardown abandons them. */
#define MAX_OWNED 8
static rr_connect_job *owned[MAX_OWNED];
static int nowned;

static void disown(rr_connect_job *job) {
  for (int i = 0; i < nowned; i++)
    if (owned[i] == job) {
      owned[i] = owned[--nowned];
      return;
    }
}

static int reset(void **state) {
  (void)state;
  atomic_store(&gate_open, 0);
  atomic_store(&connects_running, 0);
  atomic_store(&destroyed, 0);
  atomic_store(&destroyed_connecting, 0);
  atomic_store(&threads_exited, 0);
  atomic_store(&slow_exit, 0);
  atomic_store(&njob_tids, 0);
  atomic_store(&connect_result, RR_OK);
  atomic_store(&seen_blob_ok, 0);
  atomic_store(&seen_fd, -2);
  nowned = 0;
  /* Every case starts with no job thread (the previous teardown drained). */
  assert_int_equal(rr_connect_job_drain(0), 0);
  return 0;
}

/* Leaves no job thread behind, whatever the case did or where it failed:
 * the gate opens, so every connect returns, and the drain joins them all. */
static int unstick(void **state) {
  (void)state;
  atomic_store(&gate_open, 1);
  while (nowned > 0) {
    rr_connect_job *job = owned[0];
    disown(job);
    rr_connect_job_abandon(job);
  }
  assert_int_equal(rr_connect_job_drain(WAIT_MS), 0);
  assert_int_equal(atomic_load(&destroyed_connecting), 0);
  return 0;
}

static int a_socket(void) { return socket(AF_INET, SOCK_STREAM, 0); }

static void wait_running(int n) {
  WAIT_FOR(atomic_load(&connects_running) == n);
  assert_int_equal(atomic_load(&connects_running), n);
}

/* A job for a fresh endpoint on dev, given a fresh socket. */
static rr_connect_job *start_job(rr_rail_dev *dev, rr_rail_ep **ep_out) {
  assert_true(nowned < MAX_OWNED);
  rr_rail_ep *ep = fake_ep(dev);
  int fds[1] = {a_socket()};
  rr_connect_job *job = NULL;
  assert_int_equal(rr_connect_job_start(ep, 0, (const uint8_t *)"abc", 3, fds, 1, &job), RR_OK);
  owned[nowned++] = job;
  if (ep_out) *ep_out = ep;
  return job;
}

/* Polls job until its connect is through (the gate must be open). */
static rr_status finish_job(rr_connect_job *job, rr_rail_ep **out) {
  rr_status st;
  WAIT_FOR((st = rr_connect_job_finish(job, out)) != RR_AGAIN);
  if (st != RR_AGAIN) disown(job);
  return st;
}

static void abandon_job(rr_connect_job *job) {
  disown(job);
  rr_connect_job_abandon(job);
}

/* A blocking connect runs elsewhere: start returns while it waits, finish says
 * RR_AGAIN until it is through, then hands the endpoint back. */
static void test_blocking_connect_runs_off_thread(void **state) {
  (void)state;
  rr_rail_ep *ep = fake_ep(&blocking_dev);
  int fds[1] = {a_socket()};
  int fd = fds[0];
  rr_connect_job *job = NULL;
  assert_int_equal(rr_connect_job_start(ep, 0, (const uint8_t *)"abc", 3, fds, 1, &job), RR_OK);
  assert_non_null(job);
  owned[nowned++] = job;
  assert_int_equal(fds[0], -1); /* the job's now */
  wait_running(1);
  rr_rail_ep *out = NULL;
  /* The gate is shut: the connect cannot be through, however slow this is. */
  assert_int_equal(rr_connect_job_finish(job, &out), RR_AGAIN);
  assert_null(out);
  gate_open = 1;
  assert_int_equal(finish_job(job, &out), RR_OK);
  assert_ptr_equal(out, ep);
  assert_true(seen_blob_ok);
  assert_int_equal(seen_fd, fd);
  assert_int_equal(destroyed, 0);
  fake_destroy(out);
}

/* A transport that never blocks connects inside start. */
static void test_quick_connect_in_place(void **state) {
  (void)state;
  gate_open = 1;
  rr_rail_ep *ep;
  rr_connect_job *job = start_job(&quick_dev, &ep);
  rr_rail_ep *out = NULL;
  /* Done before start returned: no polling. */
  assert_int_equal(rr_connect_job_finish(job, &out), RR_OK);
  disown(job);
  assert_ptr_equal(out, ep);
  fake_destroy(out);
}

/* Abandoned while its connect waits: destroyed only after the connect
 * returns, by the job's thread. */
static void test_abandon_while_running(void **state) {
  (void)state;
  rr_connect_job *job = start_job(&blocking_dev, NULL);
  wait_running(1);
  abandon_job(job);
  /* Time for a wrong, asynchronous destroy to show; the gate is shut, so a
   * correct job cannot have destroyed it however long this takes. */
  usleep(20000);
  assert_int_equal(destroyed, 0); /* still connecting */
  gate_open = 1;
  WAIT_FOR(atomic_load(&destroyed) != 0);
  assert_int_equal(destroyed, 1);
  assert_int_equal(destroyed_connecting, 0);
}

/* A failed connect: finish reports it and the endpoint is gone. */
static void test_failed_connect(void **state) {
  (void)state;
  connect_result = RR_ERR_RAIL;
  rr_connect_job *job = start_job(&blocking_dev, NULL);
  gate_open = 1;
  rr_rail_ep *out = NULL;
  assert_int_equal(finish_job(job, &out), RR_ERR_RAIL);
  assert_null(out);
  assert_int_equal(destroyed, 1);
}

static void *open_gate_later(void *arg) {
  (void)arg;
  usleep(100000);
  atomic_store(&gate_open, 1);
  return NULL;
}

/* Teardown waits for a job thread still inside the transport: when drain
 * returns, the abandoned job's connect has returned and its endpoint is
 * destroyed (a teardown that did not wait would find it still connecting).
 * The bound is one only a hang reaches: the drain must return because the
 * thread went through, not because time ran out. */
static void test_drain_waits_for_running_jobs(void **state) {
  (void)state;
  rr_connect_job *job = start_job(&blocking_dev, NULL);
  wait_running(1);
  abandon_job(job);
  pthread_t opener;
  assert_int_equal(pthread_create(&opener, NULL, open_gate_later, NULL), 0);
  int left = rr_connect_job_drain(WAIT_MS);
  pthread_join(opener, NULL);
  assert_int_equal(left, 0);
  assert_int_equal(atomic_load(&connects_running), 0);
  assert_int_equal(atomic_load(&destroyed), 1);
}

/* A connect that never returns does not hang teardown: drain gives up after
 * its bound and says one is still running. The gate stays shut throughout,
 * so a drain that waited for the thread would never return: that it returns
 * at all, with the connect still running, is the proof; the times only check
 * it waited its bound (load can only lengthen that) and not absurdly long. */
static void test_drain_is_bounded(void **state) {
  (void)state;
  rr_connect_job *job = start_job(&blocking_dev, NULL);
  wait_running(1);
  uint64_t t0 = mono_ms();
  assert_int_equal(rr_connect_job_drain(50), 1);
  uint64_t took = mono_ms() - t0;
  assert_true(took >= 50);
  assert_true(took < WAIT_MS);
  assert_int_equal(atomic_load(&connects_running), 1);
  /* Let it through, then nothing is left (teardown would also see to it,
   * should an assertion above have failed). */
  gate_open = 1;
  assert_int_equal(rr_connect_job_drain(WAIT_MS), 0);
  rr_rail_ep *out = NULL;
  assert_int_equal(finish_job(job, &out), RR_OK);
  fake_destroy(out);
}

/* How many of the first n job threads the kernel still lists in this
 * process. By their ids: a count of all threads would also see the previous
 * case's, which may stay listed a little after they were joined. */
static int job_threads_listed(int n) {
  int listed = 0;
  for (int i = 0; i < n; i++) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d", (int)atomic_load(&job_tids[i]));
    listed += access(path, F_OK) == 0;
  }
  return listed;
}

/* When drain returns 0 every job thread has been joined, not only counted
 * through: none is left returning through this library's code, which NCCL
 * may unload next. Each job thread runs a slow exit hook (a thread-specific
 * destructor, after the library's code has returned): a joined thread has
 * run it to its end, while a drain that returned on the threads counting
 * themselves through (a detached version) would return 200 ms early. The
 * kernel's thread list is no oracle for that: an exiting thread stays listed
 * a while after a join has returned, longer on a loaded machine. */
static void test_drain_joins_threads(void **state) {
  (void)state;
  atomic_store(&slow_exit, 1);
  rr_connect_job *jobs[3];
  for (int i = 0; i < 3; i++) jobs[i] = start_job(&blocking_dev, NULL);
  wait_running(3);
  /* Three threads of their own, all held by the gate. */
  assert_int_equal(atomic_load(&njob_tids), 3);
  assert_true(job_tids[0] != job_tids[1] && job_tids[1] != job_tids[2] && job_tids[0] != job_tids[2]);
  assert_int_equal(job_threads_listed(3), 3);
  gate_open = 1;
  for (int i = 0; i < 3; i++) {
    rr_rail_ep *out = NULL;
    assert_int_equal(finish_job(jobs[i], &out), RR_OK);
    fake_destroy(out);
  }
  assert_int_equal(rr_connect_job_drain(WAIT_MS), 0);
  assert_int_equal(atomic_load(&threads_exited), 3);
  /* And none lingers: gone from the kernel's list too, once it is done. */
  WAIT_FOR(job_threads_listed(3) == 0);
  assert_int_equal(job_threads_listed(3), 0);
}

/* With no job thread, drain returns at once, not after its bound. */
static void test_drain_idle(void **state) {
  (void)state;
  uint64_t t0 = mono_ms();
  assert_int_equal(rr_connect_job_drain(WAIT_MS), 0);
  assert_true(mono_ms() - t0 < WAIT_MS / 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_blocking_connect_runs_off_thread, reset, unstick),
      cmocka_unit_test_setup_teardown(test_quick_connect_in_place, reset, unstick),
      cmocka_unit_test_setup_teardown(test_abandon_while_running, reset, unstick),
      cmocka_unit_test_setup_teardown(test_failed_connect, reset, unstick),
      cmocka_unit_test_setup_teardown(test_drain_waits_for_running_jobs, reset, unstick),
      cmocka_unit_test_setup_teardown(test_drain_is_bounded, reset, unstick),
      cmocka_unit_test_setup_teardown(test_drain_joins_threads, reset, unstick),
      cmocka_unit_test_setup_teardown(test_drain_idle, reset, unstick),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
