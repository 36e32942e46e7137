/* Gray failures: rails that stay up but deliver a fraction of their rate (a
 * port renegotiated down, a cable with CRC errors, a congested path). Hard
 * failures are found by silence and link state (engine_rails.c); these are
 * found by measuring.
 *
 * What is measured (sender, chain mode): per rail, the bytes the rail hands
 * on (posted minus what still waits in its queue) and whether data waited
 * for it ("loaded": a backlog at two ticks in a row). A rail that is not
 * loaded delivered everything it was asked for, so its rate says nothing
 * against it. Rates are kept per link (local NIC, remote address) across
 * every connection of the process, in 100 ms windows: connections sharing a
 * NIC share its rate, and judging each connection's share alone would make a
 * rail shared by four look four times slower than when it carried one.
 *
 * Only windows of a settled network are judged or learnt from: any rail
 * state change towards the same peer host (a failure, a fail-back, a
 * reopen, a demotion) moves connections between links, and for
 * RR_GRAY_SETTLE_NS after it the links' rates say how traffic is being
 * redistributed, not what a link can carry. A hard event on the link itself
 * (down, reopened, recovered) also forgets what was judged of it: it is
 * judged afresh. Without this, a rail coming back from an outage was
 * demoted at once on a verdict made of the trickle it delivered while it
 * died (the chaos run).
 *
 * Loss (rails whose transport counts its retransmissions,
 * RR_RAIL_CAP_PATH_STATS): TCP recovers a 10 % packet loss fast enough on a
 * short path that the rail still delivers 30-50 % of its level, above the
 * rate criterion, while every message that crosses it waits for
 * retransmissions. Each window also sums what the link's connections sent
 * and retransmitted; a window retransmitting retrans_pct % of what it sent,
 * and four times the link's own usual share (its history: the average of
 * the windows that were not lossy), counts as lossy; a run of them for a
 * third of degraded_ns is a degraded link, unless the peer's other links lose as much
 * at the same time (the loss is then the peer's or the fabric's, and moving
 * the traffic would not help). Probes of a link demoted for either reason
 * must show both the rate and no loss before traffic returns.
 *
 * The healthy level of a link is the highest window seen, decaying slowly
 * (RR_GRAY_DECAY per loaded window) towards what it delivers while loaded, so
 * a lasting change of the machine's speed becomes the new normal in tens of
 * seconds, a gray failure (a drop to a few percent) never within the
 * seconds it takes to demote. A link whose loaded windows stay under
 * degraded_pct of that level for degraded_ns, delivering under degraded_pct
 * of what it sustained over the last few seconds all that time (bursty
 * completions inflate the best window, gray_level.h), is degraded; each connection
 * with traffic elsewhere then demotes its rail on it (DEGRADED, through
 * engine_rail_set_state: the same rollback as a failure, so nothing is lost
 * or duplicated; a rail whose invalidation would reset its endpoint, verbs, is
 * drained instead of invalidated, so it stays connected).
 *
 * A demoted rail carries no NCCL data. It is probed (engine_gray_probe.c)
 * with filler writes that never reach the peer's engine as data
 * (RR_WRITE_PROBE, rails with RR_RAIL_CAP_PROBE_WRITE: TCP's receiver
 * discards them, verbs writes them into the peer rail's scratch memory): one
 * probe per link at a time (probe_size(): 1 MiB after a demotion, growing to
 * RR_GRAY_PROBE_BYTES as probes pass), posted when the rail has handed
 * everything on and timed until it has again (rr_rail_ops.flushed: the
 * peer's kernel or NIC acknowledged it). Healthy probes (restore_pct of what
 * the link sustains, restore_reference()) covering the fail-back hold (with
 * the same flap damping), at least two, more than the bad ones among them
 * and the latest verdict (gray_restore.h), bring traffic back.
 * docs/failover.md, "Degraded rails". */
