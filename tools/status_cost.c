/* Per-message queue work of every rail, read from the telemetry files.
 * A sample line is
 *   rerail_rail_doorbells_total{host="h",pid="7",nic="vethA0",peer="10.55.0.2",rail="0",direction="tx",queue="send"} 42
 * Values are copied only up to the closing quote and the buffer's size
 * (status_prom_label); a line that does not parse is ignored. */
#include "status_cost.h"
#include "status_transport.h"
#include "tel_files.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum family { F_MESSAGES, F_DOORBELLS, F_WORK_REQUESTS, F_COMPLETIONS, F_COUNT };
static const char *const family_name[F_COUNT] = {
    "rerail_rail_messages_total{", "rerail_rail_doorbells_total{", "rerail_rail_work_requests_total{",
    "rerail_rail_completions_total{"};

static status_cost_row *row_for(status_cost_row *rows, int *n, int max, const status_cost_row *key) {
  for (int i = 0; i < *n; i++)
    if (rows[i].pid == key->pid && rows[i].rail == key->rail && !strcmp(rows[i].nic, key->nic) &&
        !strcmp(rows[i].peer, key->peer) && !strcmp(rows[i].dir, key->dir))
      return &rows[i];
  if (*n >= max) return NULL;
  status_cost_row *r = &rows[(*n)++];
  memset(r, 0, sizeof *r);
  r->pid = key->pid;
  r->rail = key->rail;
  memcpy(r->nic, key->nic, sizeof r->nic);
  memcpy(r->peer, key->peer, sizeof r->peer);
  memcpy(r->dir, key->dir, sizeof r->dir);
  return r;
}

/* A whole decimal number, as a label or a sample value holds one. */
static int parse_u64(const char *s, const char *end, uint64_t *out) {
  if (s >= end || *s < '0' || *s > '9') return 0;
  uint64_t v = 0;
  for (; s < end && *s >= '0' && *s <= '9'; s++) {
    if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return 0;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  *out = v;
  return s == end;
}

static int parse_line(const char *l, const char *eol, status_cost_row *rows, int *n, int max) {
  int f = 0;
  while (f < F_COUNT && strncmp(l, family_name[f], strlen(family_name[f]))) f++;
  if (f == F_COUNT) return 0;
  const char *end = memchr(l, '}', (size_t)(eol - l));
  if (!end) return 0;
  status_cost_row key;
  memset(&key, 0, sizeof key);
  char pid[24], rail[16], queue[8] = "";
  uint64_t pidv, railv, value;
  if (!status_prom_label(l, end, "pid", pid, sizeof pid) || !parse_u64(pid, pid + strlen(pid), &pidv) ||
      !status_prom_label(l, end, "nic", key.nic, sizeof key.nic) ||
      !status_prom_label(l, end, "peer", key.peer, sizeof key.peer) ||
      !status_prom_label(l, end, "rail", rail, sizeof rail) || !parse_u64(rail, rail + strlen(rail), &railv) ||
      !status_prom_label(l, end, "direction", key.dir, sizeof key.dir) || pidv > 0x7fffffff || railv > 1024)
    return 0;
  const char *v = end + 1;
  while (v < eol && *v == ' ') v++;
  const char *ve = v;
  while (ve < eol && *ve != ' ' && *ve != '\r') ve++;
  if (!parse_u64(v, ve, &value)) return 0;
  int q = -1;
  if (f != F_MESSAGES) {
    if (!status_prom_label(l, end, "queue", queue, sizeof queue)) return 0;
    if (!strcmp(queue, "send")) q = STATUS_Q_SEND;
    else if (!strcmp(queue, "recv")) q = STATUS_Q_RECV;
    else return 0;
  }
  key.pid = (long)pidv;
  key.rail = (int)railv;
  status_cost_row *r = row_for(rows, n, max, &key);
  if (!r) return 0;
  switch (f) {
  case F_MESSAGES: r->messages = value; break;
  case F_DOORBELLS: r->doorbells[q] = value; break;
  case F_WORK_REQUESTS: r->work_requests[q] = value; break;
  default: r->completions[q] = value; break;
  }
  return 1;
}

int status_cost_parse(const char *text, status_cost_row *rows, int *n, int max) {
  int used = 0;
  for (const char *l = text; l && *l;) {
    const char *eol = strchr(l, '\n');
    if (!eol) eol = l + strlen(l);
    used += parse_line(l, eol, rows, n, max);
    l = *eol ? eol + 1 : NULL;
  }
  return used;
}

int status_cost_read(const char *dir, status_cost_row *rows, int max) {
  char **names = NULL;
  int nf = tel_list(dir, "rerail-", ".prom", &names), n = 0;
  if (nf < 0) return -1;
  for (int i = 0; i < nf; i++) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path) continue;
    char *text = tel_slurp(path, NULL);
    if (text) status_cost_parse(text, rows, &n, max);
    free(text);
  }
  tel_list_free(names, nf);
  return n;
}

double status_cost_per_msg(uint64_t v, uint64_t messages) {
  return messages ? (double)v / (double)messages : -1.0;
}
