/* Host-wide fault placement for `rerail status` (status_where.h). */
#include "status_where.h"
#include "status_transport.h"
#include "tel_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RAILS 1024      /* distinct (nic, peer) pairs considered */

typedef struct rail_key {
  char nic[16];
  char peer[64];
} rail_key;

static int rail_index(const rail_key *rails, int n, const char *nic, const char *peer) {
  for (int i = 0; i < n; i++)
    if (!strcmp(rails[i].nic, nic) && !strcmp(rails[i].peer, peer)) return i;
  return -1;
}

/* The rails process pid's telemetry file names, added to rails[]. */
static int rails_of_pid(const char *dir, uint32_t pid, rail_key *rails, int n) {
  static const char metric[] = "rerail_rail_degraded{";
  char **names = NULL, suffix[24];
  snprintf(suffix, sizeof suffix, "-%u.prom", pid);
  int nf = tel_list(dir, "rerail-", suffix, &names);
  for (int f = 0; f < nf; f++) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, names[f]) >= (int)sizeof path) continue;
    char *text = tel_slurp(path, NULL);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
      if (strncmp(l, metric, sizeof metric - 1) != 0) continue;
      const char *end = strchr(l, '}'), *eol = strchr(l, '\n');
      if (!end || (eol && eol < end)) continue;
      rail_key k;
      if (!status_prom_label(l, end, "nic", k.nic, sizeof k.nic) ||
          !status_prom_label(l, end, "peer", k.peer, sizeof k.peer) || !k.nic[0] || !k.peer[0])
        continue;
      /* A peer counts once per NIC, however many processes reach it. */
      if (n < MAX_RAILS && rail_index(rails, n, k.nic, k.peer) < 0) rails[n++] = k;
    }
    free(text);
  }
  tel_list_free(names, nf > 0 ? nf : 0);
  return n;
}

int status_nic_reach_of(const char *dir, const rr_ht_snapshot *s, int all, status_nic_reach *out, int max) {
  rail_key *rails = calloc(MAX_RAILS, sizeof *rails);
  if (!rails) return 0;
  int nrails = 0;
  /* Each live process once: its NIC rows name it. */
  for (int i = 0; i < s->nic_count; i++) {
    const rr_ht_nic_entry *e = &s->nic[i];
    if (e->torn || (e->liveness != RR_HT_LIVE && !all)) continue;
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = s->nic[j].row.pid == e->row.pid;
    if (!seen) nrails = rails_of_pid(dir, e->row.pid, rails, nrails);
  }
  int n = 0;
  for (int r = 0; r < nrails; r++) {
    /* The latest row of this host about the rail says whether it fails now
     * (rows stay, marked up, after a rail healed). */
    const rr_ht_peer_row *latest = NULL;
    for (int i = 0; i < s->peer_count; i++) {
      const rr_ht_peer_entry *e = &s->peer[i];
      if (e->torn || (e->liveness != RR_HT_LIVE && !all)) continue;
      if (strncmp(e->row.ifname, rails[r].nic, sizeof e->row.ifname) ||
          strncmp(e->row.peer, rails[r].peer, sizeof e->row.peer))
        continue;
      if (!latest || e->row.since_ns > latest->since_ns) latest = &e->row;
    }
    int failing = latest && (latest->state == RR_HT_DOWN || latest->state == RR_HT_DEGRADED);
    int k = 0;
    while (k < n && strcmp(out[k].nic, rails[r].nic)) k++;
    if (k == n) {
      if (n == max) continue;
      memset(&out[n], 0, sizeof out[n]);
      snprintf(out[n].nic, sizeof out[n].nic, "%s", rails[r].nic);
      n++;
    }
    out[k].served++;
    out[k].failing += failing;
  }
  free(rails);
  return n;
}