#include "engine_internal.h"
#include "gray_latency.h"
#include "gray_link.h"
#include "gray_level.h"
#include "gray_restore.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_health_bus.h"
#include "rr_log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MS RR_GRAY_MS
#define RR_GRAY_WINDOW_NS (100 * MS)
#define RR_GRAY_TICK_GAP_NS (5 * MS)       /* a longer gap between ticks proves no load by itself */
#define RR_GRAY_DECAY 0.995
#define RR_GRAY_SUSTAINED_KEEP 0.9         /* per window: the sustained rate remembers about a second */
#define RR_GRAY_JUDGE_KEEP 0.98            /* per window: a slow run's reference, a few seconds (gray_level.h) */
#define RR_GRAY_LOADED_PCT 30                /* a window this loaded can judge the rail */
#define RR_GRAY_SETTLE_NS (1000 * MS)      /* after a rail state change towards the peer */
#define RR_GRAY_STALE_NS (3 * RR_GRAY_WINDOW_NS) /* a window nobody measured all along */
#define RR_GRAY_PATH_EVERY_NS (50 * MS)    /* how often a rail's transport totals are read */
#define RR_GRAY_LOSS_MIN_BYTES (256u << 10)/* a window that sent less says nothing of loss */
#define RR_GRAY_LOSS_NORM_X 4              /* lossy: this many times the link's usual share */
#define RR_GRAY_TRICKLE_NS (500 * MS)      /* a slow run's empty windows this soon after a delivery */
/* A run of lossy windows is sure after a third of degraded_ns: a share of
 * retransmitted bytes over 256 KiB sent is a far steadier signal than a
 * rate, and a path losing 10 % stalls in retransmission timeouts that make
 * the failure detector fail the rail over (δ, 1 s by default) if the
 * demotion does not come first. */
#define RR_GRAY_LOSS_RUN_DIV 3

/* guards: gray_links[], gray_nlinks (every connection's verdicts on a NIC and peer
 * address); taken under an engine's lock, never the other way round; health events are
 * reported under it (sinks_lock after it). */
static pthread_mutex_t gray_lock = PTHREAD_MUTEX_INITIALIZER;
gray_link gray_links[RR_GRAY_LINKS];
int gray_nlinks;

/* Set while this thread holds gray_lock: a demotion or restore made under
 * it comes back through engine_gray_on_state. */
static _Thread_local int gray_held;

static gray_link *link_find(int dev, const char *peer) {
  for (int i = 0; i < gray_nlinks; i++)
    if (gray_links[i].dev == dev && !strcmp(gray_links[i].peer, peer)) return &gray_links[i];
  return NULL;
}

static gray_link *link_get(int dev, const char *peer, const char *host, uint64_t now) {
  gray_link *l = link_find(dev, peer);
  if (l) return l;
  if (gray_nlinks == RR_GRAY_LINKS) return NULL; /* not judged: never wrongly demoted */
  l = &gray_links[gray_nlinks++];
  memset(l, 0, sizeof *l);
  l->dev = dev;
  snprintf(l->peer, sizeof l->peer, "%s", peer);
  snprintf(l->host, sizeof l->host, "%s", host);
  l->win_start = now;
  l->settle_until = now + RR_GRAY_SETTLE_NS; /* connections are still being set up */
  return l;
}

/* Forget the runs under way and start a new window. */
void gray_run_reset(gray_link *l, uint64_t now) {
  l->below_since = 0;
  l->run_windows = l->run_below = 0;
  l->loss_since = 0;
  l->loss_windows = l->loss_bad = 0;
  l->win_start = now;
  l->bytes = l->loaded_ns = 0;
  l->sent = l->retrans = 0;
}

/* Does another link to the same peer host lose at least a quarter of what
 * l loses (share), measured lately? Then the loss is not l's. */
static int sibling_lossy(const gray_link *l, double share, uint64_t now) {
  for (int i = 0; i < gray_nlinks; i++) {
    const gray_link *o = &gray_links[i];
    if (o == l || strcmp(o->host, l->host) || !o->last_loss_ns || now - o->last_loss_ns > RR_GRAY_SIBLING_NS)
      continue;
    if (o->last_loss * RR_GRAY_LOSS_NORM_X >= share) return 1;
  }
  return 0;
}

