/* rerail top: live per-rail throughput and latency of the rerail jobs on
 * this host, read from the .prom files the telemetry exporter writes
 * (re-read every interval, so it shows what node_exporter would serve).
 *
 *   rerail top [--dir D] [--interval S] [--once]
 *
 * WINDOW is the exporter's windowed throughput (last W requests while busy);
 * AVG is bytes moved between two frames of this tool over the time between
 * them (blank on the first frame). */
#include "rr_tel_format.h"
#include "tel_files.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct row {
  char host[64], nic[32], peer[80], dir[4];
  long pid;
  int rail;
  double thr, bytes, requests, drops, anomalies;
  double p50, p99;
  int have_p50, have_p99;
  int state;               /* -1 unknown */
  double age;              /* seconds since the file was written */
  int alive;
  /* from the previous frame */
  double avg, rps;
  int have_rate;
} row;

typedef struct link_state { char host[64], nic[32], peer[80]; long pid; int state; } link_state;

typedef struct frame {
  row *rows;
  int n, cap;
  link_state *links;
  int nlinks, linkcap;
  double when;             /* CLOCK_MONOTONIC seconds */
} frame;

typedef struct labels { char host[64], pid[16], nic[32], peer[80], rail[8], dir[8], quantile[8]; } labels;

static volatile sig_atomic_t g_quit;

/* Copy, cutting what does not fit (label values longer than a column). */
static void scopy(char *dst, size_t cap, const char *src) {
  size_t n = strlen(src);
  if (n >= cap) n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}
static void on_sigint(int s) { (void)s; g_quit = 1; }

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Parse {k="v",...}; p points after '{'. Returns the position after '}' or NULL. */
static const char *parse_labels(const char *p, labels *l) {
  memset(l, 0, sizeof *l);
  while (*p && *p != '}') {
    const char *k = p;
    while (*p && *p != '=') p++;
    size_t klen = (size_t)(p - k);
    if (*p != '=' || p[1] != '"') return NULL;
    p += 2;
    char v[128];
    size_t n = 0;
    while (*p && *p != '"') {
      char c = *p++;
      if (c == '\\' && *p) {
        c = *p++;
        if (c == 'n') c = '\n';
      }
      if (n + 1 < sizeof v) v[n++] = c;
    }
    if (*p != '"') return NULL;
    p++;
    v[n] = '\0';
    char *dst = NULL;
    size_t cap = 0;
#define L(name) if (klen == sizeof #name - 1 && !strncmp(k, #name, klen)) dst = l->name, cap = sizeof l->name;
    L(host) L(pid) L(nic) L(peer) L(rail) L(quantile)
    if (klen == 9 && !strncmp(k, "direction", 9)) dst = l->dir, cap = sizeof l->dir;
#undef L
    if (dst) scopy(dst, cap, v);
    if (*p == ',') p++;
  }
  return *p == '}' ? p + 1 : NULL;
}

static row *row_get(frame *f, const labels *l) {
  long pid = atol(l->pid);
  int rail = atoi(l->rail);
  for (int i = 0; i < f->n; i++) {
    row *r = &f->rows[i];
    if (r->pid == pid && r->rail == rail && !strcmp(r->host, l->host) && !strcmp(r->nic, l->nic) &&
        !strcmp(r->peer, l->peer) && !strcmp(r->dir, l->dir))
      return r;
  }
  if (f->n == f->cap) {
    int cap = f->cap ? 2 * f->cap : 32;
    row *p = realloc(f->rows, (size_t)cap * sizeof *p);
    if (!p) return NULL;
    f->rows = p;
    f->cap = cap;
  }
  row *r = &f->rows[f->n++];
  memset(r, 0, sizeof *r);
  scopy(r->host, sizeof r->host, l->host);
  scopy(r->nic, sizeof r->nic, l->nic);
  scopy(r->peer, sizeof r->peer, l->peer);
  scopy(r->dir, sizeof r->dir, l->dir);
  r->pid = pid;
  r->rail = rail;
  r->state = -1;
  r->alive = 1;
  return r;
}

static void link_add(frame *f, const labels *l, int state) {
  if (f->nlinks == f->linkcap) {
    int cap = f->linkcap ? 2 * f->linkcap : 16;
    link_state *p = realloc(f->links, (size_t)cap * sizeof *p);
    if (!p) return;
    f->links = p;
    f->linkcap = cap;
  }
  link_state *k = &f->links[f->nlinks++];
  scopy(k->host, sizeof k->host, l->host);
  scopy(k->nic, sizeof k->nic, l->nic);
  scopy(k->peer, sizeof k->peer, l->peer);
  k->pid = atol(l->pid);
  k->state = state;
}

