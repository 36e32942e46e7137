/* The background's idle cadence (rr_engine_background): an engine that
 * waits for nothing is driven every RR_ENGINE_IDLE_BACKGROUND_NS, any other
 * every RR_ENGINE_BACKGROUND_NS, and a link change (wake_idle) drives an
 * idle one at once. A receiving engine on one real TCP rail over a socket
 * pair; times are passed in, so nothing depends on the machine's load.
 * Whether a call drove the engine is read from last_progress_ns, which
 * every drive restamps with the clock: the test sets it to a value the
 * clock never gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine_internal.h" /* the test reads the engine's idle fields */
#include "rail_tcp.h"

#define MS 1000000ull
#define BUF_BYTES 16384

typedef struct recv_end {
  rr_engine e;
  rr_rail_dev *dev;
  rr_mr mr;
  void *buf;
  int peer_fd;
} recv_end;

static recv_end r; /* an engine is large for a stack */

static int setup(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  rr_engine_config cfg = {.role = RR_ENGINE_RECV, .chunk_size = 4096, .progress_timeout_ns = 1000000000ull,
                          .failback_hold_ns = 500000000ull};
  assert_int_equal(rr_engine_init(&r.e, &cfg), RR_OK);
  assert_int_equal(rr_tcp_dev_open(0, &r.dev), RR_OK);
  rr_rail_ep *ep = NULL;
  assert_int_equal(r.dev->ops->ep_open(r.dev, &rr_engine_rail_events, &r.e, &ep), RR_OK);
  int fds[1] = {sv[0]};
  rr_rail_connect_args args = {.fds = fds, .nfds = 1};
  assert_int_equal(ep->ops->ep_connect(ep, &args), RR_OK);
  assert_int_equal(rr_engine_add_rail(&r.e, ep, 1, "idle0", "peer"), RR_OK);
  r.peer_fd = sv[1];
  r.buf = calloc(1, BUF_BYTES);
  assert_non_null(r.buf);
  r.mr = (rr_mr){.base = r.buf, .size = BUF_BYTES, .type = RR_PTR_HOST};
  assert_int_equal(r.dev->ops->reg_mr(r.dev, r.buf, BUF_BYTES, RR_MEM_HOST, -1, 0, &r.mr.reg[0]), RR_OK);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  rr_engine_fini(&r.e);
  r.dev->ops->dereg_mr(r.mr.reg[0]);
  r.dev->ops->dev_close(r.dev);
  close(r.peer_fd);
  free(r.buf);
  return 0;
}

/* The monitor's clock in these tests: far from any reading the engine
 * takes itself, so a drive always changes last_progress_ns. */
static const uint64_t NOW = 1ull << 62;

/* Whether rr_engine_background drove the engine `since` ns after its last
 * drive, the monitor's clock reading `now`. */
static int drives(uint64_t now, uint64_t since, int wake_idle) {
  atomic_store(&r.e.last_progress_ns, now - since);
  rr_engine_background(&r.e, now, wake_idle);
  return atomic_load(&r.e.last_progress_ns) != now - since;
}

static void test_idle_engine_slower_cadence(void **state) {
  (void)state;
  /* Fresh, nothing posted, one ACTIVE rail: idle, but no drive has said so
   * yet: the first one comes at the busy cadence. */
  assert_true(rr_engine_idle_background(&r.e, NOW));
  assert_int_equal(drives(NOW, 5 * MS, 0), 0);  /* under the busy cadence: never */
  assert_int_equal(drives(NOW, 20 * MS, 0), 1);
  assert_int_equal(drives(NOW, 20 * MS, 0), 0); /* the busy cadence, but idle */
  assert_int_equal(drives(NOW, RR_ENGINE_IDLE_BACKGROUND_NS, 0), 1);
  /* A link changed: driven at the busy cadence even when idle. */
  assert_int_equal(drives(NOW, 20 * MS, 1), 1);
  assert_int_equal(drives(NOW, 5 * MS, 1), 0);
}

static void test_posted_receive_is_not_idle(void **state) {
  (void)state;
  void *bufs[1] = {r.buf}, *req = NULL;
  size_t sizes[1] = {BUF_BYTES};
  int tags[1] = {1};
  rr_mr *mrs[1] = {&r.mr};
  assert_int_equal(drives(NOW, 20 * MS, 0), 1); /* now it is known idle */
  assert_int_equal(drives(NOW, 20 * MS, 0), 0);
  assert_int_equal(rr_engine_irecv(&r.e, 1, bufs, sizes, tags, mrs, NULL, &req), RR_OK);
  assert_non_null(req);
  assert_false(rr_engine_idle_background(&r.e, NOW));
  assert_int_equal(drives(NOW, 20 * MS, 0), 1);
  assert_int_equal(drives(NOW, 20 * MS, 0), 1); /* and stays at the busy cadence */
}

/* A rail in doubt is not idle: once a drive has seen it, the busy cadence. */
static void test_rail_in_doubt_is_not_idle(void **state) {
  (void)state;
  engine_rail_set_state(&r.e, 0, RR_RAIL_DOWN, "test: down");
  assert_false(rr_engine_idle_background(&r.e, NOW));
  assert_int_equal(drives(NOW, 20 * MS, 0), 1);
  assert_int_equal(drives(NOW, 20 * MS, 0), 1);
}

/* Work within the last second keeps the busy cadence; after it, idle. */
static void test_recent_work_is_not_idle(void **state) {
  (void)state;
  r.e.last_work_ns = NOW - RR_ENGINE_IDLE_AFTER_NS / 2;
  assert_false(rr_engine_idle_background(&r.e, NOW));
  r.e.last_work_ns = NOW - RR_ENGINE_IDLE_AFTER_NS;
  assert_true(rr_engine_idle_background(&r.e, NOW));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_idle_engine_slower_cadence, setup, teardown),
      cmocka_unit_test_setup_teardown(test_posted_receive_is_not_idle, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rail_in_doubt_is_not_idle, setup, teardown),
      cmocka_unit_test_setup_teardown(test_recent_work_is_not_idle, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
