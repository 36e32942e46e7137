/* Prometheus text exposition format (version 0.0.4) for node_exporter's
 * textfile collector: every family once, HELP and TYPE first, its samples
 * together; no client-side timestamps (the collector refuses them). Every
 * series carries host and pid: several ranks on one host write one file each
 * and the collector rejects two identical series. */
#include "rr_counters.h"
#include "rr_tel_format.h"
#include "rr_tel_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static void family(rr_tel_buf *b, const char *name, const char *type, const char *help) {
  rr_tel_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void label(rr_tel_buf *b, const char *k, const char *v, int first) {
  rr_tel_buf_printf(b, "%s%s=\"", first ? "" : ",", k);
  rr_tel_buf_prom_label(b, v);
  rr_tel_buf_put(b, "\"", 1);
}

static void proc_labels(rr_tel_buf *b, const rr_tel_config *cfg) {
  char pid[16];
  snprintf(pid, sizeof pid, "%d", cfg->pid);
  label(b, "host", cfg->host, 1);
  label(b, "pid", pid, 0);
}

/* name{host,pid,nic,peer,rail,direction[,extra]} */
static void rail_head(rr_tel_buf *b, const char *name, const rr_tel_config *cfg, const rr_tel_series *s,
                      const char *extra_k, const char *extra_v) {
  char rail[16];
  snprintf(rail, sizeof rail, "%d", s->rail);
  rr_tel_buf_printf(b, "%s{", name);
  proc_labels(b, cfg);
  label(b, "nic", s->nic, 0);
  label(b, "peer", s->peer, 0);
  label(b, "rail", rail, 0);
  label(b, "direction", rr_tel_dir_str(s->dir), 0);
  if (extra_k) label(b, extra_k, extra_v, 0);
  rr_tel_buf_put(b, "} ", 2);
}

static void link_head(rr_tel_buf *b, const char *name, const rr_tel_config *cfg, const rr_tel_link *l) {
  rr_tel_buf_printf(b, "%s{", name);
  proc_labels(b, cfg);
  label(b, "nic", l->nic, 0);
  label(b, "peer", l->peer, 0);
  rr_tel_buf_put(b, "} ", 2);
}

static void rail_u64(rr_tel_buf *b, const char *name, const rr_tel_config *cfg, rr_tel_series *const *ss,
                     int n, size_t off) {
  for (int i = 0; i < n; i++) {
    rail_head(b, name, cfg, ss[i], NULL, NULL);
    rr_tel_buf_printf(b, "%llu\n", (unsigned long long)*(const uint64_t *)((const char *)ss[i] + off));
  }
}

/* A queue-work family: one sample per rail and queue, every one from the
 * first export (a transport without queues, TCP, reads 0). */
static void rail_cost(rr_tel_buf *b, const char *name, const char *help, const rr_tel_config *cfg,
                      rr_tel_series *const *ss, int n, int send_kind, int recv_kind) {
  family(b, name, "counter", help);
  for (int i = 0; i < n; i++) {
    rail_head(b, name, cfg, ss[i], "queue", "send");
    rr_tel_buf_printf(b, "%llu\n", (unsigned long long)ss[i]->cost.n[send_kind]);
    rail_head(b, name, cfg, ss[i], "queue", "recv");
    rr_tel_buf_printf(b, "%llu\n", (unsigned long long)ss[i]->cost.n[recv_kind]);
  }
}

/* Which transport serves each pooled NIC (rr_health_nic_transport), an info
 * series per NIC whose transport the plugin set: dashboards join it on nic. */