/* The window's retransmissions: a run of lossy windows makes a lossy link. */
static void loss_window(gray_link *l, const rr_engine_config *cfg, uint64_t now) {
  if (l->sent < RR_GRAY_LOSS_MIN_BYTES) return; /* too little sent to tell */
  double share = (double)l->retrans / (double)l->sent;
  l->last_loss = share;
  l->last_loss_ns = now;
  if (share * 100.0 >= (double)cfg->retrans_pct && share >= RR_GRAY_LOSS_NORM_X * l->loss_norm) {
    if (!l->loss_since) l->loss_since = l->win_start;
    l->loss_windows++, l->loss_bad++;
    l->loss_frac = share;
    /* Three lossy windows at least: one burst of retransmissions after a
     * port that was down for a moment (shorter than δ) is no lossy path. */
    if (now - l->loss_since >= cfg->degraded_ns / RR_GRAY_LOSS_RUN_DIV && l->loss_bad >= 3 &&
        l->loss_bad * 10 >= l->loss_windows * 6 &&
        !sibling_lossy(l, share, now))
      l->degraded = 1, l->lossy = 1;
    return;
  }
  l->loss_norm = l->loss_norm * RR_GRAY_DECAY + share * (1.0 - RR_GRAY_DECAY);
  if (share * 200.0 < (double)cfg->retrans_pct) { /* clearly clean: the run is over */
    l->loss_since = 0;
    l->loss_windows = l->loss_bad = 0;
  } else if (l->loss_since) {
    l->loss_windows++;
  }
}

/* A loaded window of a healthy link into its sustained rate. */
static void sustained_add(gray_link *l, uint64_t bytes, uint64_t dur) {
  l->sus_bytes = l->sus_bytes * RR_GRAY_SUSTAINED_KEEP + (double)bytes;
  l->sus_ns = l->sus_ns * RR_GRAY_SUSTAINED_KEEP + (double)dur;
  gray_sustained_add(&l->judge, RR_GRAY_JUDGE_KEEP, bytes, dur);
}

double gray_link_sustained_rate(const gray_link *l) {
  return l->sus_ns > 0 ? l->sus_bytes * 1e9 / l->sus_ns : 0;
}

/* Did the run as a whole deliver under degraded_pct of what the link
 * sustains (gray_level.h)? Its windows are judged against the level, the
 * best window: where completions come in bursts, a slow rail's windows
 * are bursts or nothing, as a healthy one's are. But a run of windows under
 * the level is also what a healthy rail restored at a fraction of its old
 * rate shows (the Soft-RoCE lab: the level twice what the veth carried, the
 * rail demoted again at "11 % of its level"): a demotion also needs the
 * run's bytes over its time, empty windows included, under degraded_pct of
 * the sustained rate. The run's figure is what the link kept doing, burst
 * or not; a rail at 5 % is far under either bar. Sets below_frac to it. */
static int run_slow(gray_link *l, const rr_engine_config *cfg) {
  double ref = gray_judge_ref(l->level, gray_sustained_rate(&l->judge));
  if (!gray_run_slow(l->run_bytes, l->run_ns, ref, cfg->degraded_pct)) {
    if (!l->run_spared)
      RR_INFO(RR_SUB_NET, "gray: link dev %d to %s: %u windows under the level, but the run delivers %.0f %% of the "
              "%.1f MB/s it sustains: not slow as a whole", l->dev, l->peer, l->run_windows,
              ref > 0 && l->run_ns ? (double)l->run_bytes * 1e9 / (double)l->run_ns / ref * 100.0 : 0, ref / 1e6);
    l->run_spared = 1;
    return 0;
  }
  if (ref > 0 && l->run_ns) l->below_frac = (double)l->run_bytes * 1e9 / (double)l->run_ns / ref;
  return 1;
}

/* A window is "below" (loaded at least RR_GRAY_LOADED_PCT of it, under
 * degraded_pct of the level), "good" (at or over degraded_pct), or says
 * nothing (little load and a low rate: the rail delivered what it was asked
 * for). A run of windows that are mostly below, with none good, for
 * degraded_ns is a degraded link. */
