/* A demoted link's probes and its restore (engine_gray.c demotes; this
 * brings traffic back): filler writes on the demoted rail, one per link at a
 * time, timed until the rail has handed them on, judged against what the
 * link sustains, and a restore once healthy probes cover the hold
 * (gray_restore.h). Called under gray_lock from engine_gray_tick. */
#include "engine_internal.h"
#include "gray_link.h"
#include "gray_restore.h"
#include "rr_counters.h"
#include "rr_log.h"

#include <string.h>

#define RR_GRAY_PROBE_BYTES (8u << 20)     /* large enough that a tick's granularity and a busy
                                             * core's stalls do not dominate its timing */
#define RR_GRAY_PROBE_WRITE (1u << 20)
#define RR_GRAY_PROBE_MIN_NS (20 * RR_GRAY_MS) /* a shrunk probe never lasts less at the link's reference */
#define RR_GRAY_PROBE_GAP_NS (200 * RR_GRAY_MS)
#define RR_GRAY_PROBE_TIMEOUT_NS (1000 * RR_GRAY_MS)
#define RR_GRAY_LAT_PROBE_MIN (4u << 10) /* a latency probe's least bytes: one page */
/* Bytes unacknowledged (or unsent) this long on a rail its probes found
 * healthy wait for a retransmission timer: TCP's shortest timeout is 200
 * ms. A healthy path acknowledges within a round trip, or, for a probe's
 * last segment alone, within the receiver's delayed ACK (40 ms on Linux):
 * at 20 ms such a rail could be reopened for nothing at its restore. */
#define RR_GRAY_STALE_NS (100 * RR_GRAY_MS)
/* How long a demoted TCP rail waits for its reopen (stale_reopen) before it
 * is probed and restored on the sockets it has again, and how long it then
 * rests on them before another reopen may be asked. Reopens in the lab's
 * lossy case took 10-430 ms (bench/RESULTS.md 16d, lossy5). One over the
 * lossy path itself can fail attempt after attempt: a stream's SYN lost and
 * sent again a second later reaches the listener after the attempt's other
 * stream proved the same generation, the listener's floor has reached it,
 * and the connector gives the attempt up and starts another. Meanwhile the
 * rail was neither probed nor restored: 4.1 s in one lab run. Less than a
 * lost SYN's second: an attempt stuck on one is not waited out. */
#define RR_GRAY_REOPEN_WAIT_NS (500 * RR_GRAY_MS)
#define RR_GRAY_REOPEN_REST_NS (500 * RR_GRAY_MS)
_Static_assert(RR_GRAY_PROBE_WRITE <= ENGINE_PROBE_MAX_WRITE, "a probe write the receiver accepts");

/* Filler for probes: never read by anybody. */
static const char probe_fill[RR_GRAY_PROBE_WRITE];

/* What a probe of l must deliver to count as healthy: its share of what
 * the link sustains, or of what a sibling link to the same peer host
 * sustains now if that is less (a rail that delivers half of what its
 * healthy siblings deliver now is not the slow one), but never under half
 * of the link's own (gray_restore_ref(): under load the sibling's rate fell
 * to what a rail shaped to 5 % delivered, and restored it).
 *
 * Sustained, not the level: the level is the best 100 ms window seen, and
 * where completions come in bursts (an emulated NIC completes a 4 MiB
 * chain at a time) a window that caught two bursts reads twice what the
 * rail carries: the Soft-RoCE lab's level was 78 MB/s where its veth sent
 * 45 MB/s, and no probe, which is timed over its whole 8 MiB, reached a
 * share of it. A probe is measured over hundreds of milliseconds, so it is
 * held against a rate measured over about a second, empty windows between
 * bursts included. The level stands in where nothing was sustained yet. */
static double link_reference(const gray_link *l) {
  double s = gray_link_sustained_rate(l);
  return s > 0 && s < l->level ? s : l->level;
}