static void nic_info(rr_tel_buf *b, const rr_tel_config *cfg) {
  int n = rr_health_nic_count(), head = 0;
  for (int dev = 0; dev < n; dev++) {
    char nic[16], tr[8], rd[32], port[16];
    int p = 0;
    rr_health_nic_name(dev, nic, sizeof nic);
    rr_health_nic_transport(dev, tr, sizeof tr, rd, sizeof rd, &p);
    if (!nic[0] || !tr[0]) continue;
    if (!head++)
      family(b, RR_TEL_M_NIC_INFO, "gauge",
             "Always 1: the transport serving the local NIC (verbs or tcp) and, on verbs, its RDMA device and port.");
    snprintf(port, sizeof port, "%d", p);
    rr_tel_buf_printf(b, "%s{", RR_TEL_M_NIC_INFO);
    proc_labels(b, cfg);
    label(b, "nic", nic, 0);
    label(b, "transport", tr, 0);
    label(b, "rdma_device", rd, 0);
    label(b, "rdma_port", port, 0);
    rr_tel_buf_put(b, "} 1\n", 4);
  }
}

void rr_tel_prom_name(const rr_tel_config *cfg, char *buf, size_t len) {
  snprintf(buf, len, RR_TEL_PROM_PREFIX "%s-%d" RR_TEL_PROM_SUFFIX, cfg->host, cfg->pid);
}

