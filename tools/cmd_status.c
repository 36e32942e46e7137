/* rerail status [--json] [--all] [--path P] [--dir D]
 * rerail status --cost [--json] [--dir D]
 *
 * The host's shared health table as an operator reads it: one line per NIC
 * of every process running the rerail net plugin (state, how long, failovers,
 * throughput, latency, why) and the rails to remote peers this host saw
 * degrade or fail. Rows of processes that exited or stopped reporting are
 * counted, not shown (--all shows them, marked). --json prints the same as
 * one JSON object for scripts. Each NIC's transport (verbs with its RDMA
 * device, or tcp) comes from its process's telemetry file in D, when that
 * process exports one there (status_transport.c).
 *
 * Rails out of service are listed with why and where (local, peer, path,
 * process: the plugin's conclusion, at the end of the reason). One thing
 * only a reader of the whole host can conclude is added here: a NIC whose
 * rails to every peer it serves (two or more) are down or degraded is this
 * host's NIC or port (status_where.c).
 *
 * --cost shows, instead of the table, each rail's queue work per message
 * (doorbells, work requests, completions, each per queue) from the telemetry
 * files in D (status_cost.c): what issue 25 compares with NCCL's own IB
 * transport. It reads no health table.
 *
 * Exit status: 0 when the table was read, or when there is no job on this
 * host (no table, or only rows of processes that are gone): that is a normal
 * state of a host, not an error. 1 when the table exists but cannot be read
 * or cannot be trusted; 2 for bad usage. */
#include "rr_nic_state.h"
#include "rr_health_table.h"
#include "status_cost.h"
#include "status_transport.h"
#include "status_where.h"
#include "tel_files.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int cmd_status(int argc, char **argv);

static int status_usage(FILE *out) {
  fprintf(out, "usage: rerail status [--json] [--all] [--path P] [--dir D]\n"
               "       rerail status --cost [--json] [--dir D]\n"
               "  --json    one JSON object instead of tables\n"
               "  --all     also rows of processes that exited or stopped reporting\n"
               "  --path P  the health table (default: RERAIL_HEALTH_PATH or %s)\n"
               "  --dir D   telemetry files to read each NIC's transport from (default:\n"
               "            RERAIL_TELEMETRY_DIR or the node_exporter textfile directory)\n"
               "  --cost    each rail's queue work per message (doorbells, work requests,\n"
               "            completions) from the telemetry files in D, instead of the table\n",
          RR_HT_DEFAULT_PATH);
  return out == stderr ? 2 : 0;
}

/* ---- text ------------------------------------------------------------------------ */

static const char *state_str(uint32_t st) { return rr_link_state_str((rr_link_state)st); }

static const char *liveness_str(rr_ht_liveness l) {
  return l == RR_HT_LIVE ? "live" : l == RR_HT_GONE ? "gone" : "aged";
}

