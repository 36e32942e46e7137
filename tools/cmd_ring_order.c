/* rerail ring-order: the host order NCCL's inter-host ring should follow,
 * written for the launcher (NCCL orders hosts by their lowest rank; only the
 * launcher's order can change it). Algorithms: tools/ring_order.h.
 *
 *   rerail ring-order --hosts FILE    hosts, one a line, optional ToR label
 *   rerail ring-order --matrix FILE   host names, then an n x n GB/s matrix
 *     [--format hostfile|slurm|torchrun|rankmap] [--slots N] [--out FILE]
 *     [--nic-gbs X --uplink-gbs Y]   (--hosts: report the ring's slowest
 *                                     hop in a two-level rack tree)
 * A report (input order vs chosen order) goes to stderr. */
#include "ring_order.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(FILE *f) {
  fprintf(f,
          "usage: rerail ring-order (--hosts FILE | --matrix FILE) [--format FMT] [--slots N]\n"
          "                         [--out FILE] [--nic-gbs X --uplink-gbs Y]\n"
          "  --hosts FILE    one host per line, optionally followed by its ToR (rack) label:\n"
          "                  hosts of a rack are put next to each other\n"
          "  --matrix FILE   first line: the host names; then one row per sending host of\n"
          "                  measured GB/s to every host: the directed ring with the fastest\n"
          "                  slowest hop (exact up to %d hosts, heuristic beyond)\n"
          "  --format FMT    hostfile (mpirun: 'host slots=N', default), slurm (SLURM_HOSTFILE\n"
          "                  with srun --distribution=arbitrary: one line per task), torchrun\n"
          "                  ('host node_rank'), rankmap ('rank host local_rank')\n"
          "  --slots N       ranks (GPUs) per host, default 8\n"
          "  --out FILE      write there instead of stdout\n",
          RR_RING_EXACT_MAX);
  return f == stderr ? 2 : 0;
}

static char *read_all(const char *path, char *err, size_t len) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(err, len, "%s: %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  while (buf != NULL) {
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
    if (n + 1 == cap) {
      if (cap >= (64u << 20)) {
        snprintf(err, len, "%s: larger than 64 MiB", path);
        free(buf);
        buf = NULL;
        break;
      }
      char *bigger = realloc(buf, cap * 2);
      if (bigger == NULL) {
        free(buf);
        buf = NULL;
        snprintf(err, len, "%s: out of memory", path);
        break;
      }
      buf = bigger;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf != NULL) {
    buf[n] = '\0';
    if (strlen(buf) != n) {
      snprintf(err, len, "%s: contains NUL bytes (not a text file)", path);
      free(buf);
      return NULL;
    }
  }
  return buf;
}

static int racks_left(const rr_ring_hosts *h, const int *o) {
  int c = 0;
  for (int i = 0; i < h->n; i++)
    if (strcmp(h->tor[o[i]], h->tor[o[(i + 1) % h->n]]) != 0) c++;
  return c;
}