static void window_close(gray_link *l, const rr_engine_config *cfg, uint64_t now) {
  uint64_t dur = now - l->win_start;
  /* Traffic still moving between links after a rail state change, or a
   * window no connection measured all along: it says nothing. */
  if (l->win_start < l->settle_until || dur > RR_GRAY_STALE_NS) {
    gray_run_reset(l, now);
    return;
  }
  /* Loss is judged on what the transport sent, silence or not: a lossy
   * TCP path spends whole windows in a retransmission timeout. */
  loss_window(l, cfg, now);
  /* Nothing delivered at all is silence, not a slow rail: the failure
   * detector owns it (a probe, then a failover within δ), and a rail fresh
   * from an outage sits in TCP's retransmission backoff for a while. It
   * breaks a run of slow windows, so a rail that flaps or goes silent is
   * never demoted as slow: only one that keeps delivering a trickle is. */
  int loaded = l->loaded_ns * 100 >= dur * RR_GRAY_LOADED_PCT;
  /* ... except within a run of slow windows: a rail that delivers in bursts
   * (an RC queue pair whose packets a rate limit delays past the ACK timeout
   * sends them all again, go-back-N, and gets a burst through each time)
   * spends whole windows loaded with nothing delivered between bursts. Such
   * a window soon after a delivery is a slow one; a run that stays empty
   * for RR_GRAY_TRICKLE_NS is silence again. */
  if (l->bytes == 0 && loaded && l->below_since && now - l->delivered_ns <= RR_GRAY_TRICKLE_NS) {
    l->run_windows++;
    l->run_below++;
    l->run_ns += dur;
    if (now - l->below_since >= cfg->degraded_ns && l->run_below * 10 >= l->run_windows * 6 && run_slow(l, cfg))
      l->degraded = 1;
    l->win_start = now;
    l->loaded_ns = 0;
    l->sent = l->retrans = 0;
    return;
  }
  if (l->bytes == 0) {
    /* Between two bursts of a healthy rail (an emulated NIC completes a
     * 4 MiB chain at a time): part of what it sustains. */
    if (loaded && !l->degraded && now - l->delivered_ns <= RR_GRAY_TRICKLE_NS) sustained_add(l, 0, dur);
    l->below_since = 0;
    l->run_windows = l->run_below = 0;
    l->win_start = now;
    l->bytes = l->loaded_ns = 0;
    l->sent = l->retrans = 0;
    return;
  }
  double rate = (double)l->bytes * 1e9 / (double)dur;
  l->delivered_ns = now;
  if (loaded) l->loaded_rate = rate, l->loaded_rate_ns = now;
  double frac = l->level > 0 ? rate / l->level : 1.0;
  if (frac * 100.0 >= (double)cfg->degraded_pct) {
    l->below_since = 0;
    l->run_windows = l->run_below = 0;
    if (rate > l->level) l->level = rate;
    else if (loaded) l->level = l->level * RR_GRAY_DECAY + rate * (1.0 - RR_GRAY_DECAY);
    if (loaded) sustained_add(l, l->bytes, dur);
    if (loaded && !l->lossy && !l->slowlat) l->degraded = 0;
  } else if (loaded || l->below_since) {
    if (!l->below_since) l->below_since = l->win_start, l->run_bytes = l->run_ns = 0, l->run_spared = 0;
    l->run_windows++;
    l->run_bytes += l->bytes;
    l->run_ns += dur;
    if (loaded) l->run_below++, l->below_frac = frac;
    if (now - l->below_since >= cfg->degraded_ns && l->run_below * 10 >= l->run_windows * 6 && run_slow(l, cfg))
      l->degraded = 1;
  }
  l->win_start = now;
  l->bytes = l->loaded_ns = 0;
  l->sent = l->retrans = 0;
}

/* The transport's totals now (RR_RAIL_CAP_PATH_STATS), 0 when it cannot say. */
int gray_path_read(engine_rail *rl, rr_rail_path_stats *out) {
  if (!(rl->ep->dev->attr.caps & RR_RAIL_CAP_PATH_STATS) || !rl->ep->ops->path_stats) return 0;
  return rl->ep->ops->path_stats(rl->ep, out) == RR_OK;
}

