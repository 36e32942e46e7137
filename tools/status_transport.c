/* A NIC row's transport from its process's telemetry file
 * (rerail-<host>-<pid>.prom): the line
 *   rerail_nic_info{host="h",pid="p",nic="vethA0",transport="verbs",rdma_device="rxe0",rdma_port="1"} 1
 * The file is input like any other: values are copied only up to the
 * closing quote and the buffer's size; anything malformed reads as unknown. */
#include "status_transport.h"
#include "tel_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int status_prom_label(const char *l, const char *end, const char *key, char *buf, size_t len) {
  char pat[40];
  snprintf(pat, sizeof pat, "%s=\"", key);
  size_t pl = strlen(pat);
  for (const char *p = l; p + pl <= end; p++) {
    if ((p != l && p[-1] != ',' && p[-1] != '{') || strncmp(p, pat, pl) != 0) continue;
    p += pl;
    size_t n = 0;
    while (p + n < end && p[n] != '"' && p[n] != '\\' && p[n] != '\n') n++;
    if (p + n >= end || p[n] != '"' || n >= len) return 0;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return 1;
  }
  return 0;
}

static int from_text(const char *text, const char *nic, status_transport *out) {
  static const char metric[] = "rerail_nic_info{";
  for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
    if (strncmp(l, metric, sizeof metric - 1) != 0) continue;
    const char *end = strchr(l, '}');
    const char *eol = strchr(l, '\n');
    if (!end || (eol && eol < end)) continue;
    char name[32], port[16];
    if (!status_prom_label(l, end, "nic", name, sizeof name) || strcmp(name, nic) != 0) continue;
    status_transport t;
    memset(&t, 0, sizeof t);
    if (!status_prom_label(l, end, "transport", t.transport, sizeof t.transport) || !t.transport[0]) return 0;
    status_prom_label(l, end, "rdma_device", t.rdma_device, sizeof t.rdma_device);
    if (status_prom_label(l, end, "rdma_port", port, sizeof port)) t.rdma_port = atoi(port);
    *out = t;
    return 1;
  }
  return 0;
}

int status_transport_of(const char *dir, uint32_t pid, const char *nic, status_transport *out) {
  char **names = NULL, suffix[24];
  snprintf(suffix, sizeof suffix, "-%u.prom", pid);
  int n = tel_list(dir, "rerail-", suffix, &names), found = 0;
  for (int i = 0; i < n && !found; i++) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path) continue;
    char *text = tel_slurp(path, NULL);
    if (text) found = from_text(text, nic, out);
    free(text);
  }
  tel_list_free(names, n > 0 ? n : 0);
  return found;
}