int cmd_ring_order(int argc, char **argv) {
  const char *hosts = NULL, *matrix = NULL, *fmt = "hostfile", *out = NULL;
  long slots = 8;
  double nic_gbs = 0.0, uplink_gbs = 0.0;
  for (int i = 1; i < argc; i += 2) { /* every option but --help takes a value */
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout);
    if (v == NULL) {
      fprintf(stderr, "rerail ring-order: %s needs a value\n", a);
      return usage(stderr);
    }
    char *end = NULL;
    if (!strcmp(a, "--hosts")) hosts = v;
    else if (!strcmp(a, "--matrix")) matrix = v;
    else if (!strcmp(a, "--format")) fmt = v;
    else if (!strcmp(a, "--out")) out = v;
    else if (!strcmp(a, "--slots")) {
      slots = strtol(v, &end, 10);
      if (*end != '\0' || slots < 1 || slots > 1024) {
        fprintf(stderr, "rerail ring-order: --slots '%s': expected 1..1024\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--nic-gbs") || !strcmp(a, "--uplink-gbs")) {
      double d = strtod(v, &end);
      if (*end != '\0' || !(d > 0.0)) {
        fprintf(stderr, "rerail ring-order: %s '%s': expected GB/s > 0\n", a, v);
        return 2;
      }
      if (!strcmp(a, "--nic-gbs")) nic_gbs = d;
      else uplink_gbs = d;
    } else {
      fprintf(stderr, "rerail ring-order: unknown option '%s'\n", a);
      return usage(stderr);
    }
  }
  if ((hosts == NULL) == (matrix == NULL)) {
    fprintf(stderr, "rerail ring-order: give exactly one of --hosts and --matrix\n");
    return usage(stderr);
  }
  if (strcmp(fmt, "hostfile") && strcmp(fmt, "slurm") && strcmp(fmt, "torchrun") &&
      strcmp(fmt, "rankmap")) {
    fprintf(stderr, "rerail ring-order: unknown --format '%s'\n", fmt);
    return usage(stderr);
  }
  char err[512] = "";
  const char *path = hosts != NULL ? hosts : matrix;
  char *text = read_all(path, err, sizeof(err));
  if (text == NULL) {
    fprintf(stderr, "rerail ring-order: %s\n", err);
    return 1;
  }
  rr_ring_hosts h;
  int rc = hosts != NULL ? rr_ring_parse_hosts(text, path, &h, err, sizeof(err))
                         : rr_ring_parse_matrix(text, path, &h, err, sizeof(err));
  free(text);
  if (rc != 0) {
    fprintf(stderr, "rerail ring-order: %s\n", err);
    rr_ring_hosts_free(&h);
    return 1;
  }
  int *order = malloc((size_t)h.n * sizeof(int)), *input = malloc((size_t)h.n * sizeof(int));
  if (order == NULL || input == NULL) {
    fprintf(stderr, "rerail ring-order: out of memory\n");
    free(order);
    free(input);
    rr_ring_hosts_free(&h);
    return 1;
  }
  for (int i = 0; i < h.n; i++) input[i] = i;
  if (hosts != NULL) {
    rr_ring_order_tor(&h, order);
    fprintf(stderr, "ring-order: %d hosts; the ring leaves a rack %d times (input order: %d)\n",
            h.n, racks_left(&h, order), racks_left(&h, input));
    if (nic_gbs > 0.0 && uplink_gbs > 0.0)
      fprintf(stderr, "ring-order: slowest hop %.2f GB/s (input order: %.2f GB/s) with %.1f GB/s "
              "NICs and %.1f GB/s rack uplinks\n",
              rr_ring_tor_bottleneck(&h, order, nic_gbs, uplink_gbs),
              rr_ring_tor_bottleneck(&h, input, nic_gbs, uplink_gbs), nic_gbs, uplink_gbs);
  } else {
    int exact = rr_ring_order_bw(&h, order);
    if (exact < 0) {
      fprintf(stderr, "rerail ring-order: no ring whose every hop has bandwidth > 0\n");
      free(order);
      free(input);
      rr_ring_hosts_free(&h);
      return 1;
    }
    fprintf(stderr, "ring-order: %d hosts, %s; slowest hop %.2f GB/s (input order: %.2f GB/s)\n",
            h.n, exact ? "exact" : "heuristic", rr_ring_bottleneck(&h, order),
            rr_ring_bottleneck(&h, input));
  }
  FILE *f = out != NULL ? fopen(out, "w") : stdout;
  if (f == NULL) {
    fprintf(stderr, "rerail ring-order: %s: %s\n", out, strerror(errno));
    free(order);
    free(input);
    rr_ring_hosts_free(&h);
    return 1;
  }
  if (!strcmp(fmt, "hostfile")) {
    for (int i = 0; i < h.n; i++) fprintf(f, "%s slots=%ld\n", h.name[order[i]], slots);
  } else if (!strcmp(fmt, "slurm")) {
    fprintf(f, "# SLURM_HOSTFILE=<this file> srun --distribution=arbitrary ...\n");
    for (int i = 0; i < h.n; i++)
      for (long s = 0; s < slots; s++) fprintf(f, "%s\n", h.name[order[i]]);
  } else if (!strcmp(fmt, "torchrun")) {
    fprintf(f, "# host node_rank: run torchrun --node_rank=<node_rank> on that host\n");
    for (int i = 0; i < h.n; i++) fprintf(f, "%s %d\n", h.name[order[i]], i);
  } else {
    fprintf(f, "# rank host local_rank\n");
    for (int i = 0; i < h.n; i++)
      for (long s = 0; s < slots; s++) fprintf(f, "%ld %s %ld\n", i * slots + s, h.name[order[i]], s);
  }
  int bad = ferror(f);
  if (out != NULL && fclose(f) != 0) bad = 1;
  free(order);
  free(input);
  rr_ring_hosts_free(&h);
  if (bad) {
    fprintf(stderr, "rerail ring-order: writing %s failed\n", out != NULL ? out : "stdout");
    return 1;
  }
  return 0;
}
