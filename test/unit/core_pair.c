/* The core tests' shared pair and settings (core_pair.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "core_pair.h"
#include "rr_params.h"

void finish_pair_on(pair *p, int dev, const void *handle) {
  for (int i = 0; i < 200000 && (!p->send || !p->recv); i++) {
    if (!p->send) assert_int_equal(rr_net_connect(p->ctx, dev, handle, &p->send), RR_OK);
    if (!p->recv) assert_int_equal(rr_net_accept(p->listen, &p->recv), RR_OK);
  }
  assert_non_null(p->send);
  assert_non_null(p->recv);
}

void finish_pair(pair *p, const char *handle) { finish_pair_on(p, 0, handle); }

/* A pair of one context whose communicator gives trafficClass cls (-1: none). */
void connect_pair_class(pair *p, int cls) {
  rr_init_args args = {.traffic_class = cls};
  assert_int_equal(rr_net_init(&args, &p->ctx), RR_OK);
  int ndev = 0;
  assert_int_equal(rr_net_devices(&ndev), RR_OK);
  assert_true(ndev >= 1);
  char handle[RR_NET_HANDLE_SIZE];
  assert_int_equal(rr_net_listen(p->ctx, 0, handle, &p->listen), RR_OK);
  p->send = NULL;
  p->recv = NULL;
  finish_pair(p, handle);
}

void connect_pair(pair *p) { connect_pair_class(p, -1); }

void close_pair(pair *p) {
  assert_int_equal(rr_net_close_send(p->send), RR_OK);
  assert_int_equal(rr_net_close_recv(p->recv), RR_OK);
  assert_int_equal(rr_net_close_listen(p->listen), RR_OK);
  assert_int_equal(rr_net_finalize(p->ctx), RR_OK);
}

void send_rails_in(pair *p) {
  rr_status st;
  while ((st = rr_connect_confirm(p->send)) == RR_AGAIN) usleep(1000);
  assert_int_equal(st, RR_OK);
}

int open_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 4096; fd++) n += fcntl(fd, F_GETFD) != -1;
  return n;
}

void core_tests_setup(void) {
  const char *ifname = getenv("RR_TEST_IFNAME");
  setenv("RERAIL_SOCKET_IFNAME", ifname ? ifname : "lo", 1);
  if (getenv("RR_TEST_FILTER")) cmocka_set_test_filter(getenv("RR_TEST_FILTER"));
  setenv("RERAIL_CHUNK_SIZE", "128K", 1); /* many chunks per message */
  setenv("RERAIL_TCP_STREAMS", "2", 1);
  rr_params_reload();
}
