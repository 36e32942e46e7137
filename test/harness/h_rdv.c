/* The out-of-band channel: a directory both processes see (NCCL uses its
 * bootstrap network for the same job). A handle is published as
 * "<role>.handle.<conn>" by writing a temporary file and renaming it, so the
 * peer never reads half a file. Flags ("<role>.done", "<role>.abort", ...)
 * work the same way, and so do the plugin's connection ids
 * ("<role>.accepted.<conn>", "<role>.connected.<conn>": h_connect.c). Every handle file carries the parameters that shape the
 * schedule, and the reader refuses to go on when they differ from its own. */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *h_role_name(int role) { return role == H_SERVER ? "server" : "client"; }

void h_params_from_opts(h_params *p, int group) {
  memset(p, 0, sizeof *p);
  p->seed = g_opt.seed;
  p->iters = g_opt.duration > 0 ? 0 : g_opt.iters;
  p->conns = g_opt.conns;
  p->group = group;
  p->bidir = g_opt.bidir;
  p->duration_mode = g_opt.duration > 0;
  p->die = g_opt.die_mid;
  p->wrong_token = g_opt.wrong_token != H_WT_NONE;
  p->min_size = g_opt.min_size;
  p->max_size = g_opt.max_size;
  p->die_size = g_opt.die_mid ? g_opt.die_size : 0;
  p->version = g_opt.net_version;
}

static int write_atomic(const char *name, const char *text) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/%s", g_opt.rdv, name);
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%d", g_opt.rdv, name, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) {
    h_error("cannot write %s: %s", tmp, strerror(errno));
    return -1;
  }
  int ok = fputs(text, f) >= 0;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    h_error("cannot publish %s: %s", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

static void sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int h_rdv_put_handle(int role, int conn, const void *handle, const h_params *p) {
  char text[1024], name[128];
  int n = snprintf(text, sizeof text,
                   "rerail-harness-handle 1\n"
                   "conn %d\n"
                   "params seed=%" PRIu64 " iters=%" PRIu64 " conns=%d group=%d bidir=%d duration=%d "
                   "die=%d wrong_token=%d min=%zu max=%zu die_size=%zu\n"
                   "version %d\n"
                   "handle ",
                   conn, p->seed, p->iters, p->conns, p->group, p->bidir, p->duration_mode, p->die,
                   p->wrong_token, p->min_size, p->max_size, p->die_size, p->version);
  const unsigned char *h = handle;
  for (int i = 0; i < HNET_HANDLE_SIZE; i++) n += snprintf(text + n, sizeof text - (size_t)n, "%02x", h[i]);
  snprintf(text + n, sizeof text - (size_t)n, "\n");
  snprintf(name, sizeof name, "%s.handle.%d", h_role_name(role), conn);
  return write_atomic(name, text);
}

static int parse_handle_file(const char *text, int conn, void *handle, h_params *p) {
  int c = -1;
  const char *l = strstr(text, "\nconn ");
  if (strncmp(text, "rerail-harness-handle 1\n", 24) || !l || sscanf(l, "\nconn %d", &c) != 1 || c != conn)
    return -1;
  l = strstr(text, "\nparams ");
  if (!l || sscanf(l,
                   "\nparams seed=%" SCNu64 " iters=%" SCNu64 " conns=%d group=%d bidir=%d "
                   "duration=%d die=%d wrong_token=%d min=%zu max=%zu die_size=%zu",
                   &p->seed, &p->iters, &p->conns, &p->group, &p->bidir, &p->duration_mode, &p->die,
                   &p->wrong_token, &p->min_size, &p->max_size, &p->die_size) != 11)
    return -1;
  l = strstr(text, "\nversion ");
  if (l) sscanf(l, "\nversion %d", &p->version);
  l = strstr(text, "\nhandle ");
  if (!l) return -1;
  l += 8;
  unsigned char *h = handle;
  for (int i = 0; i < HNET_HANDLE_SIZE; i++) {
    unsigned v;
    if (sscanf(l + 2 * i, "%2x", &v) != 1) return -1;
    h[i] = (unsigned char)v;
  }
  return 0;
}

static int check_params(const h_params *mine, const h_params *peer) {
  char why[512] = "";
  size_t w = 0;
#define H_CMP(field, fmt)                                                                      \
  if (mine->field != peer->field)                                                              \
    w += (size_t)snprintf(why + w, sizeof why - w, " " #field ": mine " fmt ", peer's " fmt ";", \
                          mine->field, peer->field);
  H_CMP(seed, "%" PRIu64)
  H_CMP(iters, "%" PRIu64)
  H_CMP(conns, "%d")
  H_CMP(group, "%d")
  H_CMP(bidir, "%d")
  H_CMP(duration_mode, "%d")
  H_CMP(die, "%d")
  H_CMP(wrong_token, "%d")
  H_CMP(min_size, "%zu")
  H_CMP(max_size, "%zu")
  H_CMP(die_size, "%zu")
#undef H_CMP
  if (!w) return 0;
  h_error("the peer runs a different schedule (pass the same options to both sides):%s", why);
  return -1;
}

int h_rdv_get_handle(int peer_role, int conn, void *handle, const h_params *mine, double timeout_s) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.handle.%d", g_opt.rdv, h_role_name(peer_role), conn);
  double end = h_now() + timeout_s;
  for (;;) {
    FILE *f = fopen(path, "r");
    if (f) {
      char text[2048];
      size_t n = fread(text, 1, sizeof text - 1, f);
      fclose(f);
      text[n] = 0;
      h_params peer;
      if (parse_handle_file(text, conn, handle, &peer) != 0) {
        h_error("%s is not a harness handle file", path);
        return -1;
      }
      return check_params(mine, &peer);
    }
    if (h_peer_aborted()) {
      h_error("the %s aborted before publishing its handle for connection %d", h_role_name(peer_role), conn);
      return -1;
    }
    if (h_now() > end) {
      h_error("timed out after %.0f s waiting for %s (is the %s running with --rendezvous %s?)", timeout_s,
              path, h_role_name(peer_role), g_opt.rdv);
      return -1;
    }
    sleep_ms(10);
  }
}

