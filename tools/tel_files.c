#include "tel_files.h"
#include "rr_tel_format.h"
#include "rr_tel_io.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tel_dir(const char *opt) {
  if (opt && *opt) return opt;
  const char *env = getenv("RERAIL_TELEMETRY_DIR");
  return env && *env ? env : RR_TEL_DEFAULT_DIR;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int tel_list(const char *dir, const char *prefix, const char *suffix, char ***out) {
  *out = NULL;
  DIR *d = opendir(dir);
  if (!d) return -1;
  char **v = NULL;
  int n = 0, cap = 0;
  size_t pl = strlen(prefix), sl = strlen(suffix);
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < pl + sl || strncmp(e->d_name, prefix, pl) || strcmp(e->d_name + len - sl, suffix)) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      char **p = realloc(v, (size_t)cap * sizeof *p);
      if (!p) break;
      v = p;
    }
    if (!(v[n] = strdup(e->d_name))) break;
    n++;
  }
  closedir(d);
  if (n) qsort(v, (size_t)n, sizeof *v, cmp_str);
  *out = v;
  return n;
}

void tel_list_free(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

char *tel_slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 65536, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    if (n + 1 >= cap) {
      char *p = realloc(buf, cap * 2);
      if (!p) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = p;
      cap *= 2;
    }
    size_t k = fread(buf + n, 1, cap - n - 1, f);
    if (k == 0) break;
    n += k;
  }
  fclose(f);
  if (!buf) return NULL;
  buf[n] = '\0';
  if (len) *len = n;
  return buf;
}

void tel_fmt_rate(double v, char *buf, size_t len) {
  if (v >= 1e9) snprintf(buf, len, "%.2f GB/s", v / 1e9);
  else if (v >= 1e6) snprintf(buf, len, "%.1f MB/s", v / 1e6);
  else if (v >= 1e3) snprintf(buf, len, "%.1f kB/s", v / 1e3);
  else snprintf(buf, len, "%.0f B/s", v);
}

void tel_fmt_duration(double s, char *buf, size_t len) {
  if (s >= 1) snprintf(buf, len, "%.2f s", s);
  else if (s >= 1e-3) snprintf(buf, len, "%.2f ms", s * 1e3);
  else snprintf(buf, len, "%.1f us", s * 1e6);
}

void tel_fmt_bytes(double v, char *buf, size_t len) {
  if (v >= 1e12) snprintf(buf, len, "%.2f TB", v / 1e12);
  else if (v >= 1e9) snprintf(buf, len, "%.2f GB", v / 1e9);
  else if (v >= 1e6) snprintf(buf, len, "%.1f MB", v / 1e6);
  else if (v >= 1e3) snprintf(buf, len, "%.1f kB", v / 1e3);
  else snprintf(buf, len, "%.0f B", v);
}

int tel_pid_alive(const char *host, long pid) {
  char me[64];
  rr_tel_hostname(me, sizeof me);
  if (strcmp(me, host) || pid <= 0) return 1;
  return !(kill((pid_t)pid, 0) != 0 && errno == ESRCH);
}
