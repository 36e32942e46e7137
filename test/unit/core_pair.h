/* What the core's end-to-end tests share (test_core_loopback.c: traffic;
 * test_core_setup.c: connection setup; test_ib_oob.c): a connected pair of comms inside one
 * process, made and closed as NCCL's proxy does, and the settings both run
 * under. */
#ifndef RERAIL_TEST_CORE_PAIR_H
#define RERAIL_TEST_CORE_PAIR_H
#include "core_internal.h"
#include "net_core.h"

typedef struct pair {
  rr_net_ctx *ctx;
  rr_listen_comm *listen;
  rr_send_comm *send;
  rr_recv_comm *recv;
} pair;

/* Call connect() (on device dev; finish_pair: 0) and accept() in turn, as
 * NCCL's proxy does, until both gave a comm (those already there are kept). */
void finish_pair_on(pair *p, int dev, const void *handle);
void finish_pair(pair *p, const char *handle);
/* A pair of one context whose communicator gives trafficClass cls (-1: none). */
void connect_pair_class(pair *p, int cls);
void connect_pair(pair *p);
void close_pair(pair *p);
/* The send end's rails join its engine with the listener's ACCEPTs, read
 * behind connect() (conn_confirm.c): wait for them. */
void send_rails_in(pair *p);
/* The file descriptors this process has open. */
int open_fds(void);
/* Before the tests: the pooled NIC (RR_TEST_IFNAME, else lo), the test
 * filter (RR_TEST_FILTER), and chunks and streams small and many enough
 * that every message takes several. */
void core_tests_setup(void);

#endif