/* "42s", "3m12s", "2h05m", "3d04h"; "-" when unknown. */
static const char *ago(uint64_t then_ns, uint64_t now_ns, char *buf, size_t len) {
  if (!then_ns) return "-";
  uint64_t s = now_ns > then_ns ? (now_ns - then_ns) / 1000000000ull : 0;
  if (s < 60) snprintf(buf, len, "%" PRIu64 "s", s);
  else if (s < 3600) snprintf(buf, len, "%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
  else if (s < 86400) snprintf(buf, len, "%" PRIu64 "h%02" PRIu64 "m", s / 3600, s % 3600 / 60);
  else snprintf(buf, len, "%" PRIu64 "d%02" PRIu64 "h", s / 86400, s % 86400 / 3600);
  return buf;
}

static const char *mbps(uint64_t bytes_per_s, char *buf, size_t len) {
  snprintf(buf, len, "%.1f", (double)bytes_per_s / 1e6);
  return buf;
}

static const char *lat(const rr_ht_figures *f, char *buf, size_t len) {
  if (!f->p50_ns && !f->p99_ns) return "-";
  snprintf(buf, len, "%.1f/%.1f", (double)f->p50_ns / 1e3, (double)f->p99_ns / 1e3);
  return buf;
}

/* "down", or "down,gone" / "down,aged" for rows that are not live; "?" for
 * the state of a row torn by its writer's death. */
static void state_cell(char *buf, size_t len, int torn, uint32_t st, rr_ht_liveness l) {
  snprintf(buf, len, "%s%s%s", torn ? "?" : state_str(st), l == RR_HT_LIVE ? "" : ",",
           l == RR_HT_LIVE ? "" : liveness_str(l));
}

/* "verbs rxe0:1", "tcp", or "-" when the process exports no telemetry to dir. */
static const char *transport_cell(const char *dir, const rr_ht_nic_row *r, char *buf, size_t len) {
  status_transport t;
  if (!status_transport_of(dir, r->pid, r->ifname, &t)) return "-";
  if (t.rdma_device[0]) snprintf(buf, len, "%s %s:%d", t.transport, t.rdma_device, t.rdma_port);
  else snprintf(buf, len, "%s", t.transport);
  return buf;
}

#define MAX_REACH 256

static const status_nic_reach *reach_of(const status_nic_reach *reach, int n, const char *nic) {
  for (int i = 0; i < n; i++)
    if (!strncmp(reach[i].nic, nic, sizeof reach[i].nic)) return &reach[i];
  return NULL;
}

/* The rails out of service, each with why and where, and the NICs that fail
 * towards every peer they serve. */
static void print_faults(const rr_ht_snapshot *s, int all, const status_nic_reach *reach, int nreach) {
  int header = 0;
  for (int i = 0; i < s->peer_count; i++) {
    const rr_ht_peer_entry *e = &s->peer[i];
    const rr_ht_peer_row *r = &e->row;
    if (e->torn || (e->liveness != RR_HT_LIVE && !all)) continue;
    if (r->state != RR_HT_DEGRADED && r->state != RR_HT_DOWN) continue;
    if (!header++) printf("\nRAILS OUT OF SERVICE (why; where the fault is)\n");
    const status_nic_reach *nr = reach_of(reach, nreach, r->ifname);
    printf("  %s %s -> %s (pid %u): %s%s\n", r->state == RR_HT_DEGRADED ? "DEGRADED" : "DOWN    ",
           r->ifname[0] ? r->ifname : "?", r->peer[0] ? r->peer : "?", r->pid, r->reason[0] ? r->reason : "-",
           nr && status_nic_fails_everywhere(nr) ? "; local: the NIC fails towards every peer" : "");
  }
  for (int i = 0; i < nreach; i++)
    if (status_nic_fails_everywhere(&reach[i]))
      printf("\nNIC %s fails towards every peer it serves (%d of %d): local (this host's NIC or port)\n",
             reach[i].nic, reach[i].failing, reach[i].served);
}

static void print_text(const char *path, const char *dir, const rr_ht_snapshot *s, int all) {
  int stale_nics = s->nic_count - s->live_nics, stale_peers = s->peer_count - s->live_peers;
  printf("health table %s: %d NIC row(s) live, %d peer rail(s) live\n", path, s->live_nics,
         s->live_peers);
  char a[32], b[32], c[32], d[32], e2[32];
  if (s->live_nics || (all && s->nic_count)) {
    printf("\n%-10s %-4s %-8s %-10s %-8s %-9s %-9s %-6s %-9s %-9s %-13s %-13s %-15s %s\n", "NIC", "DEV",
           "PID", "STATE", "SINCE", "FAILOVERS", "FAILBACKS", "ERRORS", "TX_MB/s", "RX_MB/s",
           "TX_p50/p99us", "RX_p50/p99us", "TRANSPORT", "REASON");
    for (int i = 0; i < s->nic_count; i++) {
      const rr_ht_nic_entry *e = &s->nic[i];
      if (e->liveness != RR_HT_LIVE && !all) continue;
      const rr_ht_nic_row *r = &e->row;
      char st[32], fo[48], tr[64];
      state_cell(st, sizeof st, e->torn, r->state, e->liveness);
      snprintf(fo, sizeof fo, "%" PRIu64 "/%" PRIu64, r->failovers_from, r->failovers_to);
      printf("%-10s %-4d %-8u %-10s %-8s %-9s %-9" PRIu64 " %-6" PRIu64 " %-9s %-9s %-13s %-13s %-15s %s\n",
             r->ifname[0] ? r->ifname : "?", r->dev, r->pid, st, ago(r->since_ns, s->taken_ns, a, sizeof a),
             fo, r->failbacks, r->errors, mbps(r->tx.bytes_per_s, b, sizeof b),
             mbps(r->rx.bytes_per_s, c, sizeof c), lat(&r->tx, d, sizeof d),
             lat(&r->rx, e2, sizeof e2), transport_cell(dir, r, tr, sizeof tr), r->reason[0] ? r->reason : "-");
    }
    printf("(FAILOVERS: traffic moved off/onto the NIC; SINCE: time in this state; TRANSPORT: from\n"
           " the process's telemetry file in %s, \"-\" when it exports none there)\n", dir);
  }
  if (s->live_peers || (all && s->peer_count)) {
    printf("\nPEER RAILS (rails to remote peers this host saw degrade or fail)\n");
    printf("%-10s %-40s %-14s %-8s %-8s %-8s %s\n", "LOCAL", "PEER", "STATE", "SINCE", "CHANGES",
           "PID", "REASON");
    for (int i = 0; i < s->peer_count; i++) {
      const rr_ht_peer_entry *e = &s->peer[i];
      if (e->liveness != RR_HT_LIVE && !all) continue;
      const rr_ht_peer_row *r = &e->row;
      char st[32];
      state_cell(st, sizeof st, e->torn, r->state, e->liveness);
      printf("%-10s %-40s %-14s %-8s %-8" PRIu64 " %-8u %s\n", r->ifname[0] ? r->ifname : "?",
             r->peer[0] ? r->peer : "?", st, ago(r->since_ns, s->taken_ns, a, sizeof a), r->changes,
             r->pid, r->reason[0] ? r->reason : "-");
    }
  }
  status_nic_reach reach[MAX_REACH];
  int nreach = status_nic_reach_of(dir, s, all, reach, MAX_REACH);
  print_faults(s, all, reach, nreach);
  if ((stale_nics || stale_peers) && !all)
    printf("\n%d NIC row(s) and %d peer row(s) of processes that exited or stopped reporting "
           "(no heartbeat for %.0f s) not shown: --all shows them\n",
           stale_nics, stale_peers, (double)s->stale_after_ns / 1e9);
  if (s->torn_skipped)
    printf("%d row(s) were being written through every retry and are not shown\n", s->torn_skipped);
  if (s->invalid_skipped) printf("%d row(s) hold impossible values and are not shown\n", s->invalid_skipped);
}

/* ---- JSON ------------------------------------------------------------------------ */

static void json_str(const char *s) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') printf("\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f) printf("\\u%04x", *p);
    else putchar(*p);
  }
  putchar('"');
}