/* A rail's sent and retransmitted bytes since its last reading, into its
 * link's window (a few times a window: a system call per socket). */
static void measure_path(engine_rail *rl, gray_link *l, uint64_t now) {
  if (rl->g_path_ns && now - rl->g_path_ns < RR_GRAY_PATH_EVERY_NS) return;
  rr_rail_path_stats p;
  if (!gray_path_read(rl, &p)) {
    rl->g_path_ns = 0;
    return;
  }
  if (rl->g_path_ns && p.sent_bytes >= rl->g_path.sent_bytes && p.retrans_bytes >= rl->g_path.retrans_bytes) {
    l->sent += p.sent_bytes - rl->g_path.sent_bytes;
    l->retrans += p.retrans_bytes - rl->g_path.retrans_bytes;
  }
  rl->g_path = p;
  rl->g_path_ns = now;
}

gray_lat_cfg gray_lat_cfg_of(const rr_engine *e) {
  return (gray_lat_cfg){.x = e->cfg.latency_x, .min_ns = e->cfg.latency_min_ns, .degraded_ns = e->cfg.degraded_ns};
}

/* The latency a healthy path to l's peer host gives: the best of l's own
 * level and its siblings' (0: none known). */
double gray_lat_reference(const gray_link *l) {
  double ref = l->lat.level_ns;
  for (int i = 0; i < gray_nlinks; i++) {
    const gray_link *o = &gray_links[i];
    if (o != l && !strcmp(o->host, l->host) && o->lat.level_ns > 0 && (ref <= 0 || o->lat.level_ns < ref))
      ref = o->lat.level_ns;
  }
  return ref;
}

/* A request timed on l: dur_ns from its post onto the idle rail to the
 * peer's acknowledgement, bytes long. Judged only on a settled network. */
static void lat_sample(const rr_engine *e, gray_link *l, uint64_t bytes, uint64_t dur_ns, uint64_t now) {
  /* Without the link's rate the whole transfer would count as latency: a
   * rail that never carried a loaded window is not judged for it. */
  if (!e->cfg.latency_x || now < l->settle_until || l->level <= 0) return;
  gray_lat_cfg c = gray_lat_cfg_of(e);
  if (gray_lat_sample(&l->lat, &c, gray_lat_excess(dur_ns, bytes, l->level), gray_lat_reference(l), now))
    l->degraded = 1, l->slowlat = 1;
}

/* Has the peer acknowledged everything posted? flushed, and, where the
 * transport reports what it has in flight (path_stats), nothing
 * unacknowledged: TCP's flushed() means only that the kernel sent the bytes
 * (waiting for the acknowledgement there would wait out a delayed ACK on
 * every close). Without this a request on a path with 40 ms added was
 * "done" as soon as it was sent, and no delay was ever seen (the lab's
 * netem case, docs/failover.md "Latency"). A system call per socket, only
 * while a sample waits for its end. */
static int lat_acked(engine_rail *rl, int flushed) {
  rr_rail_path_stats p;
  return flushed && (!gray_path_read(rl, &p) || p.unacked == 0);
}

/* Latency samples (gray_latency.h): a post onto a rail with nothing in
 * flight, timed until it is all acknowledged, if nothing was posted behind
 * it meanwhile (then it would time the queue, not the request). */
static void measure_latency(const rr_engine *e, engine_rail *rl, gray_link *l, int flushed, uint64_t now) {
  if (rl->g_lat_t0) {
    if (rl->g_posted != rl->g_lat_posted) rl->g_lat_t0 = 0;
    else if (lat_acked(rl, flushed)) lat_sample(e, l, rl->g_lat_bytes, now - rl->g_lat_t0, now), rl->g_lat_t0 = 0;
  } else if (rl->g_prev_ns && rl->g_prev_flushed && rl->g_posted > rl->g_prev_posted &&
             now - rl->g_prev_ns <= RR_ENGINE_IDLE_BACKGROUND_NS / 2) {
    /* Posted since the last tick, onto an idle rail: from the last tick on
     * (a tick early at most). Done already: a sample too. Not after a gap
     * of the background's idle cadence (rr_engine_background): a connection
     * idle for a second is ticked every 100 ms, and a sample from such a
     * tick would time the gap, not the request. */
    if (lat_acked(rl, flushed)) {
      lat_sample(e, l, rl->g_posted - rl->g_prev_posted, now - rl->g_prev_ns, now);
    } else {
      rl->g_lat_t0 = rl->g_prev_ns;
      rl->g_lat_bytes = rl->g_posted - rl->g_prev_posted;
      rl->g_lat_posted = rl->g_posted;
    }
  }
}

