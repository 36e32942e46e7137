/* The receiver's side of "no completion can be overdue yet" (the sender's
 * is the verbs rail's last_alive_ns: the bytes ahead of its next completion
 * at the QP's measured rate).
 *
 * A receiver hears a rail when a write of the peer's lands on it. A large
 * message goes as one group write with one arrival (docs/protocol.md), so a
 * rail carrying 4 MiB at 30 MB/s (the Soft-RoCE lab) is silent for 150 ms
 * while it works perfectly, and the silence judge, asking the rail for fresh
 * word once its life was δ/8 old, spent a signalled request on each such
 * message (a doorbell and a completion on verbs: rail_verbs.c). What the
 * receiver knows that the rail does not: the bytes it invited (clear-to-sends
 * out, receives not landed) and how fast each rail has been bringing them.
 * While those bytes cannot have arrived yet at that rate, the rail is not
 * doubted: their due time stands in for life when doubt is judged, as the
 * verbs sender's next completion does. The judge (engine_rails.c) asks the
 * rail δ/8 after it and probes δ/4 after it.
 *
 * The writes landing are life too, for doubt and for the verdict: a rail
 * carrying a message the receiver invited is alive as of its last write,
 * as its transport would say when asked (verbs: the last arrival, unless a
 * signalled request of ours waits; TCP: the last bytes read, unless ours
 * wait unacknowledged). The engine no longer asks in every gap between two
 * large messages for the exception, ours waiting: a path whose way out
 * fails while the peer's writes still come in. That cannot last: the
 * transports carry their own acknowledgements that way (RC ACKs, TCP's),
 * so the peer's writes stop within its send queue or window, and the
 * sender, waiting for those acknowledgements, judges the path from its
 * side; our clear-to-sends stuck on it stop new invitations too.
 *
 * The bounds (docs/failover.md, "Detecting a failure"):
 *   - a rail silent both ways goes DOWN δ after its last life, as before:
 *     the due time delays only doubt (the ask, the probe), never the
 *     verdict;
 *   - doubt waits at most 3δ/8 past the last life (the due time's cap), so
 *     the rail is asked at most δ/2 and probed at most 5δ/8 after it, with
 *     3δ/8 left for the probe's answer;
 *   - a rail whose way out fails while writes still land is found δ after
 *     the last one landed: later than before by as long as the peer's
 *     transport keeps sending without our acknowledgements (its send queue
 *     or window) or the invitations last;
 *   - only a rail that has carried the peer's writes since the connection
 *     last had work is credited: a rail carrying nothing (a backup in chain
 *     mode) is doubted as before.
 * So a path at the lab's speed is not asked about while messages keep
 * landing within δ/2 of each other; a NIC at 400 Gb/s moves 4 MiB in 80 µs
 * and never got this far.
 *
 * The rate is measured over windows of at least δ/4 of arrivals, bytes
 * landed over the time they took, not from one gap to the next: the engine
 * sees a write when it polls the completion, and two writes polled in one
 * pass (a receiving process descheduled for a moment) are nanoseconds apart
 * whatever the path did. A window that runs through a moment with nothing
 * invited starts again (that gap is the sender's, not the path's). Errors
 * cost little either way: a rate that is low (a slow sender, bytes invited
 * that the message does not fill, writes of the invitation split over
 * several rails) only moves the due time up to its cap; one that is high
 * brings doubt back towards where it was without the due time. Before a
 * rail has a sample, FLOOR_BYTES per quarter of δ stands in, the verbs
 * sender's floor. */
#include "engine_internal.h"

#define FLOOR_BYTES (256u << 10)
/* Windows of fewer bytes measure latency, not the path's rate. */
#define SAMPLE_MIN (64u << 10)

/* Bytes this end invited and has not seen land: receives whose
 * clear-to-send went, less the chunks in place at the front of each. An
 * upper bound (the message may be shorter than the receive posted).
 * Counting stops once it reaches `enough`: each arrival only asks whether
 * any are left, and it is on the data path. */
static uint64_t invited_bytes(const rr_engine *e, uint64_t enough) {
  uint64_t b = 0;
  for (int i = 0; i < RR_NET_MAX_REQUESTS; i++) {
    const rr_recv_req *r = &engine_rcv(e)->rreq[i];
    if (!r->in_use || r->complete || r->landed || r->cts_held) continue;
    for (int k = 0; k < r->n; k++) {
      const rr_recv_sub *s = &r->sub[k];
      size_t have = (size_t)s->prefix * e->cfg.chunk_size;
      if ((s->expected && s->prefix >= s->expected) || have >= s->posted_size) continue;
      b += s->posted_size - have;
      if (b >= enough) return b;
    }
  }
  return b;
}

void engine_inbound_on_arrival(rr_engine *e, int r, uint64_t bytes, uint64_t now) {
  engine_rail *rl = &e->rails[r];
  engine_inbound *in = &rl->in;
  if (!in->last_arrival_ns || !in->out_after_last || now < in->win_start_ns) {
    in->win_start_ns = now; /* this write's bytes came before the window */
    in->win_bytes = 0;
  } else {
    in->win_bytes += bytes;
    uint64_t span = now - in->win_start_ns;
    if (span >= e->cfg.progress_timeout_ns / 4 && span > 0 && in->win_bytes >= SAMPLE_MIN) {
      double sample = (double)in->win_bytes / (double)span;
      in->rate = in->rate > 0 ? (3 * in->rate + sample) / 4 : sample;
      in->win_start_ns = now;
      in->win_bytes = 0;
    }
  }
  in->last_arrival_ns = now;
  in->out_after_last = invited_bytes(e, 1) > 0;
  rl->heard = 1; /* the peer's write: the peer is there */
}

uint64_t engine_inbound_due(const rr_engine *e, int r, uint64_t life) {
  const engine_rail *rl = &e->rails[r];
  const engine_inbound *in = &rl->in;
  if (!engine_is_receiver(e) || !in->last_arrival_ns || in->last_arrival_ns < rl->watch_since_ns) return 0;
  uint64_t bytes = invited_bytes(e, UINT64_MAX);
  if (!bytes) return 0;
  uint64_t delta = e->cfg.progress_timeout_ns;
  double floor = (double)FLOOR_BYTES * 4.0 / (double)(delta ? delta : 1);
  double rate = in->rate > floor ? in->rate : floor;
  double need = (double)bytes / rate;
  uint64_t from = life > in->last_arrival_ns ? life : in->last_arrival_ns;
  uint64_t hold = need < (double)(delta / 8 * 3) ? (uint64_t)need : delta / 8 * 3;
  return from + hold;
}