static double restore_reference(const gray_link *l, uint64_t now) {
  double own = link_reference(l), sib = 0;
  for (int i = 0; i < gray_nlinks; i++) {
    const gray_link *o = &gray_links[i];
    if (o == l || strcmp(o->host, l->host) || !o->loaded_rate_ns || now - o->loaded_rate_ns > RR_GRAY_SIBLING_NS)
      continue;
    double r = link_reference(o);
    if (r > 0 && (sib <= 0 || r < sib)) sib = r;
  }
  return gray_restore_ref(own, sib);
}

/* The latency judge's bar for a probe of l, ns: the whole time a probe may
 * take and still count as healthy (gray_lat_bad: x times the reference and
 * min_ns over it). 0 where l is not demoted for its latency, the criterion
 * is off or no reference is known: its probes are judged for rate only.
 *
 * The whole time, nothing subtracted for the probe's bytes: a latency
 * sample subtracts bytes / level, the time its bytes take at the level,
 * but the level is the best window of the traffic the link carried, and
 * under light traffic that is what was asked of it, not what it can do.
 * An idle rail's probe moves faster than that, and the time subtracted for
 * a big probe can swallow the delay: at a level of 10 MB/s a 1 MiB probe
 * "explains" 105 ms. In the Soft-RoCE lab (netem 100 ms, 256 KiB requests;
 * bench/RESULTS.md 16c, run 15) a latency-demoted rail was restored twice
 * with the delay still on, on probes that passed. A path delayed by the bar
 * or more takes the bar or more for any probe, whatever its size and rate:
 * held to the bar whole, such a probe can never count as healthy. A healed
 * path's probe passes as long as its bytes take well under the bar
 * (probe_size() sees to it). */
static double lat_probe_bar(const rr_engine *e, const gray_link *l) {
  if (!l->slowlat || !e->cfg.latency_x) return 0;
  double ref = gray_lat_reference(l);
  if (ref <= 0) return 0;
  double by_x = (double)e->cfg.latency_x * ref, by_min = ref + (double)e->cfg.latency_min_ns;
  return by_x > by_min ? by_x : by_min;
}

/* How large l's next probe is. A demoted link is probed with one write
 * (8 MiB >> 3 = 1 MiB); each healthy probe doubles the next, up to 8 MiB,
 * and each failed one (slow, lossy, late) halves it. On a slow rail most
 * of a large probe waits in a full queue, and a transport that retransmits
 * sends it again and again (RC go-back-N resends everything after the
 * first lost packet at each ACK timeout): work, and wire, that the slow
 * rail's probe takes from the rails carrying the traffic (on an emulated
 * NIC, their CPU). One write still tells a rail at 5 % (hundreds of
 * milliseconds or more) from a healthy one (tens of milliseconds), and the
 * larger probes that follow a healthy one measure it more finely. Never
 * shorter than RR_GRAY_PROBE_MIN_NS at the link's reference, though: on a
 * fast link 1 MiB takes about a tick (0.5 ms at 2 GB/s), and a healthy
 * probe timed to the next tick would read half its rate; there the probe
 * stays as large as it was.
 *
 * A link demoted for its latency is held to the latency bar on the probe's
 * whole time (lat_probe_bar()), so its probe carries at most what the
 * link's reference moves in half the bar: a healed path's probe takes
 * half the bar at the reference, a healthy path's latency (about a tenth
 * of the bar) and a tick more, and counts as healthy. Half, not a smaller
 * share: the probe's rate is judged too, and a shorter one would read a
 * tick's lateness as a slow rate (the reason for RR_GRAY_PROBE_MIN_NS). */
static uint64_t probe_size(const rr_engine *e, const gray_link *l) {
  uint64_t shrunk = (uint64_t)RR_GRAY_PROBE_BYTES >> l->probe_shrink;
  double ref = link_reference(l);
  double floor = ref * (double)RR_GRAY_PROBE_MIN_NS / 1e9;
  uint64_t size = floor > (double)RR_GRAY_PROBE_BYTES ? RR_GRAY_PROBE_BYTES
                  : (double)shrunk < floor           ? (uint64_t)floor
                                                     : shrunk;
  double bar = lat_probe_bar(e, l);
  if (bar <= 0) /* whole writes, as the rate's probes always were */
    return (size + RR_GRAY_PROBE_WRITE - 1) / RR_GRAY_PROBE_WRITE * RR_GRAY_PROBE_WRITE;
  double cap = ref * bar / 2.0 / 1e9;
  if (cap < (double)RR_GRAY_LAT_PROBE_MIN) cap = RR_GRAY_LAT_PROBE_MIN;
  return (double)size > cap ? (uint64_t)cap : size;
}

