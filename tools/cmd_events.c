/* rerail events: the health events of the rerail jobs on this host, from the
 * JSON-lines logs the telemetry exporter writes, one readable line each.
 *
 *   rerail events [--dir D] [--follow] [--once]
 *
 * Without --follow: every event in the logs (rotated .1 files included), in
 * time order, then exit. --follow: then wait for new ones like tail -f,
 * across rotation (the log is renamed to .1 and a new one started: the rest
 * of the old file is read before the new one) and picking up new jobs.
 * --once: print what is there and exit, even with --follow. */
#include "rr_tel_format.h"
#include "tel_files.h"

#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct event {
  char time[40], host[64], kind[16], nic[32], to_nic[32], peer[80], state[16], reason[160];
  unsigned long long time_ns;
  long pid;
  double stall_ms;
  int have_stall;
} event;

static volatile sig_atomic_t g_quit;
static void on_sig(int s) { (void)s; g_quit = 1; }

/* ---- a parser for the flat objects the exporter writes */

static const char *skip_ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\r') p++;
  return p;
}

/* A JSON string at p (on '"') into out; returns the position after it or NULL. */
static const char *parse_str(const char *p, char *out, size_t cap) {
  size_t n = 0;
  for (p++; *p && *p != '"'; p++) {
    char c = *p;
    if (c == '\\') {
      p++;
      switch (*p) {
      case 'n': c = '\n'; break;
      case 't': c = '\t'; break;
      case 'u': {
        unsigned v = 0;
        if (sscanf(p + 1, "%4x", &v) != 1) return NULL;
        c = v < 0x80 && v >= 0x20 ? (char)v : '?';
        p += 4;
        break;
      }
      case '\0': return NULL;
      default: c = *p;
      }
    }
    if (n + 1 < cap) out[n++] = c;
  }
  if (*p != '"') return NULL;
  if (cap) out[n] = '\0';
  return p + 1;
}

static int parse_event(const char *line, event *ev) {
  memset(ev, 0, sizeof *ev);
  const char *p = skip_ws(line);
  if (*p++ != '{') return -1;
  for (;;) {
    p = skip_ws(p);
    if (*p == '}') return ev->kind[0] ? 0 : -1;
    char key[32];
    if (*p != '"' || !(p = parse_str(p, key, sizeof key))) return -1;
    p = skip_ws(p);
    if (*p++ != ':') return -1;
    p = skip_ws(p);
    char sval[256] = "";
    double num = 0;
    int is_null = 0;
    if (*p == '"') {
      if (!(p = parse_str(p, sval, sizeof sval))) return -1;
    } else if (!strncmp(p, "null", 4)) {
      is_null = 1;
      p += 4;
    } else if (!strncmp(p, "true", 4) || !strncmp(p, "false", 5)) {
      p += *p == 't' ? 4 : 5;
    } else {
      char *end;
      num = strtod(p, &end);
      if (end == p) return -1;
      if (!strcmp(key, "time_ns")) ev->time_ns = strtoull(p, NULL, 10);
      p = end;
    }
#define S(name) else if (!strcmp(key, #name)) snprintf(ev->name, sizeof ev->name, "%s", sval);
    if (!strcmp(key, "time")) snprintf(ev->time, sizeof ev->time, "%s", sval);
    S(host) S(kind) S(nic) S(to_nic) S(peer) S(state) S(reason)
    else if (!strcmp(key, "pid")) ev->pid = (long)num;
    else if (!strcmp(key, "stall_ms") && !is_null) ev->stall_ms = num, ev->have_stall = 1;
#undef S
    p = skip_ws(p);
    if (*p == ',') p++;
    else if (*p != '}') return -1;
  }
}

