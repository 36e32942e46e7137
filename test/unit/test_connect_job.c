/* connect_job.c: a reopened rail's endpoint connects on a thread of its own
 * when its device says connect may block, at once otherwise; the caller
 * polls, or abandons it and the endpoint is destroyed once the connect has
 * returned (never while it runs). A fake transport whose connect waits on a
 * gate stands in for a RoCE queue pair resolving its peer's address.
 * Teardown (rr_connect_job_drain) waits for job threads, within a bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "connect_job.h"

static _Atomic int gate_open;      /* the fake connect returns once this is set */
static _Atomic int connects_running;
static _Atomic int destroyed;
static _Atomic rr_status connect_result;
static _Atomic int seen_blob_ok, seen_fd;

static rr_status fake_connect(rr_rail_ep *ep, const rr_rail_connect_args *a) {
  (void)ep;
  atomic_fetch_add(&connects_running, 1);
  seen_blob_ok = a->peer_addr_len == 3 && memcmp(a->peer_addr, "abc", 3) == 0;
  seen_fd = a->nfds == 1 ? a->fds[0] : -1;
  while (!atomic_load(&gate_open)) usleep(1000);
  atomic_fetch_sub(&connects_running, 1);
  return atomic_load(&connect_result);
}

static void fake_destroy(rr_rail_ep *ep) {
  /* Never while its connect runs. */
  assert_int_equal(atomic_load(&connects_running), 0);
  atomic_fetch_add(&destroyed, 1);
  free(ep);
}

static const rr_rail_ops fake_ops = {.name = "fake", .ep_connect = fake_connect, .destroy = fake_destroy};

static rr_rail_dev blocking_dev = {.ops = &fake_ops, .attr = {.caps = RR_RAIL_CAP_CONNECT_MAY_BLOCK}};
static rr_rail_dev quick_dev = {.ops = &fake_ops};

static rr_rail_ep *fake_ep(rr_rail_dev *dev) {
  rr_rail_ep *ep = calloc(1, sizeof *ep);
  *ep = (rr_rail_ep){.ops = &fake_ops, .dev = dev};
  return ep;
}

static int reset(void **state) {
  (void)state;
  atomic_store(&gate_open, 0);
  atomic_store(&connects_running, 0);
  atomic_store(&destroyed, 0);
  atomic_store(&connect_result, RR_OK);
  atomic_store(&seen_blob_ok, 0);
  atomic_store(&seen_fd, -2);
  return 0;
}

static int a_socket(void) { return socket(AF_INET, SOCK_STREAM, 0); }

static void wait_running(int n) {
  for (int i = 0; i < 5000 && atomic_load(&connects_running) != n; i++) usleep(1000);
  assert_int_equal(atomic_load(&connects_running), n);
}

/* A job for a fresh endpoint on dev, given a fresh socket. */
static rr_connect_job *start_job(rr_rail_dev *dev, rr_rail_ep **ep_out) {
  rr_rail_ep *ep = fake_ep(dev);
  int fds[1] = {a_socket()};
  rr_connect_job *job = NULL;
  assert_int_equal(rr_connect_job_start(ep, 0, (const uint8_t *)"abc", 3, fds, 1, &job), RR_OK);
  if (ep_out) *ep_out = ep;
  return job;
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
  assert_int_equal(fds[0], -1); /* the job's now */
  wait_running(1);
  rr_rail_ep *out = NULL;
  assert_int_equal(rr_connect_job_finish(job, &out), RR_AGAIN);
  assert_null(out);
  gate_open = 1;
  rr_status st;
  for (int i = 0; i < 5000 && (st = rr_connect_job_finish(job, &out)) == RR_AGAIN; i++) usleep(1000);
  assert_int_equal(st, RR_OK);
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
  assert_int_equal(rr_connect_job_finish(job, &out), RR_OK);
  assert_ptr_equal(out, ep);
  fake_destroy(out);
}

/* Abandoned while its connect waits: destroyed only after the connect
 * returns, by the job's thread. */