static void json_figures(const char *name, const rr_ht_figures *f) {
  printf("\"%s\":{\"bytes_per_s\":%" PRIu64 ",\"p50_ns\":%" PRIu64 ",\"p99_ns\":%" PRIu64 "}", name,
         f->bytes_per_s, f->p50_ns, f->p99_ns);
}

static void print_json(const char *path, const char *dir, const rr_ht_snapshot *s, int all) {
  printf("{\"path\":");
  json_str(path);
  printf(",\"job\":%s,\"layout_version\":%u,\"created_ns\":%" PRIu64 ",\"taken_ns\":%" PRIu64
         ",\"stale_after_ms\":%" PRIu64 ",\"live_nics\":%d,\"live_peer_rails\":%d,"
         "\"stale_rows\":%d,\"torn_skipped\":%d,\"invalid_skipped\":%d,\"nics\":[",
         s->live_nics || s->live_peers ? "true" : "false", s->header.version, s->header.created_ns,
         s->taken_ns, (uint64_t)(s->stale_after_ns / 1000000u), s->live_nics, s->live_peers,
         s->nic_count - s->live_nics + s->peer_count - s->live_peers, s->torn_skipped,
         s->invalid_skipped);
  int n = 0;
  for (int i = 0; i < s->nic_count; i++) {
    const rr_ht_nic_entry *e = &s->nic[i];
    const rr_ht_nic_row *r = &e->row;
    if (e->liveness != RR_HT_LIVE && !all) continue;
    printf("%s{\"ifname\":", n++ ? "," : "");
    json_str(r->ifname);
    printf(",\"dev\":%d,\"pid\":%u,\"start_time\":%" PRIu64 ",\"state\":\"%s\",\"liveness\":\"%s\","
           "\"torn\":%s,\"heartbeat_age_ms\":%" PRIu64 ",\"since_ns\":%" PRIu64
           ",\"state_changes\":%" PRIu64 ",\"failovers_from\":%" PRIu64 ",\"failovers_to\":%" PRIu64
           ",\"failbacks\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"figures_ns\":%" PRIu64 ",",
           r->dev, r->pid, r->start_time, state_str(r->state), liveness_str(e->liveness),
           e->torn ? "true" : "false", (uint64_t)(e->heartbeat_age_ns / 1000000u), r->since_ns,
           r->state_changes, r->failovers_from, r->failovers_to, r->failbacks, r->errors,
           r->figures_ns);
    json_figures("tx", &r->tx);
    putchar(',');
    json_figures("rx", &r->rx);
    status_transport t;
    if (status_transport_of(dir, r->pid, r->ifname, &t)) {
      printf(",\"transport\":");
      json_str(t.transport);
      printf(",\"rdma_device\":");
      if (t.rdma_device[0]) json_str(t.rdma_device);
      else printf("null");
      printf(",\"rdma_port\":%d", t.rdma_port);
    } else {
      printf(",\"transport\":null,\"rdma_device\":null,\"rdma_port\":null");
    }
    printf(",\"reason\":");
    json_str(r->reason);
    putchar('}');
  }
  status_nic_reach reach[MAX_REACH];
  int nreach = status_nic_reach_of(dir, s, all, reach, MAX_REACH);
  printf("],\"nic_reach\":[");
  for (int i = 0; i < nreach; i++) {
    printf("%s{\"nic\":", i ? "," : "");
    json_str(reach[i].nic);
    printf(",\"peers_served\":%d,\"peers_failing\":%d,\"fails_towards_every_peer\":%s}", reach[i].served,
           reach[i].failing, status_nic_fails_everywhere(&reach[i]) ? "true" : "false");
  }
  printf("],\"peer_rails\":[");
  n = 0;
  for (int i = 0; i < s->peer_count; i++) {
    const rr_ht_peer_entry *e = &s->peer[i];
    const rr_ht_peer_row *r = &e->row;
    if (e->liveness != RR_HT_LIVE && !all) continue;
    printf("%s{\"ifname\":", n++ ? "," : "");
    json_str(r->ifname);
    printf(",\"peer\":");
    json_str(r->peer);
    printf(",\"dev\":%d,\"pid\":%u,\"state\":\"%s\",\"liveness\":\"%s\",\"torn\":%s,"
           "\"heartbeat_age_ms\":%" PRIu64 ",\"since_ns\":%" PRIu64 ",\"changes\":%" PRIu64
           ",\"reason\":",
           r->dev, r->pid, state_str(r->state), liveness_str(e->liveness),
           e->torn ? "true" : "false", (uint64_t)(e->heartbeat_age_ns / 1000000u), r->since_ns, r->changes);
    json_str(r->reason);
    const status_nic_reach *nr = reach_of(reach, nreach, r->ifname);
    printf(",\"nic_fails_towards_every_peer\":%s", nr && status_nic_fails_everywhere(nr) ? "true" : "false");
    putchar('}');
  }
  printf("]}\n");
}

