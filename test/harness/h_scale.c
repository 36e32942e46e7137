/* --scale-report: what N connections cost a plugin, for bench/conn_scale.sh.
 *
 * Setup time is the server's listen phase (every listen() call, back to back)
 * plus the connect phase: from the moment the client holds every handle
 * and makes its first connect() call until the last connect() or accept() on
 * either side returned a comm. Publishing and reading the handle files lies
 * between the two phases and is left out: it is the harness's rendezvous,
 * not the plugin (NCCL's bootstrap does the same job). Each process writes
 * its figures as flags ("<role>.listened", "<role>.connecting",
 * "<role>.setup"), so either side can report the whole.
 *
 * Memory is this process's resident set, read before the first listen (after
 * the harness allocated and touched its own buffers), once every connection
 * is up, and after traffic (before any close): the plugin's cost per
 * connection is the growth over N. File descriptors and threads are counted
 * at the same points. */
#include "harness.h"

#include <dirent.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct h_usage {
  long rss_kb;
  int fds;
  int threads;
  double cpu_ms;   /* user + system time of the process so far */
} h_usage;

enum { U_BEFORE = 0, U_SETUP, U_TRAFFIC, U_N };
static h_usage g_usage[U_N];
static int g_have[U_N];
static double g_listen_ms = -1;   /* server */
static double g_c0_wall;          /* client: its first connect() */
static double g_done_wall;        /* this side: the last comm */
static double g_traffic_wall;     /* this side: its connections' traffic done */

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int count_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static void usage_read(h_usage *u) {
  u->rss_kb = -1;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    long size, rss;
    if (fscanf(f, "%ld %ld", &size, &rss) == 2) u->rss_kb = rss * (sysconf(_SC_PAGESIZE) / 1024);
    fclose(f);
  }
  u->fds = count_dir("/proc/self/fd") - 1;   /* less the one reading it */
  u->threads = count_dir("/proc/self/task");
  struct rusage ru;
  u->cpu_ms = -1;
  if (getrusage(RUSAGE_SELF, &ru) == 0)
    u->cpu_ms = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-3;
}

static void sample(int at) {
  if (!g_opt.scale_report) return;
  usage_read(&g_usage[at]);
  g_have[at] = 1;
}

void h_scale_before_listen(void) { sample(U_BEFORE); }

void h_scale_listened(double listen_s) {
  if (!g_opt.scale_report) return;
  char t[64];
  g_listen_ms = listen_s * 1e3;
  snprintf(t, sizeof t, "%.6f\n", g_listen_ms);
  h_rdv_put_flag(g_opt.role, "listened", t);
}

int h_scale_wait_listened(void) {
  if (!g_opt.scale_report || g_opt.role != H_CLIENT) return 0;
  int w = h_rdv_wait_flag(H_SERVER, "listened", g_opt.rdv_timeout);
  if (w) h_error("the server never finished listening (--scale-report)");
  return w ? -1 : 0;
}

void h_scale_connecting(void) {
  if (!g_opt.scale_report || g_opt.role != H_CLIENT) return;
  char t[64];
  g_c0_wall = wall_now();
  snprintf(t, sizeof t, "%.6f\n", g_c0_wall);
  h_rdv_put_flag(g_opt.role, "connecting", t);
}

void h_scale_connected(void) {
  if (!g_opt.scale_report) return;
  char t[64];
  g_done_wall = wall_now();
  snprintf(t, sizeof t, "%.6f\n", g_done_wall);
  h_rdv_put_flag(g_opt.role, "setup", t);
  sample(U_SETUP);
}

/* The traffic's end is timed too: a plugin may leave part of its setup to
 * the first operations (rerail's send end reads the listener's last
 * answers on its first isend), which the setup time alone would not show. */
int h_scale_setup_barrier(void) {
  if (!g_opt.scale_report || !g_opt.setup_barrier) return 0;
  int w = h_rdv_wait_flag(1 - g_opt.role, "setup", g_opt.timeout);
  if (w) h_error("the peer never finished its setup (--setup-barrier)");
  return w ? -1 : 0;
}

void h_scale_after_traffic(void) {
  g_traffic_wall = wall_now();
  sample(U_TRAFFIC);
}

static double read_flag_num(int role, const char *name) {
  char t[64];
  if (h_rdv_read_flag(role, name, t, sizeof t)) return -1;
  return strtod(t, NULL);
}

/* The whole setup time in ms, or -1 while a figure is missing. */
static double setup_ms(void) {
  double listen = read_flag_num(H_SERVER, "listened");
  double c0 = read_flag_num(H_CLIENT, "connecting");
  double ds = read_flag_num(H_SERVER, "setup"), dc = read_flag_num(H_CLIENT, "setup");
  if (listen < 0 || c0 <= 0 || ds <= 0 || dc <= 0) return -1;
  double done = ds > dc ? ds : dc;
  return listen + (done - c0) * 1e3;
}

static double per_conn_kb(int at) {
  if (!g_have[U_BEFORE] || !g_have[at] || g_opt.conns <= 0) return -1;
  return (double)(g_usage[at].rss_kb - g_usage[U_BEFORE].rss_kb) / g_opt.conns;
}

void h_scale_print(int json) {
  if (!g_opt.scale_report) return;
  static const char *const at_name[U_N] = {"before", "setup", "traffic"};
  double listen = read_flag_num(H_SERVER, "listened");
  double c0 = read_flag_num(H_CLIENT, "connecting");
  double connect = -1;
  if (c0 > 0 && g_done_wall > 0) connect = (g_done_wall - c0) * 1e3;
  double traffic_done = c0 > 0 && g_traffic_wall > 0 ? (g_traffic_wall - c0) * 1e3 : -1;
  if (json) {
    printf("\"scale\":{\"setup_ms\":%.3f,\"listen_ms\":%.3f,\"connect_ms\":%.3f,\"traffic_done_ms\":%.3f,"
           "\"kb_per_conn_setup\":%.3f,\"kb_per_conn_traffic\":%.3f",
           setup_ms(), listen, connect, traffic_done, per_conn_kb(U_SETUP), per_conn_kb(U_TRAFFIC));
    for (int i = 0; i < U_N; i++)
      if (g_have[i])
        printf(",\"%s\":{\"rss_kb\":%ld,\"fds\":%d,\"threads\":%d,\"cpu_ms\":%.1f}", at_name[i],
               g_usage[i].rss_kb, g_usage[i].fds, g_usage[i].threads, g_usage[i].cpu_ms);
    printf("},");
    return;
  }
  printf("  scale: setup %.3f ms (server listen %.3f ms + connect phase; this side done %.3f ms after "
         "the first connect)\n",
         setup_ms(), listen, connect);
  printf("  scale: resident KB per connection: %.2f after setup, %.2f after traffic\n",
         per_conn_kb(U_SETUP), per_conn_kb(U_TRAFFIC));
  for (int i = 0; i < U_N; i++)
    if (g_have[i])
      printf("  scale: %-8s rss %ld KB, %d fds, %d threads, %.1f ms CPU so far\n", at_name[i],
             g_usage[i].rss_kb, g_usage[i].fds, g_usage[i].threads, g_usage[i].cpu_ms);
}