/* How long a probe of l may take: a second, or three times what it takes
 * at the link's level if that is longer (a slow NIC's 8 MiB). */
static uint64_t probe_timeout_ns(const rr_engine *e, const gray_link *l) {
  double ref = link_reference(l);
  double at_level = ref > 0 ? 3.0 * (double)probe_size(e, l) * 1e9 / ref : 0;
  return at_level > (double)RR_GRAY_PROBE_TIMEOUT_NS ? (uint64_t)at_level : RR_GRAY_PROBE_TIMEOUT_NS;
}

/* Post one probe (as much of it as the rail takes now). */
static void probe_post(rr_engine *e, engine_rail *rl, uint64_t bytes, uint64_t now) {
  uint64_t sent = 0;
  while (sent < bytes) {
    uint64_t len = bytes - sent < RR_GRAY_PROBE_WRITE ? bytes - sent : RR_GRAY_PROBE_WRITE;
    rr_write_wr wr = {.wr_id = ENGINE_PROBE_WR_ID, .local = probe_fill, .len = len,
                      .epoch_tag = (uint16_t)e->epoch, .post_ns = now, .flags = RR_WRITE_PROBE};
    if (rl->ep->ops->post_write(rl->ep, &wr) != RR_OK) break;
    sent += len;
  }
  rl->probe_bytes = sent;
  rl->probe_start_ns = sent ? now : 0;
  rl->probe_path_ok = sent && gray_path_read(rl, &rl->probe_path);
}

/* The share of what the probe in flight sent that was retransmitted; -1
 * when the transport cannot say. */
static double probe_loss(engine_rail *rl) {
  rr_rail_path_stats p;
  if (!rl->probe_path_ok || !gray_path_read(rl, &p) || p.sent_bytes <= rl->probe_path.sent_bytes ||
      p.retrans_bytes < rl->probe_path.retrans_bytes)
    return -1;
  return (double)(p.retrans_bytes - rl->probe_path.retrans_bytes) /
         (double)(p.sent_bytes - rl->probe_path.sent_bytes);
}

/* A judged probe into the process's counters (rr_counters.h). */
static void probe_count(int done, int ok, int bad, uint64_t bytes, uint64_t dur_ns, double ref) {
  rr_counter_inc(!done ? RR_CTR_PROBES_TIMED_OUT : bad ? RR_CTR_PROBES_SLOW : ok ? RR_CTR_PROBES_HEALTHY
                                                                            : RR_CTR_PROBES_BETWEEN);
  if (!done) return;
  rr_counter_add(RR_CTR_PROBE_BYTES, bytes);
  if (dur_ns) rr_counter_add(RR_CTR_PROBE_RATE_KBPS, (uint64_t)((double)bytes * 1e6 / (double)dur_ns));
  rr_counter_add(RR_CTR_PROBE_REFERENCE_KBPS, (uint64_t)(ref / 1e3));
}

/* Has rl given a reopen up lately (gray_reopen_bound)? It stays on the
 * endpoint it has meanwhile: probed, and restored once flushed, whatever it
 * still waits for from its peer. */
static int reopen_resting(const engine_rail *rl, uint64_t now) {
  return rl->g_reopen_gave_up && (now < rl->g_reopen_gave_up || now - rl->g_reopen_gave_up < RR_GRAY_REOPEN_REST_NS);
}

/* Rail rl's endpoint holds what the fault left behind: give it a fresh one,
 * where the owner can reopen it (cfg.reconnect; otherwise the old one is
 * waited out, as before), and it has not just given one up. */
static void stale_reopen(const rr_engine *e, engine_rail *rl, uint64_t now) {
  if (!e->cfg.reconnect || rl->g_reopen || reopen_resting(rl, now)) return;
  rl->g_reopen = 1;
  rl->g_reopen_since = now;
}