/* ---- queue work per message (--cost) ------------------------------------------------ */

#define MAX_COST_ROWS 4096

static const char *per_msg(uint64_t v, uint64_t msgs, char *buf, size_t len) {
  double r = status_cost_per_msg(v, msgs);
  if (r < 0) return "-";
  snprintf(buf, len, "%.2f", r);
  return buf;
}

static void json_per_msg(uint64_t v, uint64_t msgs) {
  double r = status_cost_per_msg(v, msgs);
  if (r < 0) printf("null");
  else printf("%.4f", r);
}

static void json_pair(const char *name, const uint64_t q[2], uint64_t msgs) {
  printf(",\"%s\":{\"send\":%" PRIu64 ",\"recv\":%" PRIu64 ",\"send_per_message\":", name, q[STATUS_Q_SEND],
         q[STATUS_Q_RECV]);
  json_per_msg(q[STATUS_Q_SEND], msgs);
  printf(",\"recv_per_message\":");
  json_per_msg(q[STATUS_Q_RECV], msgs);
  putchar('}');
}

static int print_cost(const char *dir, int json) {
  static status_cost_row rows[MAX_COST_ROWS];
  int n = status_cost_read(dir, rows, MAX_COST_ROWS);
  if (json) {
    printf("{\"dir\":");
    json_str(dir);
    printf(",\"readable\":%s,\"rails\":[", n < 0 ? "false" : "true");
    for (int i = 0; i < n; i++) {
      const status_cost_row *r = &rows[i];
      printf("%s{\"pid\":%ld,\"nic\":", i ? "," : "", r->pid);
      json_str(r->nic);
      printf(",\"peer\":");
      json_str(r->peer);
      printf(",\"rail\":%d,\"direction\":", r->rail);
      json_str(r->dir);
      printf(",\"messages\":%" PRIu64, r->messages);
      json_pair("doorbells", r->doorbells, r->messages);
      json_pair("work_requests", r->work_requests, r->messages);
      json_pair("completions", r->completions, r->messages);
      putchar('}');
    }
    printf("]}\n");
    return 0;
  }
  if (n <= 0) {
    printf("no rerail telemetry with queue counters in %s\n", dir);
    return 0;
  }
  printf("QUEUE WORK PER MESSAGE (telemetry files in %s)\n", dir);
  printf("%-8s %-10s %-24s %-4s %-3s %-10s %-15s %-15s %-15s\n", "", "", "", "", "", "",
         "DOORBELLS/MSG", "WORK_REQS/MSG", "COMPLETIONS/MSG");
  printf("%-8s %-10s %-24s %-4s %-3s %-10s %-7s %-7s %-7s %-7s %-7s %-7s\n", "PID", "NIC", "PEER", "RAIL", "DIR",
         "MESSAGES", "send", "recv", "send", "recv", "send", "recv");
  for (int i = 0; i < n; i++) {
    const status_cost_row *r = &rows[i];
    char b[6][32];
    printf("%-8ld %-10s %-24s %-4d %-3s %-10" PRIu64 " %-7s %-7s %-7s %-7s %-7s %-7s\n", r->pid, r->nic, r->peer,
           r->rail, r->dir, r->messages, per_msg(r->doorbells[STATUS_Q_SEND], r->messages, b[0], sizeof b[0]),
           per_msg(r->doorbells[STATUS_Q_RECV], r->messages, b[1], sizeof b[1]),
           per_msg(r->work_requests[STATUS_Q_SEND], r->messages, b[2], sizeof b[2]),
           per_msg(r->work_requests[STATUS_Q_RECV], r->messages, b[3], sizeof b[3]),
           per_msg(r->completions[STATUS_Q_SEND], r->messages, b[4], sizeof b[4]),
           per_msg(r->completions[STATUS_Q_RECV], r->messages, b[5], sizeof b[5]));
  }
  printf("(MESSAGES: finished on the rail, counted where the last chunk went (tx) or landed (rx);\n"
         " the rest are totals since the process started over them, \"-\" before the first message.\n"
         " Completions: signalled sends, receives. TCP rails have no queues: 0)\n");
  return 0;
}

