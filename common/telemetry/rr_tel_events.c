/* Health events into telemetry: the sink rr_health calls (any thread, so it
 * only copies the event into a bounded queue), the tables the .prom file
 * shows (rail and NIC states, failovers, errors) and the JSON-lines event log
 * with its size cap. */
#include "rr_tel_format.h"
#include "rr_tel_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- queue: sinks in, exporter out */

/* guards: evq, evq_head, evq_n, evq_dropped; a leaf (the sink takes it under sinks_lock,
 * the exporter under rr_tel_g.lock). */
static pthread_mutex_t evq_lock = PTHREAD_MUTEX_INITIALIZER;
static rr_health_event evq[RR_TEL_EVQ];
static int evq_head, evq_n;
static uint64_t evq_dropped;

void rr_tel_health_sink(void *arg, const rr_health_event *ev) {
  (void)arg;
  pthread_mutex_lock(&evq_lock);
  if (evq_n == RR_TEL_EVQ) {
    evq_dropped++;
  } else {
    evq[(evq_head + evq_n) % RR_TEL_EVQ] = *ev;
    evq_n++;
  }
  pthread_mutex_unlock(&evq_lock);
  /* Wake the exporter so the event is on disk in milliseconds, not at the
   * next interval. Without its mutex a wake-up can be missed; the exporter
   * then finds the event at its next drain (RR_TEL_DRAIN_MS). */
  pthread_cond_signal(&rr_tel_g.wake);
}

int rr_tel_events_take(rr_health_event *out, int max, uint64_t *dropped) {
  pthread_mutex_lock(&evq_lock);
  int n = evq_n < max ? evq_n : max;
  for (int i = 0; i < n; i++) out[i] = evq[(evq_head + i) % RR_TEL_EVQ];
  evq_head = (evq_head + n) % RR_TEL_EVQ;
  evq_n -= n;
  *dropped = evq_dropped;
  evq_dropped = 0;
  pthread_mutex_unlock(&evq_lock);
  return n;
}

/* ---- tables */

static rr_tel_link *link_get(rr_tel_tables *t, const char *nic, const char *peer) {
  for (int i = 0; i < t->nlinks; i++)
    if (!strcmp(t->links[i].nic, nic) && !strcmp(t->links[i].peer, peer)) return &t->links[i];
  if (t->nlinks == RR_TEL_MAX_LINKS) {
    t->table_full++;
    return NULL;
  }
  rr_tel_link *l = &t->links[t->nlinks++];
  memset(l, 0, sizeof *l);
  snprintf(l->nic, sizeof l->nic, "%s", nic);
  snprintf(l->peer, sizeof l->peer, "%s", peer);
  l->state = -1;
  return l;
}

/* The NIC's entry, created (state up) when new; NULL when the table is full. */
static rr_tel_nic *nic_get(rr_tel_tables *t, const char *nic) {
  for (int i = 0; i < t->nnics; i++)
    if (!strcmp(t->nics[i].nic, nic)) return &t->nics[i];
  if (t->nnics == RR_TEL_MAX_NICS) {
    t->table_full++;
    return NULL;
  }
  rr_tel_nic *n = &t->nics[t->nnics++];
  snprintf(n->nic, sizeof n->nic, "%s", nic);
  n->state = RR_LINK_UP;
  return n;
}

/* The peer's error counter, created at 0 when new. */
static rr_tel_peer *peer_get(rr_tel_tables *t, const char *peer) {
  for (int i = 0; i < t->npeers; i++)
    if (!strcmp(t->peers[i].peer, peer)) return &t->peers[i];
  if (t->npeers == RR_TEL_MAX_PEERS) {
    t->table_full++;
    return NULL;
  }
  rr_tel_peer *p = &t->peers[t->npeers++];
  snprintf(p->peer, sizeof p->peer, "%s", peer);
  p->errors = 0;
  return p;
}

