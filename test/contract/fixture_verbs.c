/* The verbs rail under the contract, on the fake libibverbs
 * (test/unit/fake_ibverbs.c, found first through LD_LIBRARY_PATH): two
 * InfiniBand ports that move data inside this process as their NICs would.
 * Each side's endpoint is on its own port; the endpoints exchange address
 * blobs as the core does, and each keeps one end of a socket pair as the
 * setup socket verbs watches to learn that the peer is gone. */
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rail_contract.h"
#include "rail_verbs.h"

static int nfound = -1;

static rr_status verbs_open(rc_env *env) {
  if (nfound < 0) {
    setenv("RR_FAKE_IBV_PORTS", "mlx5_0:ib:lid=0x11;mlx5_1:ib:lid=0x42", 1);
    unsetenv("RERAIL_TRANSPORT");
    unsetenv("RERAIL_IB_HCA");
    unsetenv("NCCL_IB_HCA");
    rr_rail_found found[4];
    rr_rail_probe in = {0};
    nfound = rr_verbs_transport.probe(&in, found, 4);
  }
  if (nfound < 2) return RR_ERR_UNSUPPORTED;
  for (int i = 0; i < 2; i++) {
    rc_side *s = &env->side[i];
    rr_status st = rr_verbs_transport.dev_open(i, i, &s->dev);
    if (st != RR_OK) return st;
    if ((st = s->dev->ops->ep_open(s->dev, &rc_events, s, &s->ep)) != RR_OK) return st;
  }
  uint8_t blob[2][RR_RAIL_ADDR_MAX];
  uint32_t len[2];
  for (int i = 0; i < 2; i++) {
    len[i] = sizeof blob[i];
    rr_status st = env->side[i].ep->ops->ep_addr(env->side[i].ep, blob[i], &len[i]);
    if (st != RR_OK) return st;
  }
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) != 0) return RR_ERR_SYSTEM;
  for (int i = 0; i < 2; i++) {
    int fds[1] = {sp[i]};
    rr_rail_connect_args args = {.peer_addr = blob[1 - i], .peer_addr_len = len[1 - i], .fds = fds, .nfds = 1};
    rr_status st = env->side[i].ep->ops->ep_connect(env->side[i].ep, &args);
    if (fds[0] >= 0) close(fds[0]); /* not taken: the core closes it */
    if (st != RR_OK) return st;
  }
  return RR_OK;
}

static void verbs_close(rc_env *env) {
  for (int i = 0; i < 2; i++)
    if (env->side[i].dev) env->side[i].dev->ops->dev_close(env->side[i].dev);
}

const rc_fixture rc_fixture_under_test = {.name = "rail_contract_verbs_fake", .open = verbs_open, .close = verbs_close};