/* One tick's measurement of an ACTIVE rail into its link's window. */
static void measure(rr_engine *e, engine_rail *rl, gray_link *l, uint64_t now) {
  size_t b = rl->ep->ops->backlog(rl->ep);
  /* Loaded: data waits for the rail, in its queue or in the transport's
   * (TCP: bytes the kernel has not sent yet; what NCCL posts comes in
   * bursts, so the rail's own queue alone runs dry between them). */
  int flushed = rl->ep->ops->flushed(rl->ep);
  int loaded = b > 0 || !flushed;
  measure_latency(e, rl, l, flushed, now);
  if (rl->g_prev_ns && now > rl->g_prev_ns) {
    uint64_t in = rl->g_posted - rl->g_prev_posted;
    uint64_t out = in + rl->g_prev_backlog > b ? in + rl->g_prev_backlog - b : 0;
    l->bytes += out;
    /* Loaded all along: data waited at both ticks, and either they were
     * close, or some of what waited at the first still waits (the rail
     * never ran dry in between, however long the gap: a slow machine's
     * ticks, an emulated one's, are tens of milliseconds apart). */
    if (rl->g_prev_loaded && loaded && (now - rl->g_prev_ns <= RR_GRAY_TICK_GAP_NS || out < rl->g_prev_backlog)) {
      /* The union of every connection's loaded time on this link. */
      uint64_t from = l->last_loaded_ns > rl->g_prev_ns ? l->last_loaded_ns : rl->g_prev_ns;
      if (now > from) l->loaded_ns += now - from;
      if (now > l->last_loaded_ns) l->last_loaded_ns = now;
    }
  }
  rl->g_prev_ns = now;
  rl->g_prev_posted = rl->g_posted;
  rl->g_prev_backlog = b;
  rl->g_prev_loaded = loaded;
  rl->g_prev_flushed = flushed;
  measure_path(rl, l, now);
  if (now - l->win_start >= RR_GRAY_WINDOW_NS) window_close(l, &e->cfg, now);
}

static int other_rail_usable(const rr_engine *e, int r) {
  for (int i = 0; i < e->nrails; i++)
    if (i != r && engine_rail_usable(e, i)) return 1;
  return 0;
}

static void demote(rr_engine *e, int r, gray_link *l, uint64_t now) {
  engine_rail *rl = &e->rails[r];
  l->restored = 0; /* a new verdict: the next restore is proven afresh */
  gray_ok_reset(&l->ok);
  l->probe_shrink = RR_GRAY_PROBE_SHRINK_MAX; /* it is slow: probe small, grow as probes pass */
  rl->degraded_frac = l->lossy ? l->loss_frac : l->below_frac;
  uint64_t since = l->lossy ? l->loss_since : l->slowlat ? l->lat.run_since : l->below_since;
  rl->degraded_for_ns = since && now > since ? now - since : 0;
  rl->probe_start_ns = 0;
  rl->probe_done_ns = now;
  char why[64];
  if (l->lossy)
    snprintf(why, sizeof why, "retransmits %.0f %% of its bytes for %.1f s", rl->degraded_frac * 100.0,
             (double)rl->degraded_for_ns / 1e9);
  else if (l->slowlat)
    snprintf(why, sizeof why, "requests take %.1f ms more than its rate needs for %.1f s", l->lat.last_ns / 1e6,
             (double)rl->degraded_for_ns / 1e9);
  else
    snprintf(why, sizeof why, "delivers %.0f %% of its level for %.1f s", rl->degraded_frac * 100.0,
             (double)rl->degraded_for_ns / 1e9);
  e->stats.demotions++;
  rr_counter_inc(RR_CTR_DEMOTIONS);
  rl->g_demoted = 1;
  engine_rail_set_state(e, r, RR_RAIL_DEGRADED, why);
}

