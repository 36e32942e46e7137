/* What the engine tests on TCP rails share (test_gray_*.c): a TCP rail
 * endpoint over one end of a fresh AF_UNIX socket pair, its events going to
 * an engine. A socket pair acknowledges nothing and nobody reads its far
 * end unless a test does, so what a test needs of the transport beyond that
 * (unacknowledged bytes, path statistics) it makes up in the endpoint's ops. */
#ifndef RERAIL_TEST_TCP_PAIR_FIXTURE_H
#define RERAIL_TEST_TCP_PAIR_FIXTURE_H
#include "engine.h"
#include "rail.h"

#include <stdint.h>

/* An endpoint of dev whose events go to engine e, connected over a new
 * socket pair; *far gets the other end (the caller closes it). snd_buf > 0
 * asks the near end's send buffer that small (a probe then stays unflushed
 * until the far end is read, as a verbs probe stays uncompleted until the
 * peer acknowledges it). NULL, *far = -1, on any failure. */
rr_rail_ep *tcp_pair_ep(rr_rail_dev *dev, rr_engine *e, int snd_buf, int *far);

/* What the path statistics of tcp_pair_ep_stats' endpoints say: the bytes
 * unacknowledged, or, while !known, that the transport cannot say (as a
 * verbs rail). Set by the test; tcp_pair_stats_reset() clears it. */
typedef struct tcp_pair_fake_stats {
  int known;
  uint32_t unacked;
} tcp_pair_fake_stats;
extern tcp_pair_fake_stats tcp_pair_stats;
void tcp_pair_stats_reset(void);

/* tcp_pair_ep's endpoint, its path statistics made up from tcp_pair_stats
 * (a socket pair has no TCP state to read them from). */
rr_rail_ep *tcp_pair_ep_stats(rr_rail_dev *dev, rr_engine *e, int snd_buf, int *far);

#endif
