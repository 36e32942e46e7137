/* What the engine tests on TCP rails share (test_gray_*.c): a TCP rail
 * endpoint over one end of a fresh AF_UNIX socket pair, its events going to
 * an engine. A socket pair acknowledges nothing and nobody reads its far
 * end unless a test does, so what a test needs of the transport beyond that
 * (unacknowledged bytes, path statistics) it makes up in the endpoint's ops. */
#ifndef RERAIL_TEST_TCP_PAIR_FIXTURE_H
#define RERAIL_TEST_TCP_PAIR_FIXTURE_H
#include "engine.h"
#include "rail.h"

/* An endpoint of dev whose events go to engine e, connected over a new
 * socket pair; *far gets the other end (the caller closes it). snd_buf > 0
 * asks the near end's send buffer that small (a probe then stays unflushed
 * until the far end is read, as a verbs probe stays uncompleted until the
 * peer acknowledges it). NULL, *far = -1, on any failure. */
rr_rail_ep *tcp_pair_ep(rr_rail_dev *dev, rr_engine *e, int snd_buf, int *far);

#endif