/* ---- the command ------------------------------------------------------------------ */

int cmd_status(int argc, char **argv) {
  int json = 0, all = 0, cost = 0;
  const char *path = NULL, *dir = tel_dir(NULL);
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--all")) all = 1;
    else if (!strcmp(argv[i], "--cost")) cost = 1;
    else if (!strcmp(argv[i], "--path") && i + 1 < argc) path = argv[++i];
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = tel_dir(argv[++i]);
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return status_usage(stdout);
    else {
      fprintf(stderr, "rerail status: unknown argument '%s'\n", argv[i]);
      return status_usage(stderr);
    }
  }
  if (cost) return print_cost(dir, json);
  if (!path) path = rr_health_table_path();
  rr_ht_snapshot s;
  rr_status st = rr_health_table_read(path, &s);
  /* A row whose writer was inside a write through every retry of the
   * reader (preempted on a loaded host) is skipped from that snapshot: take
   * a fresh one, a little later, before showing a table with rows missing. */
  for (int again = 0; st == RR_OK && s.torn_skipped > 0 && again < 10; again++) {
    rr_health_table_snapshot_free(&s);
    usleep(100 * 1000);
    st = rr_health_table_read(path, &s);
  }
  int rc = 0;
  if (st != RR_OK) {
    int no_job = s.problem == RR_HT_ABSENT;
    if (json) {
      printf("{\"path\":");
      json_str(path);
      printf(",\"job\":false,\"problem\":\"%s\",\"detail\":", rr_ht_problem_str(s.problem));
      json_str(s.detail);
      printf("}\n");
    } else if (no_job) {
      printf("no rerail job on this host (no health table at %s)\n", path);
    } else {
      fprintf(stderr, "rerail status: health table %s: %s (%s)\n", path,
              rr_ht_problem_str(s.problem), s.detail);
    }
    rc = no_job ? 0 : 1;
  } else if (json) {
    print_json(path, dir, &s, all);
  } else if (!s.live_nics && !s.live_peers) {
    printf("no rerail job on this host (%s holds %s)\n", path,
           s.nic_count || s.peer_count
               ? "only rows of processes that exited or stopped reporting"
               : "no rows");
    if (all && (s.nic_count || s.peer_count)) print_text(path, dir, &s, all);
  } else {
    print_text(path, dir, &s, all);
  }
  rr_health_table_snapshot_free(&s);
  return rc;
}