void rr_tel_tables_conn_rail(rr_tel_tables *t, const char *nic, const char *peer) {
  rr_tel_link *l = link_get(t, nic, peer);
  /* A rail just added is up; a state already reported for this NIC and
   * peer (another connection's rail that went down) is not overwritten. */
  if (l && l->state < 0) l->state = RR_LINK_UP;
  peer_get(t, peer[0] ? peer : "unknown");
}

void rr_tel_tables_pooled_nics(rr_tel_tables *t) {
  int n = rr_health_nic_count();
  for (int dev = 0; dev < n; dev++) {
    char name[16];
    rr_health_nic_name(dev, name, sizeof name);
    if (!name[0]) continue;
    int known = 0;
    for (int i = 0; i < t->nnics && !known; i++) known = !strcmp(t->nics[i].nic, name);
    if (known) continue;
    /* A change reported before this entry existed is in rr_health's view. */
    rr_tel_nic *e = nic_get(t, name);
    if (e) e->state = (int)rr_health_nic_get(dev);
  }
}

void rr_tel_events_apply(rr_tel_tables *t, const rr_health_event *ev) {
  if (ev->kind >= RR_HEV_NIC_STATE && ev->kind <= RR_HEV_ANOMALY) t->events_by_kind[ev->kind]++;
  rr_tel_link *l;
  rr_tel_nic *n;
  rr_tel_peer *p;
  switch (ev->kind) {
  case RR_HEV_NIC_STATE:
    if ((n = nic_get(t, ev->ifname))) n->state = (int)ev->state;
    break;
  case RR_HEV_RAIL_STATE:
    if ((l = link_get(t, ev->ifname, ev->peer))) {
      int was = l->state;
      l->state = (int)ev->state;
      if (ev->state == RR_LINK_UP) l->demoted = 0;
      /* A link already degraded is not demoted again: a demoted rail whose
       * endpoint was reopened comes back demoted (engine_gray.c), and the
       * link's other connections follow the first one's verdict, also when
       * the first one's endpoint ended in between (the link read down
       * then): a demotion counts once until the link is up again. */
      if (ev->state == RR_LINK_DEGRADED && (was == RR_LINK_DEGRADED || l->demoted)) break;
      /* A failure or demotion (one that says where it is) is a fault. An
       * event with no `where` is none: a demoted verbs rail's endpoint
       * ending and its reopen held demoted (DEGRADED, DOWN, DEGRADED again)
       * are one demotion, not two and a failure. */
      if (ev->where <= RR_WHERE_NONE || ev->where >= RR_WHERE_COUNT) break;
      l->faults[ev->where]++;
      if (ev->state == RR_LINK_DEGRADED) l->demotions++, l->demoted = 1;
    }
    break;
  case RR_HEV_FAILOVER:
    if ((l = link_get(t, ev->ifname, ev->peer))) l->failovers++;
    break;
  case RR_HEV_FAILBACK:
    /* Counted on the rail traffic returned to; the event's state is that rail's. */
    if ((l = link_get(t, ev->to_ifname[0] ? ev->to_ifname : ev->ifname, ev->peer))) {
      l->failbacks++;
      l->state = (int)ev->state;
      if (ev->state == RR_LINK_UP) l->demoted = 0;
    }
    break;
  case RR_HEV_ERROR:
    if ((p = peer_get(t, ev->peer[0] ? ev->peer : "unknown"))) p->errors++;
    break;
  case RR_HEV_ANOMALY: /* counted per rail by the series */
    break;
  }
}

/* ---- JSON line */

static void json_str_or_null(rr_tel_buf *b, const char *key, const char *v) {
  rr_tel_buf_printf(b, ",\"%s\":", key);
  if (v && v[0]) rr_tel_buf_json_str(b, v);
  else rr_tel_buf_put(b, "null", 4);
}