void gray_reopen_bound(engine_rail *rl, uint64_t now) {
  if (!rl->g_reopen || now <= rl->g_reopen_since || now - rl->g_reopen_since < RR_GRAY_REOPEN_WAIT_NS) return;
  RR_INFO(RR_SUB_NET, "send %s: reopen not done in %llu ms: probed and restored on its own endpoint for now", rl->name,
          (unsigned long long)((now - rl->g_reopen_since) / RR_GRAY_MS));
  rl->g_reopen = 0;
  rl->g_reopen_gave_up = now;
  rl->g_stale_since = 0;
}

/* Is the probe in flight on rl done? Its writes flushed, and, for a link
 * held to the latency bar, acknowledged where the transport can say
 * (path_stats' unacked): TCP's flushed() means only that the kernel took
 * the bytes, and a probe that fits the socket buffers was "done" at once,
 * however delayed the path (the latency samples wait for the same,
 * engine_gray.c lat_acked). Verbs' flushed() is the peer's acknowledgement. */
static int probe_done(engine_rail *rl, double lat_bar) {
  if (!rl->ep->ops->flushed(rl->ep)) return 0;
  rr_rail_path_stats p;
  return lat_bar <= 0 || !gray_path_read(rl, &p) || p.unacked == 0;
}

/* Is rl, restorable now, holding bytes it has not sent, or its peer has not
 * acknowledged, for longer than a healthy path takes (RR_GRAY_STALE_NS)?
 * flushed() says only that the kernel sent them. Traffic restored onto a
 * TCP socket whose bytes wait for a retransmission timeout the loss left
 * long (backed off, or grown with the round trips' variance: 0.4-2.6 s in
 * the lab) would queue behind them, and a rail not flushed cannot be
 * restored at all until they leave. Such a rail is reopened (stale_reopen)
 * and restored on its fresh endpoint, at once: the link's verdict stays.
 * Unsent bytes count only where an invalidation keeps the endpoint (TCP):
 * a verbs rail's unflushed writes are its peer's acknowledgements to come,
 * waited for as before. Unacknowledged ones, only where the transport can
 * say. Once a reopen was given up, a flushed rail is restored as it is. */
static int holds_stale_bytes(rr_engine *e, int r, uint64_t now) {
  engine_rail *rl = &e->rails[r];
  int flushed = rl->ep->ops->flushed(rl->ep);
  if (!flushed && !engine_rail_invalidate_cheap(e, r)) return 1;
  rr_rail_path_stats p;
  if (flushed && (reopen_resting(rl, now) || !gray_path_read(rl, &p) || p.unacked == 0)) {
    rl->g_stale_since = 0;
    return 0;
  }
  if (!rl->g_stale_since) rl->g_stale_since = now;
  else if (now - rl->g_stale_since >= RR_GRAY_STALE_NS) stale_reopen(e, rl, now);
  return 1;
}

/* A demoted rail: probe it, and restore it once the probes show it healthy
 * for the hold time. */