static void parse_prom(frame *f, char *text, double now_wall) {
  double written = 0;
  int first = f->n;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] == '#' || !line[0]) continue;
    char *p = line;
    while (*p && *p != '{' && *p != ' ') p++;
    char name[96];
    snprintf(name, sizeof name, "%.*s", (int)(p - line), line);
    labels l;
    memset(&l, 0, sizeof l);
    if (*p == '{' && !(p = (char *)parse_labels(p + 1, &l))) continue;
    double v = strtod(p, NULL);
    if (!strcmp(name, RR_TEL_M_LAST_EXPORT)) {
      written = v;
      continue;
    }
    if (!strcmp(name, RR_TEL_M_RAIL_STATE)) {
      link_add(f, &l, (int)v);
      continue;
    }
    if (!l.dir[0]) continue; /* not a per-rail family */
    row *r;
    if (!strcmp(name, RR_TEL_M_THROUGHPUT) && (r = row_get(f, &l))) r->thr = v;
    else if (!strcmp(name, RR_TEL_M_BYTES) && (r = row_get(f, &l))) r->bytes = v;
    else if (!strcmp(name, RR_TEL_M_REQUESTS) && (r = row_get(f, &l))) r->requests = v;
    else if (!strcmp(name, RR_TEL_M_DROPPED) && (r = row_get(f, &l))) r->drops = v;
    else if (!strcmp(name, RR_TEL_M_ANOMALIES) && (r = row_get(f, &l))) r->anomalies = v;
    else if (!strcmp(name, RR_TEL_M_LATENCY) && (r = row_get(f, &l))) {
      if (!strcmp(l.quantile, "0.5")) r->p50 = v, r->have_p50 = 1;
      else if (!strcmp(l.quantile, "0.99")) r->p99 = v, r->have_p99 = 1;
    }
  }
  for (int i = first; i < f->n; i++) {
    f->rows[i].age = written > 0 ? now_wall - written : -1;
    f->rows[i].alive = tel_pid_alive(f->rows[i].host, f->rows[i].pid);
  }
}

static int cmp_row(const void *a, const void *b) {
  const row *x = a, *y = b;
  int c;
  if ((c = strcmp(x->host, y->host))) return c;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  if ((c = strcmp(x->nic, y->nic))) return c;
  if ((c = strcmp(x->peer, y->peer))) return c;
  if (x->rail != y->rail) return x->rail - y->rail;
  return strcmp(x->dir, y->dir);
}

/* Returns the number of files read, -1 when the directory cannot be read. */
static int read_frame(const char *dir, frame *f) {
  f->n = 0;
  f->nlinks = 0;
  f->when = mono_s();
  char **names;
  int nf = tel_list(dir, RR_TEL_PROM_PREFIX, RR_TEL_PROM_SUFFIX, &names);
  if (nf < 0) return -1;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  double now_wall = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
  for (int i = 0; i < nf; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    char *text = tel_slurp(path, NULL);
    if (!text) continue; /* replaced or removed between listing and reading */
    parse_prom(f, text, now_wall);
    free(text);
  }
  tel_list_free(names, nf);
  for (int i = 0; i < f->n; i++)
    for (int k = 0; k < f->nlinks; k++) {
      const link_state *ls = &f->links[k];
      if (ls->pid == f->rows[i].pid && !strcmp(ls->host, f->rows[i].host) && !strcmp(ls->nic, f->rows[i].nic) &&
          !strcmp(ls->peer, f->rows[i].peer))
        f->rows[i].state = ls->state;
    }
  if (f->n > 1) qsort(f->rows, (size_t)f->n, sizeof *f->rows, cmp_row);
  return nf;
}

static void rates(frame *cur, const frame *prev) {
  double dt = cur->when - prev->when;
  if (dt <= 0) return;
  for (int i = 0; i < cur->n; i++) {
    row *r = &cur->rows[i];
    for (int k = 0; k < prev->n; k++) {
      const row *p = &prev->rows[k];
      if (cmp_row(r, p) || r->bytes < p->bytes) continue;
      r->avg = (r->bytes - p->bytes) / dt;
      r->rps = (r->requests - p->requests) / dt;
      r->have_rate = 1;
    }
  }
}

static const char *state_str(int s) {
  static const char *const names[] = {"up", "degraded", "down", "recovering"};
  return s >= 0 && s < 4 ? names[s] : "-";
}