static void print_event(const event *e) {
  printf("%s  %s[%ld]  %-10s", e->time, e->host, e->pid, e->kind);
  if (!strcmp(e->kind, "failover") || !strcmp(e->kind, "failback"))
    printf("  %s -> %s", e->nic[0] ? e->nic : "?", e->to_nic[0] ? e->to_nic : "?");
  else if (e->nic[0])
    printf("  %s", e->nic);
  if (e->state[0] && strcmp(e->kind, "anomaly")) printf(" %s", e->state);
  if (e->peer[0]) printf("  peer %s", e->peer);
  if (e->have_stall) printf("  stalled %.3f ms", e->stall_ms);
  if (e->reason[0]) printf("  (%s)", e->reason);
  putchar('\n');
}

/* ---- reading the logs */

typedef struct evlist { event *v; size_t n, cap; } evlist;

static void parse_text(char *text, evlist *out, long *bad) {
  for (char *line = text, *nl; *line; line = nl + 1) {
    nl = strchr(line, '\n');
    if (!nl) break; /* a line still being written */
    *nl = '\0';
    event e;
    if (!*line) continue;
    if (parse_event(line, &e) != 0) {
      (*bad)++;
      continue;
    }
    if (out->n == out->cap) {
      size_t cap = out->cap ? 2 * out->cap : 256;
      event *p = realloc(out->v, cap * sizeof *p);
      if (!p) return;
      out->v = p;
      out->cap = cap;
    }
    out->v[out->n++] = e;
  }
}

static int cmp_time(const void *a, const void *b) {
  const event *x = a, *y = b;
  return x->time_ns < y->time_ns ? -1 : x->time_ns > y->time_ns;
}

/* A log being followed: the open file, its inode, and the partial last line. */
typedef struct follow {
  char path[4096];
  int fd;
  ino_t ino;
  char part[8192];
  size_t plen;
} follow;

static void follow_read(follow *f, long *bad) {
  char buf[65536];
  ssize_t n;
  while ((n = read(f->fd, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] != '\n') {
        if (f->plen + 1 < sizeof f->part) f->part[f->plen++] = buf[i];
        continue;
      }
      f->part[f->plen] = '\0';
      event e;
      if (f->plen && parse_event(f->part, &e) == 0) print_event(&e);
      else if (f->plen) (*bad)++;
      f->plen = 0;
    }
  }
  fflush(stdout);
}

/* Open path at offset (the end of what was already shown). */
static int follow_open(follow *f, const char *path, off_t offset) {
  memset(f, 0, sizeof *f);
  snprintf(f->path, sizeof f->path, "%s", path);
  f->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) return -1;
  struct stat sb;
  fstat(f->fd, &sb);
  f->ino = sb.st_ino;
  lseek(f->fd, offset, SEEK_SET);
  return 0;
}

static void follow_check(follow *f, long *bad) {
  follow_read(f, bad);
  struct stat sb, cur;
  if (stat(f->path, &sb) != 0 || sb.st_ino != f->ino) {
    /* Rotated (or removed): what is left of the old file was just read;
     * continue with the new file from its start. */
    if (stat(f->path, &sb) != 0) return;
    close(f->fd);
    char path[4096];
    snprintf(path, sizeof path, "%s", f->path);
    if (follow_open(f, path, 0) == 0) follow_read(f, bad);
    return;
  }
  if (fstat(f->fd, &cur) == 0 && lseek(f->fd, 0, SEEK_CUR) > cur.st_size) {
    lseek(f->fd, 0, SEEK_SET); /* truncated under us */
    f->plen = 0;
  }
}

static int usage(FILE *out) {
  fprintf(out, "usage: rerail events [--dir D] [--follow] [--once]\n"
               "  --dir D     telemetry directory (default $RERAIL_TELEMETRY_DIR, else %s)\n"
               "  --follow    keep printing new events as they are logged (like tail -f)\n"
               "  --once      print the events logged so far and exit\n",
          RR_TEL_DEFAULT_DIR);
  return out == stderr ? 2 : 0;
}