int h_rdv_put_flag(int role, const char *name, const char *text) {
  char file[256];
  snprintf(file, sizeof file, "%s.%s", h_role_name(role), name);
  return write_atomic(file, text ? text : "");
}

int h_rdv_has_flag(int role, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%s", g_opt.rdv, h_role_name(role), name);
  return access(path, F_OK) == 0;
}

int h_rdv_read_flag(int role, const char *name, char *buf, size_t len) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%s", g_opt.rdv, h_role_name(role), name);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = 0;
  return 0;
}

int h_rdv_wait_flag(int peer_role, const char *name, double timeout_s) {
  double end = h_now() + timeout_s;
  for (;;) {
    if (h_rdv_has_flag(peer_role, name)) return 0;
    if (strcmp(name, "abort") && h_rdv_has_flag(peer_role, "abort")) return -2;
    if (h_now() > end) return -1;
    sleep_ms(5);
  }
}

/* Every flag name the harness writes; stale ones from an earlier run in the
 * same directory are removed at start (nothing else is touched). */
static const char *const flag_names[] = {"abort", "sched-done", "closed", "forged-done", "ready-genuine",
                                         "ports", "traffic", "listened", "connecting", "setup", NULL};

static int own_file(const char *name, const char *role) {
  size_t rl = strlen(role);
  if (strncmp(name, role, rl) || name[rl] != '.') return 0;
  name += rl + 1;
  if (!strncmp(name, "handle.", 7) || !strncmp(name, "accepted.", 9) || !strncmp(name, "connected.", 10)) return 1;
  for (int i = 0; flag_names[i]; i++)
    if (!strcmp(name, flag_names[i])) return 1;
  return 0;
}

void h_rdv_clean(int role) {
  DIR *d = opendir(g_opt.rdv);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!own_file(e->d_name, h_role_name(role))) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_opt.rdv, e->d_name);
    unlink(path);
  }
  closedir(d);
}

int h_peer_aborted(void) {
  static _Atomic uint64_t next_check;
  static _Atomic int seen;
  if (!g_opt.rdv) return 0;
  if (atomic_load(&seen)) return 1;
  uint64_t now = h_now_ns(), due = atomic_load(&next_check);
  if (now < due) return 0;
  atomic_store(&next_check, now + 50 * 1000 * 1000);
  if (h_rdv_has_flag(1 - g_opt.role, "abort")) {
    atomic_store(&seen, 1);
    return 1;
  }
  return 0;
}