void gray_probe_and_restore(rr_engine *e, int r, gray_link *l, uint64_t now) {
  engine_rail *rl = &e->rails[r];
  int covered = gray_ok_covers(&l->ok, engine_rail_hold_ns(e, rl));
  if (rl->probe_start_ns) {
    double lat_bar = lat_probe_bar(e, l);
    int done = probe_done(rl, lat_bar);
    if (!done && now - rl->probe_start_ns < probe_timeout_ns(e, l)) return;
    double rate = done ? (double)rl->probe_bytes * 1e9 / (double)(now - rl->probe_start_ns) : 0;
    /* Good at restore_pct of the level; bad under degraded_pct; between,
     * a probe neither starts nor counts against the healthy run (a probe of
     * a few milliseconds is noisier than a 100 ms window). */
    double ref = restore_reference(l, now);
    int ok = done && rate * 100.0 >= (double)e->cfg.restore_pct * ref;
    int bad = !done || rate * 100.0 < (double)e->cfg.degraded_pct * ref;
    /* A probe that had to be retransmitted is a lossy path, whatever it
     * delivered in the end. */
    double loss = done ? probe_loss(rl) : -1;
    if (loss * 100.0 >= (double)e->cfg.retrans_pct) bad = 1, ok = 0;
    /* A link demoted for its latency: a probe is a request from an idle
     * rail too, and must not take many times the healthiest path's, on its
     * whole time (lat_probe_bar()). */
    if (done && lat_bar > 0 && (double)(now - rl->probe_start_ns) >= lat_bar) bad = 1, ok = 0;
    /* Once a connection restored the link, the others' probes compete
     * with its traffic on the same NIC: they no longer judge the link. */
    /* A healthy probe saw the rail healthy from its start: the run (and
     * the hold) begins there and reaches to the last healthy probe's end. */
    if (!bad || !l->restored) gray_ok_judge(&l->ok, ok, bad, rl->probe_start_ns, now);
    probe_count(done, ok, bad, rl->probe_bytes, now - rl->probe_start_ns, ref);
    if (bad && l->probe_shrink < RR_GRAY_PROBE_SHRINK_MAX) l->probe_shrink++;
    else if (ok && l->probe_shrink) l->probe_shrink--;
    l->probe_done_ns = now;
    rl->probe_start_ns = 0;
    rl->probe_done_ns = now;
    if (l->probe_owner == e) l->probe_owner = NULL;
    /* A probe that did not complete leaves its writes on the rail. Where a
     * invalidate resets the endpoint (verbs), the rail is reopened instead of
     * waiting for them: the next probe measures a fresh queue pair, not
     * one that spent the slow spell retransmitting into a full queue (in
     * the Soft-RoCE lab, such a queue pair's probes kept timing out for
     * seconds after the rate limit went; docs/failover.md). */
    if (!done && !engine_rail_invalidate_cheap(e, r)) {
      rl->ep->ops->invalidate(rl->ep);
      rl->invalidated = 1;
    } else if (!done) {
      /* Where the endpoint carries on (TCP), the probe's bytes stay in its
       * sockets, whose retransmission timeout the loss left long (backed
       * off, or grown with the round trips' variance): after the heal they
       * leave only when it fires (bench/RESULTS.md 16d), and until then
       * this rail can neither be probed nor restored (both wait for it to
       * be flushed). Fresh sockets instead. */
      stale_reopen(e, rl, now);
    }
  } else if (!covered && now - rl->probe_done_ns >= RR_GRAY_PROBE_GAP_NS && now - l->probe_done_ns >= RR_GRAY_PROBE_GAP_NS &&
             (!l->probe_owner || now - l->probe_since > 2 * probe_timeout_ns(e, l)) &&
             rl->ep->ops->flushed(rl->ep)) {
    /* Not once the link's probes cover this rail's hold: it is restored
     * now, and a probe posted first would hold the restore back until it
     * ends, competing with the traffic the link's other connections have
     * brought back (or be timed out and reopen the rail). */
    probe_post(e, rl, probe_size(e, l), now);
    if (rl->probe_start_ns) l->probe_owner = e, l->probe_since = now;
  }
  /* Traffic returns when the link's probes were healthy for this rail's
   * hold (with its flap damping) and nothing of this rail is still in
   * flight (a late probe's writes drain first). The link's verdict is
   * shared: its first connection to restore proves the rate, the others
   * follow it, as they follow a demotion. Without the second condition a
   * connection whose own queue pair still held a late probe's writes was
   * restored on another connection's probes and failed as silent at once
   * (the Soft-RoCE lab: "silent for 1232 ms" 6 ms after the restore): its
   * last sign of life was that old. Silence on a restored rail is judged
   * from the restore on (watch_since_ns), as on a connection that starts
   * work: a rail that has carried nothing for a while is not silent. */
  if (covered && !rl->probe_start_ns) {
    if (holds_stale_bytes(e, r, now)) return;
    rl->watch_since_ns = now;
    l->degraded = l->lossy = l->slowlat = 0;
    l->restored = 1;
    gray_lat_reset(&l->lat);
    rl->g_demoted = 0;
    gray_run_reset(l, now);
    engine_rail_set_state(e, r, RR_RAIL_ACTIVE, "delivers its healthy level again");
    engine_snd(e)->down_notice_pending = 1; /* the receiver restores it on our word */
    engine_snd(e)->restore_notice = 1;
  }
}