static void test_abandon_while_running(void **state) {
  (void)state;
  rr_connect_job *job = start_job(&blocking_dev, NULL);
  wait_running(1);
  rr_connect_job_abandon(job);
  usleep(20000);
  assert_int_equal(destroyed, 0); /* still connecting */
  gate_open = 1;
  for (int i = 0; i < 5000 && atomic_load(&destroyed) == 0; i++) usleep(1000);
  assert_int_equal(destroyed, 1);
}

/* A failed connect: finish reports it and the endpoint is gone. */
static void test_failed_connect(void **state) {
  (void)state;
  connect_result = RR_ERR_RAIL;
  rr_connect_job *job = start_job(&blocking_dev, NULL);
  gate_open = 1;
  rr_rail_ep *out = NULL;
  rr_status st;
  for (int i = 0; i < 5000 && (st = rr_connect_job_finish(job, &out)) == RR_AGAIN; i++) usleep(1000);
  assert_int_equal(st, RR_ERR_RAIL);
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
 * destroyed (a teardown that did not wait would find it still connecting). */
static void test_drain_waits_for_running_jobs(void **state) {
  (void)state;
  rr_connect_job *job = start_job(&blocking_dev, NULL);
  wait_running(1);
  rr_connect_job_abandon(job);
  pthread_t opener;
  assert_int_equal(pthread_create(&opener, NULL, open_gate_later, NULL), 0);
  assert_int_equal(rr_connect_job_drain(10000), 0);
  assert_int_equal(atomic_load(&connects_running), 0);
  assert_int_equal(atomic_load(&destroyed), 1);
  pthread_join(opener, NULL);
}

static uint64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* A connect that never returns does not hang teardown: drain gives up after
 * its bound and says one is still running. */
static void test_drain_is_bounded(void **state) {
  (void)state;
  rr_connect_job *job = start_job(&blocking_dev, NULL);
  wait_running(1);
  uint64_t t0 = mono_ms();
  assert_int_equal(rr_connect_job_drain(50), 1);
  uint64_t took = mono_ms() - t0;
  assert_true(took >= 50 && took < 5000);
  assert_int_equal(atomic_load(&connects_running), 1);
  /* Let it through, then nothing is left. */
  gate_open = 1;
  assert_int_equal(rr_connect_job_drain(10000), 0);
  rr_rail_ep *out = NULL;
  assert_int_equal(rr_connect_job_finish(job, &out), RR_OK);
  fake_destroy(out);
}

/* Threads of this process, as the kernel lists them. */
static int task_count(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* When drain returns 0 every job thread has been joined, not only counted
 * through: none is left returning through this library's code, which NCCL
 * may unload next. (A detached thread that counted itself out would often
 * still be listed here.) */
static void test_drain_joins_threads(void **state) {
  (void)state;
  assert_int_equal(rr_connect_job_drain(10000), 0); /* earlier tests' threads */
  int before = task_count();
  rr_connect_job *jobs[3];
  for (int i = 0; i < 3; i++) jobs[i] = start_job(&blocking_dev, NULL);
  wait_running(3);
  assert_int_equal(task_count(), before + 3);
  gate_open = 1;
  for (int i = 0; i < 3; i++) {
    rr_rail_ep *out = NULL;
    rr_status st;
    for (int k = 0; k < 5000 && (st = rr_connect_job_finish(jobs[i], &out)) == RR_AGAIN; k++) usleep(1000);
    assert_int_equal(st, RR_OK);
    fake_destroy(out);
  }
  assert_int_equal(rr_connect_job_drain(10000), 0);
  assert_int_equal(task_count(), before);
}

/* With no job thread, drain returns at once. */
static void test_drain_idle(void **state) {
  (void)state;
  uint64_t t0 = mono_ms();
  assert_int_equal(rr_connect_job_drain(10000), 0);
  assert_true(mono_ms() - t0 < 1000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_blocking_connect_runs_off_thread, reset),
      cmocka_unit_test_setup(test_quick_connect_in_place, reset),
      cmocka_unit_test_setup(test_abandon_while_running, reset),
      cmocka_unit_test_setup(test_failed_connect, reset),
      cmocka_unit_test_setup(test_drain_waits_for_running_jobs, reset),
      cmocka_unit_test_setup(test_drain_is_bounded, reset),
      cmocka_unit_test_setup(test_drain_joins_threads, reset),
      cmocka_unit_test_setup(test_drain_idle, reset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