static void print_frame(const char *dir, const frame *f) {
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  char clock[16];
  strftime(clock, sizeof clock, "%H:%M:%S", &tm);
  int procs = 0;
  for (int i = 0; i < f->n; i++) procs += i == 0 || f->rows[i].pid != f->rows[i - 1].pid ||
                                          strcmp(f->rows[i].host, f->rows[i - 1].host);
  printf("rerail top - %s - %d process(es), %d rail(s) - %s\n", dir, procs, f->n, clock);
  printf("%-12s %-7s %-10s %-16s %4s %-3s %12s %12s %10s %10s %9s %10s %6s %-10s\n", "HOST", "PID", "NIC", "PEER",
         "RAIL", "DIR", "WINDOW", "AVG", "P50", "P99", "REQ/S", "TOTAL", "DROPS", "STATE");
  for (int i = 0; i < f->n; i++) {
    const row *r = &f->rows[i];
    char thr[24], avg[24] = "-", p50[16] = "-", p99[16] = "-", rps[16] = "-", tot[16], st[32];
    tel_fmt_rate(r->thr, thr, sizeof thr);
    if (r->have_rate) {
      tel_fmt_rate(r->avg, avg, sizeof avg);
      snprintf(rps, sizeof rps, "%.0f", r->rps);
    }
    if (r->have_p50) tel_fmt_duration(r->p50, p50, sizeof p50);
    if (r->have_p99) tel_fmt_duration(r->p99, p99, sizeof p99);
    tel_fmt_bytes(r->bytes, tot, sizeof tot);
    snprintf(st, sizeof st, "%s%s", state_str(r->state), r->alive ? "" : " (exited)");
    printf("%-12.12s %-7ld %-10.10s %-16.16s %4d %-3s %12s %12s %10s %10s %9s %10s %6.0f %-10s\n", r->host,
           r->pid, r->nic, r->peer, r->rail, r->dir, thr, avg, p50, p99, rps, tot, r->drops, st);
  }
  fflush(stdout);
}

static int usage(FILE *out) {
  fprintf(out, "usage: rerail top [--dir D] [--interval S] [--once]\n"
               "  --dir D         telemetry directory (default $RERAIL_TELEMETRY_DIR, else %s)\n"
               "  --interval S    seconds between frames (default 1)\n"
               "  --once          print one frame and exit\n",
          RR_TEL_DEFAULT_DIR);
  return out == stderr ? 2 : 0;
}

int cmd_top(int argc, char **argv) {
  const char *dir_opt = NULL;
  double interval = 1.0;
  int once = 0;
  static const struct option opts[] = {{"dir", 1, 0, 'd'}, {"interval", 1, 0, 'i'}, {"once", 0, 0, 'o'},
                                       {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, "d:i:oh", opts, NULL)) != -1) {
    switch (c) {
    case 'd': dir_opt = optarg; break;
    case 'i': {
      char *end;
      interval = strtod(optarg, &end);
      if (*end || interval < 0.05 || interval > 3600) {
        fprintf(stderr, "rerail top: --interval takes seconds between 0.05 and 3600\n");
        return 2;
      }
      break;
    }
    case 'o': once = 1; break;
    case 'h': return usage(stdout);
    default: return usage(stderr);
    }
  }
  if (optind != argc) return usage(stderr);
  const char *dir = tel_dir(dir_opt);
  frame cur = {0}, prev = {0};
  int nf = read_frame(dir, &cur);
  if (nf <= 0) {
    printf("no rerail job with telemetry here: no " RR_TEL_PROM_PREFIX "*" RR_TEL_PROM_SUFFIX " files in %s%s\n",
           dir, nf < 0 ? " (cannot read the directory)" : "");
    free(cur.rows);
    free(cur.links);
    return 0;
  }
  int tty = isatty(STDOUT_FILENO);
  signal(SIGINT, on_sigint);
  signal(SIGTERM, on_sigint);
  for (;;) {
    if (tty && !once) fputs("\033[H\033[2J", stdout);
    if (cur.n == 0) printf("no rerail job with telemetry here (waiting for one in %s)\n", dir);
    else print_frame(dir, &cur);
    if (once || g_quit) break;
    struct timespec ts = {.tv_sec = (time_t)interval, .tv_nsec = (long)((interval - (double)(time_t)interval) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && !g_quit) {
    }
    if (g_quit) break;
    frame t = prev;
    prev = cur;
    cur = t;
    read_frame(dir, &cur);
    rates(&cur, &prev);
    if (!tty) putchar('\n');
  }
  free(cur.rows);
  free(cur.links);
  free(prev.rows);
  free(prev.links);
  return 0;
}