int engine_gray_demote_silent(rr_engine *e, int r, uint64_t now) {
  engine_rail *rl = &e->rails[r];
  if (!engine_is_sender(e) || !e->cfg.degraded_pct || e->cfg.failover_mode != RR_FAILOVER_CHAIN ||
      !(rl->ep->dev->attr.caps & RR_RAIL_CAP_PROBE_WRITE) || rl->state != RR_RAIL_ACTIVE || engine_send_holding(e) ||
      !other_rail_usable(e, r))
    return 0;
  pthread_mutex_lock(&gray_lock);
  gray_held = 1;
  gray_link *l = link_find(rl->ep->dev->index, rl->peer_addr);
  uint64_t lately = e->cfg.progress_timeout_ns + RR_GRAY_TRICKLE_NS;
  /* In a run of slow windows, with a delivery lately: a trickle that has
   * paused, not a path that died with it. */
  int slow_rate = l && l->below_since && l->run_below >= 3 && now - l->delivered_ns <= lately;
  /* In a run of bad latency samples, with a sample lately or during the
   * silence (gray_link_lat_slow): requests that take longer than δ on a
   * delayed path (the Soft-RoCE lab's netem case at 1 MiB: up to 0.9 s more
   * each) make the rail silent before the latency judge has its
   * degraded_ns of samples. The verdict is then the latency's, so the
   * probes must show the delay gone too. */
  int slow_lat = l && !slow_rate && gray_link_lat_slow(l, lately, e->cfg.progress_timeout_ns / 2, now);
  if (slow_rate || slow_lat) {
    /* Which judge's run spared it: the demotion's reason reads the same
     * as that judge's own verdict. */
    RR_INFO(RR_SUB_NET, "send %s: silent, demoted: %s run under way (windows %u of %u below, latency samples %u of %u bad)",
            rl->name, slow_rate ? "a slow-window" : "a latency", l->run_below, l->run_windows, l->lat.run_bad,
            l->lat.run_n);
    l->degraded = 1;
    if (slow_lat) l->slowlat = 1;
    demote(e, r, l, now);
  } else if (l) {
    /* What the judges knew when silence won: a shaped verbs rail is failed
     * as silent now and then instead of demoted (docs/failover.md, the
     * slow-rail case), and this says which race it lost. */
    RR_INFO(RR_SUB_NET, "send %s: silent, not demoted: its link's run %u of %u windows below%s, last delivery %llu ms "
            "ago; latency run %u of %u samples bad, last sample %llu ms ago",
            rl->name, l->run_below, l->run_windows, l->below_since ? "" : " (none under way)",
            (unsigned long long)(l->delivered_ns && now > l->delivered_ns ? (now - l->delivered_ns) / MS : 0),
            l->lat.run_bad, l->lat.run_n,
            (unsigned long long)(l->lat.last_at && now > l->lat.last_at ? (now - l->lat.last_at) / MS : 0));
  }
  int slow = slow_rate || slow_lat;
  gray_held = 0;
  pthread_mutex_unlock(&gray_lock);
  return slow;
}

int engine_gray_demotion_goes_on(const rr_engine *e, int r, rr_rail_state old, rr_rail_state st) {
  if (!e->rails[r].g_demoted) return 0;
  return (old == RR_RAIL_DEGRADED && st == RR_RAIL_DEAD) ||
         ((old == RR_RAIL_DOWN || old == RR_RAIL_RECOVERING) && st == RR_RAIL_DEGRADED);
}

int engine_gray_needs_reopen(const rr_engine *e, int r) {
  const engine_rail *rl = &e->rails[r];
  return rl->state == RR_RAIL_DEGRADED && rl->g_demoted &&
         ((rl->invalidated && !engine_rail_invalidate_cheap(e, r)) || rl->g_reopen);
}