int cmd_events(int argc, char **argv) {
  const char *dir_opt = NULL;
  int follow_mode = 0, once = 0;
  static const struct option opts[] = {{"dir", 1, 0, 'd'}, {"follow", 0, 0, 'f'}, {"once", 0, 0, 'o'},
                                       {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, "d:foh", opts, NULL)) != -1) {
    switch (c) {
    case 'd': dir_opt = optarg; break;
    case 'f': follow_mode = 1; break;
    case 'o': once = 1; break;
    case 'h': return usage(stdout);
    default: return usage(stderr);
    }
  }
  if (optind != argc) return usage(stderr);
  if (once) follow_mode = 0;
  const char *dir = tel_dir(dir_opt);

  char **names = NULL, **old = NULL;
  int n = tel_list(dir, RR_TEL_EVENTS_PREFIX, RR_TEL_EVENTS_SUFFIX, &names);
  int nold = tel_list(dir, RR_TEL_EVENTS_PREFIX, RR_TEL_EVENTS_SUFFIX ".1", &old);
  if (n <= 0 && nold <= 0) {
    printf("no rerail job with telemetry here: no " RR_TEL_EVENTS_PREFIX "*" RR_TEL_EVENTS_SUFFIX
           " files in %s%s\n", dir, n < 0 ? " (cannot read the directory)" : "");
    tel_list_free(names, n > 0 ? n : 0);
    tel_list_free(old, nold > 0 ? nold : 0);
    return 0;
  }
  evlist all = {0};
  long bad = 0;
  follow *fl = n > 0 ? calloc((size_t)n, sizeof *fl) : NULL;
  int nfl = 0;
  for (int i = 0; i < nold; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, old[i]);
    char *text = tel_slurp(path, NULL);
    if (text) parse_text(text, &all, &bad);
    free(text);
  }
  for (int i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    size_t len = 0;
    char *text = tel_slurp(path, &len);
    if (!text) continue;
    /* Only whole lines are shown; following resumes after the last one. */
    char *last_nl = strrchr(text, '\n');
    off_t shown = last_nl ? (off_t)(last_nl - text) + 1 : 0;
    parse_text(text, &all, &bad);
    free(text);
    if (fl && follow_open(&fl[nfl], path, shown) == 0) nfl++;
  }
  if (all.n > 1) qsort(all.v, all.n, sizeof *all.v, cmp_time);
  for (size_t i = 0; i < all.n; i++) print_event(&all.v[i]);
  fflush(stdout);
  free(all.v);

  if (follow_mode) {
    signal(SIGINT, on_sig);
    signal(SIGTERM, on_sig);
    while (!g_quit) {
      struct timespec ts = {0, 200 * 1000000L};
      nanosleep(&ts, NULL);
      for (int i = 0; i < nfl; i++) follow_check(&fl[i], &bad);
      /* A job that started since: follow its log from the beginning. */
      char **now;
      int nn = tel_list(dir, RR_TEL_EVENTS_PREFIX, RR_TEL_EVENTS_SUFFIX, &now);
      for (int i = 0; i < nn; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, now[i]);
        int known = 0;
        for (int k = 0; k < nfl && !known; k++) known = !strcmp(fl[k].path, path);
        if (known) continue;
        follow *p = realloc(fl, (size_t)(nfl + 1) * sizeof *fl);
        if (!p) break;
        fl = p;
        if (follow_open(&fl[nfl], path, 0) == 0) follow_read(&fl[nfl++], &bad);
      }
      tel_list_free(now, nn > 0 ? nn : 0);
    }
  }
  for (int i = 0; i < nfl; i++) close(fl[i].fd);
  free(fl);
  tel_list_free(names, n > 0 ? n : 0);
  tel_list_free(old, nold > 0 ? nold : 0);
  if (bad) fprintf(stderr, "rerail events: skipped %ld line(s) that are not rerail events\n", bad);
  return 0;
}