void rr_tel_prom_render(rr_tel_buf *b, const rr_tel_config *cfg, rr_tel_series *const *ss, int n,
                        const rr_tel_tables *t, uint64_t wall_ns) {
  if (n) {
    family(b, RR_TEL_M_THROUGHPUT, "gauge",
           "Throughput of the rail's last W requests (RERAIL_TELEMETRY_WINDOW) while it was busy; 0 when "
           "no request completed in the last interval.");
    for (int i = 0; i < n; i++) {
      rail_head(b, RR_TEL_M_THROUGHPUT, cfg, ss[i], NULL, NULL);
      rr_tel_buf_printf(b, "%.9g\n", ss[i]->active ? ss[i]->thr : 0.0);
    }
    family(b, RR_TEL_M_BYTES, "counter", "Bytes the rail moved (sent for tx, landed for rx).");
    rail_u64(b, RR_TEL_M_BYTES, cfg, ss, n, offsetof(rr_tel_series, bytes));
    family(b, RR_TEL_M_REQUESTS, "counter", "Work requests (chunk writes) the rail completed.");
    rail_u64(b, RR_TEL_M_REQUESTS, cfg, ss, n, offsetof(rr_tel_series, requests));
    family(b, RR_TEL_M_LATENCY, "summary",
           "Post-to-completion time of the rail's requests; quantiles over the last interval with "
           "traffic (a bounded uniform sample).");
    static const char *const qs[3] = {"0.5", "0.9", "0.99"};
    for (int i = 0; i < n; i++) {
      const rr_tel_series *s = ss[i];
      if (s->have_q)
        for (int k = 0; k < 3; k++) {
          rail_head(b, RR_TEL_M_LATENCY, cfg, s, "quantile", qs[k]);
          rr_tel_buf_printf(b, "%.9g\n", (double)s->q_ns[k] / 1e9);
        }
      rail_head(b, RR_TEL_M_LATENCY "_sum", cfg, s, NULL, NULL);
      rr_tel_buf_printf(b, "%.9f\n", (double)s->lat_sum_ns / 1e9);
      rail_head(b, RR_TEL_M_LATENCY "_count", cfg, s, NULL, NULL);
      rr_tel_buf_printf(b, "%llu\n", (unsigned long long)s->requests);
    }
    family(b, RR_TEL_M_ANOMALIES, "counter",
           "Throughput drops below RERAIL_TELEMETRY_ANOMALY percent of the recent average.");
    rail_u64(b, RR_TEL_M_ANOMALIES, cfg, ss, n, offsetof(rr_tel_series, anomalies));
    family(b, RR_TEL_M_DROPPED, "counter",
           "Samples the data path dropped because the exporter had not drained the ring.");
    rail_u64(b, RR_TEL_M_DROPPED, cfg, ss, n, offsetof(rr_tel_series, drops));
    family(b, RR_TEL_M_MESSAGES, "counter",
           "Messages finished on the rail: counted where a message's last chunk went (tx: its write "
           "posted) or landed (rx); the denominator of the queue-work series.");
    rail_u64(b, RR_TEL_M_MESSAGES, cfg, ss, n, offsetof(rr_tel_series, messages));
    rail_cost(b, RR_TEL_M_DOORBELLS,
              "Doorbells the host rang on the rail's queue pairs: ibv_post_send (queue send) and "
              "ibv_post_recv (queue recv) calls, a chained list counting once. 0 on TCP rails.",
              cfg, ss, n, RR_TEL_COST_DOORBELLS_SEND, RR_TEL_COST_DOORBELLS_RECV);
    rail_cost(b, RR_TEL_M_WORK_REQUESTS,
              "Work requests posted on the rail's queue pairs (writes, ring writes, NOPs, drains; "
              "receives). 0 on TCP rails.",
              cfg, ss, n, RR_TEL_COST_WRS_SEND, RR_TEL_COST_WRS_RECV);
    rail_cost(b, RR_TEL_M_COMPLETIONS,
              "Work completions polled for the rail: signalled send requests (queue send) and "
              "receives (queue recv). 0 on TCP rails.",
              cfg, ss, n, RR_TEL_COST_CQES_SEND, RR_TEL_COST_CQES_RECV);
  }

  int nstate = 0;
  for (int i = 0; i < t->nlinks; i++) nstate += t->links[i].state >= 0;
  if (nstate) {
    family(b, RR_TEL_M_RAIL_STATE, "gauge",
           "Last reported state of the rail over nic to peer: 0 up, 1 degraded, 2 down, 3 recovering.");
    for (int i = 0; i < t->nlinks; i++)
      if (t->links[i].state >= 0) {
        link_head(b, RR_TEL_M_RAIL_STATE, cfg, &t->links[i]);
        rr_tel_buf_printf(b, "%d\n", t->links[i].state);
      }
  }
  if (t->nlinks) {
    family(b, RR_TEL_M_FAILOVERS, "counter", "Failovers that moved traffic to peer off nic.");
    for (int i = 0; i < t->nlinks; i++) {
      link_head(b, RR_TEL_M_FAILOVERS, cfg, &t->links[i]);
      rr_tel_buf_printf(b, "%llu\n", (unsigned long long)t->links[i].failovers);
    }
    family(b, RR_TEL_M_FAILBACKS, "counter", "Fail-backs that returned traffic to peer onto nic.");
    for (int i = 0; i < t->nlinks; i++) {
      link_head(b, RR_TEL_M_FAILBACKS, cfg, &t->links[i]);
      rr_tel_buf_printf(b, "%llu\n", (unsigned long long)t->links[i].failbacks);
    }
    family(b, RR_TEL_M_FAULTS, "counter",
           "Failures and demotions of the rail over nic to peer, by where the fault is: local (this "
           "host's NIC), peer (the peer's NIC), path (between two working ends), process (the peer died).");
    for (int i = 0; i < t->nlinks; i++)
      for (int w = RR_WHERE_LOCAL; w < RR_WHERE_COUNT; w++) {
        rr_tel_buf_printf(b, "%s{", RR_TEL_M_FAULTS);
        proc_labels(b, cfg);
        label(b, "nic", t->links[i].nic, 0);
        label(b, "peer", t->links[i].peer, 0);
        label(b, "where", rr_fault_where_str((rr_fault_where)w), 0);
        rr_tel_buf_printf(b, "} %llu\n", (unsigned long long)t->links[i].faults[w]);
      }
    family(b, RR_TEL_M_DEGRADED, "gauge",
           "1 while the rail over nic to peer is demoted (up, but delivering a fraction of its rate).");
    for (int i = 0; i < t->nlinks; i++) {
      link_head(b, RR_TEL_M_DEGRADED, cfg, &t->links[i]);
      rr_tel_buf_printf(b, "%d\n", t->links[i].state == RR_LINK_DEGRADED);
    }
    family(b, RR_TEL_M_DEMOTIONS, "counter", "Demotions of the rail over nic to peer as degraded.");
    for (int i = 0; i < t->nlinks; i++) {
      link_head(b, RR_TEL_M_DEMOTIONS, cfg, &t->links[i]);
      rr_tel_buf_printf(b, "%llu\n", (unsigned long long)t->links[i].demotions);
    }
  }
  if (t->nnics) {
    family(b, RR_TEL_M_NIC_STATE, "gauge",
           "Last reported state of the local NIC: 0 up, 1 degraded, 2 down, 3 recovering.");
    for (int i = 0; i < t->nnics; i++) {
      rr_tel_buf_printf(b, "%s{", RR_TEL_M_NIC_STATE);
      proc_labels(b, cfg);
      label(b, "nic", t->nics[i].nic, 0);
      rr_tel_buf_printf(b, "} %d\n", t->nics[i].state);
    }
  }
  nic_info(b, cfg);
  /* The process's engine counters (rr_counters.h), every one from the first
   * export: a series that appears at 1 hides its first increment from rate(). */
  const char *prev = NULL;
  for (int c = 0; c < RR_CTR_COUNT; c++) {
    const rr_counter_info *ci = rr_counter_info_of((rr_counter)c);
    if (!ci->in_prom) continue;
    char name[96];
    snprintf(name, sizeof name, "rerail_%s", ci->name);
    if (!prev || strcmp(ci->name, prev)) family(b, name, "counter", ci->help); /* a family's members are adjacent */
    prev = ci->name;
    rr_tel_buf_printf(b, "%s{", name);
    proc_labels(b, cfg);
    if (ci->label) label(b, ci->label, ci->value, 0);
    char v[32];
    rr_counter_format_value(v, sizeof v, (rr_counter)c);
    rr_tel_buf_printf(b, "} %s\n", v);
  }
  if (t->npeers) {
    family(b, RR_TEL_M_ERRORS, "counter", "Connections to peer that failed for good (no rail left, peer dead).");
    for (int i = 0; i < t->npeers; i++) {
      rr_tel_buf_printf(b, "%s{", RR_TEL_M_ERRORS);
      proc_labels(b, cfg);
      label(b, "peer", t->peers[i].peer, 0);
      rr_tel_buf_printf(b, "} %llu\n", (unsigned long long)t->peers[i].errors);
    }
  }
  family(b, RR_TEL_M_EVENTS, "counter", "Health events seen, by kind.");
  for (int k = RR_HEV_NIC_STATE; k <= RR_HEV_ANOMALY; k++) {
    rr_tel_buf_printf(b, "%s{", RR_TEL_M_EVENTS);
    proc_labels(b, cfg);
    label(b, "kind", rr_health_event_str((rr_health_event_kind)k), 0);
    rr_tel_buf_printf(b, "} %llu\n", (unsigned long long)t->events_by_kind[k]);
  }
  family(b, RR_TEL_M_DROPPED_EVENTS, "counter",
         "Health events not written to the event log (queue full, file not writable, table full).");
  rr_tel_buf_printf(b, "%s{", RR_TEL_M_DROPPED_EVENTS);
  proc_labels(b, cfg);
  rr_tel_buf_printf(b, "} %llu\n", (unsigned long long)t->events_dropped);
  family(b, RR_TEL_M_WINDOW, "gauge", "Requests per throughput window (RERAIL_TELEMETRY_WINDOW).");
  rr_tel_buf_printf(b, "%s{", RR_TEL_M_WINDOW);
  proc_labels(b, cfg);
  rr_tel_buf_printf(b, "} %u\n", cfg->window);
  family(b, RR_TEL_M_LAST_EXPORT, "gauge", "Unix time at which this file was written.");
  rr_tel_buf_printf(b, "%s{", RR_TEL_M_LAST_EXPORT);
  proc_labels(b, cfg);
  rr_tel_buf_printf(b, "} %.3f\n", (double)wall_ns / 1e9);
}