void engine_gray_tick(rr_engine *e, int r, uint64_t now) {
  engine_rail *rl = &e->rails[r];
  /* Balance mode already gives a slow rail the share it drains (a backed-up
   * rail is skipped); a rail that cannot be probed could be demoted but
   * never restored: it is judged by failures only. */
  if (!engine_is_sender(e) || !e->cfg.degraded_pct || e->cfg.failover_mode != RR_FAILOVER_CHAIN ||
      !(rl->ep->dev->attr.caps & RR_RAIL_CAP_PROBE_WRITE))
    return;
  pthread_mutex_lock(&gray_lock);
  gray_held = 1;
  gray_link *l = link_get(rl->ep->dev->index, rl->peer_addr, e->cfg.peer, now);
  if (!l) {
    gray_held = 0;
    pthread_mutex_unlock(&gray_lock);
    return;
  }
  if (rl->state == RR_RAIL_ACTIVE) {
    if (engine_send_holding(e)) rl->g_prev_ns = rl->g_lat_t0 = 0; /* a rollback empties queues: no delivery */
    else measure(e, rl, l, now);
    if (l->degraded && !engine_send_holding(e) && other_rail_usable(e, r)) demote(e, r, l, now);
  } else if (rl->state == RR_RAIL_DEGRADED) {
    gray_reopen_bound(rl, now);
    if (!engine_gray_needs_reopen(e, r)) gray_probe_and_restore(e, r, l, now);
  }
  gray_held = 0;
  pthread_mutex_unlock(&gray_lock);
}

void engine_gray_on_state(rr_engine *e, int r, rr_rail_state old, rr_rail_state st, uint64_t now) {
  if (!engine_is_sender(e) || !e->cfg.degraded_pct) return;
  engine_rail *rl = &e->rails[r];
  rl->g_prev_ns = 0; /* what it posted before this is no delivery of its new state */
  rl->g_lat_t0 = 0;  /* nor a request of it */
  rl->g_path_ns = 0; /* nor what its transport sent */
  int held = gray_held;
  if (!held) pthread_mutex_lock(&gray_lock);
  for (int i = 0; i < gray_nlinks; i++)
    if (!strcmp(gray_links[i].host, e->cfg.peer) && gray_links[i].settle_until < now + RR_GRAY_SETTLE_NS)
      gray_links[i].settle_until = now + RR_GRAY_SETTLE_NS;
  /* A demotion or restore is the verdict at work (the link's other
   * connections follow it), and so is the end of a demoted rail's endpoint
   * (DEGRADED to DEAD: a verbs rail's invalidation, or its endpoint breaking),
   * which is reopened and comes back demoted, and the fresh endpoint swapped
   * in (DOWN to DOWN, engine_rail_swap): a TCP rail reopened after the heal
   * must not undo the healthy run its link's probes had built, or every
   * connection of the link would wait for a new one. Anything else on the link is
   * a hard event after which the link is judged afresh. Forgetting the
   * verdict at that DEAD, 20 ms after the demotion, left the link's other
   * connections, whose ticks under an emulated NIC are tens of ms apart,
   * to judge it again from the start: in the Soft-RoCE lab a second
   * connection was demoted 2.9 s after the first, and in another run one
   * connection carried 0, 0, 0, 3.6, 0, 0, 4.1, 18 MB/s per half second from
   * the limit while the other, moved at once, carried 19-26. */
  int gray = st == RR_RAIL_DEGRADED || (old == RR_RAIL_DEGRADED && st == RR_RAIL_ACTIVE) ||
             (old == RR_RAIL_DEGRADED && st == RR_RAIL_DEAD && rl->g_demoted) ||
             (old == RR_RAIL_DOWN && st == RR_RAIL_DOWN && rl->g_demoted);
  gray_link *l = gray ? NULL : link_find(rl->ep->dev->index, rl->peer_addr);
  if (l) {
    gray_run_reset(l, now);
    l->degraded = l->lossy = l->slowlat = l->restored = 0;
    gray_lat_reset(&l->lat);
    gray_ok_reset(&l->ok);
  }
  if (!held) pthread_mutex_unlock(&gray_lock);
}