void rr_tel_event_json(rr_tel_buf *b, const rr_tel_config *cfg, const rr_health_event *ev) {
  char when[48];
  rr_tel_iso_time(ev->wall_ns, when, sizeof when);
  rr_tel_buf_printf(b, "{\"time\":\"%s\",\"time_ns\":%llu,\"mono_ns\":%llu", when,
                    (unsigned long long)ev->wall_ns, (unsigned long long)ev->time_ns);
  json_str_or_null(b, "host", cfg->host);
  rr_tel_buf_printf(b, ",\"pid\":%d", cfg->pid);
  json_str_or_null(b, "kind", rr_health_event_str(ev->kind));
  json_str_or_null(b, "nic", ev->ifname);
  json_str_or_null(b, "to_nic", ev->to_ifname);
  json_str_or_null(b, "peer", ev->peer);
  /* A failover names two rails and carries no state of its own. */
  json_str_or_null(b, "state", ev->kind == RR_HEV_FAILOVER ? NULL : rr_link_state_str(ev->state));
  json_str_or_null(b, "reason", ev->reason);
  if (ev->kind == RR_HEV_FAILOVER || ev->kind == RR_HEV_FAILBACK)
    rr_tel_buf_printf(b, ",\"stall_ms\":%.3f", (double)ev->stall_ns / 1e6);
  else
    rr_tel_buf_printf(b, ",\"stall_ms\":null");
  rr_tel_buf_printf(b, ",\"dev\":%d,\"to_dev\":%d", ev->dev, ev->to_dev);
  /* What serves nic and to_nic (rr_health_nic_transport: "verbs" with its RDMA
   * device, or "tcp"); null when unknown. */
  char tr[8], rd[32];
  rr_health_nic_transport(ev->dev, tr, sizeof tr, rd, sizeof rd, NULL);
  json_str_or_null(b, "transport", tr);
  json_str_or_null(b, "rdma_device", rd);
  rr_health_nic_transport(ev->to_dev, tr, sizeof tr, rd, sizeof rd, NULL);
  json_str_or_null(b, "to_transport", tr);
  json_str_or_null(b, "to_rdma_device", rd);
  /* Where a failure or demotion is (local, peer, path, process); null otherwise. */
  json_str_or_null(b, "where", rr_fault_where_str(ev->where));
  rr_tel_buf_put(b, "}\n", 2);
}

/* ---- the event log */

void rr_tel_events_name(const rr_tel_config *cfg, char *buf, size_t len) {
  snprintf(buf, len, RR_TEL_EVENTS_PREFIX "%s-%d" RR_TEL_EVENTS_SUFFIX, cfg->host, cfg->pid);
}

void rr_tel_evfile_init(rr_tel_evfile *f) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
}

void rr_tel_evfile_close(rr_tel_evfile *f) {
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
}

static int evfile_open(rr_tel_evfile *f, const char *path) {
  f->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (f->fd < 0) return errno;
  struct stat sb;
  f->size = fstat(f->fd, &sb) == 0 ? sb.st_size : 0;
  return 0;
}

rr_status rr_tel_evfile_write(rr_tel_evfile *f, const rr_tel_config *cfg, const char *lines, size_t len) {
  char name[256], path[2048], old[2060];
  rr_tel_events_name(cfg, name, sizeof name);
  snprintf(path, sizeof path, "%s/%s", cfg->dir, name);
  snprintf(old, sizeof old, "%s.1", path);
  int err = 0;
  /* Line by line, so that the cap holds to one line. */
  for (size_t off = 0; off < len && !err;) {
    const char *nl = memchr(lines + off, '\n', len - off);
    size_t n = nl ? (size_t)(nl - (lines + off)) + 1 : len - off;
    if (f->fd < 0 && (err = evfile_open(f, path))) break;
    if (f->size > 0 && (uint64_t)f->size + n > cfg->events_max) {
      /* Rotate: the current file becomes .1 (the older .1 goes). A reader
       * following the file sees its inode change and finishes the old one. */
      rr_tel_evfile_close(f);
      if (rename(path, old) != 0) {
        err = errno;
        break;
      }
      if ((err = evfile_open(f, path))) break;
    }
    rr_tel_append(&f->fd, path, lines + off, n, &f->size, &err);
    off += n;
  }
  rr_tel_io_result(&f->io, err, "event log", path);
  return err ? RR_ERR_SYSTEM : RR_OK;
}
