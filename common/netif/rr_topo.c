#include "rr_topo.h"
#include "rr_log.h"

#include <limits.h>
#ifdef RERAIL_HAVE_LIBNUMA
#include <numa.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *rr_topo_class_str(rr_topo_class c) {
  switch (c) {
  case RR_TOPO_SAME_DEVICE: return "same-device";
  case RR_TOPO_SAME_SWITCH: return "same-switch";
  case RR_TOPO_SAME_ROOT: return "same-root";
  case RR_TOPO_SAME_NUMA: return "same-numa";
  case RR_TOPO_OTHER_NUMA: return "other-numa";
  case RR_TOPO_UNKNOWN: return "unknown";
  }
  return "unknown";
}

/* ---- PCI paths ----------------------------------------------------------
 *
 * A kernel PCI path is <prefix>/pciDDDD:BB/<BDF>/<BDF>/.../<BDF>: the host
 * bridge, then one component per bridge on the way down (root port, switch
 * upstream port, switch downstream port, ...), then the device. The prefix is
 * normally "/sys/devices" but may be anything (a test's temp dir, Hyper-V's
 * VMBus nodes), and a VMD controller nests a second root ("pci10000:e0")
 * inside the tree, so the parser looks for the tail of PCI-looking components
 * rather than for fixed positions. Component names of a path are unique
 * kernel-wide, so two devices share a bridge exactly when their paths share
 * the component text. */

/* pci_path is at most 255 characters and every component takes at least two
 * ('/' and one character), so this bound is never what rejects a path. */
#define MAX_COMPONENTS ((int)sizeof(((rr_netif *)0)->pci_path) / 2 + 1)

typedef struct comp {
  const char *s;
  size_t len;
} comp;

typedef struct pci_loc {
  comp c[MAX_COMPONENTS];
  int root;  /* index of the host bridge component */
  int ncomp; /* c[ncomp - 1] is the device itself */
  unsigned dom, bus, dev, fn;
} pci_loc;

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* Parse exactly [min, max] hex digits at *s (advancing it) into *out. */
static int take_hex(const char **s, const char *end, int min, int max, unsigned *out) {
  unsigned v = 0;
  int n = 0;
  while (*s < end && n < max && hexval(**s) >= 0) v = v * 16 + (unsigned)hexval(*(*s)++), n++;
  if (n < min || (*s < end && hexval(**s) >= 0)) return 0;
  *out = v;
  return 1;
}

static int take_char(const char **s, const char *end, char ch) {
  if (*s >= end || **s != ch) return 0;
  (*s)++;
  return 1;
}

/* "DDDD:BB:DD.F" (domain of 4 to 8 hex digits: VMD domains have 5). */
static int parse_bdf(comp k, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn) {
  const char *s = k.s, *end = k.s + k.len;
  if (!take_hex(&s, end, 4, 8, dom) || !take_char(&s, end, ':') ||
      !take_hex(&s, end, 2, 2, bus) || !take_char(&s, end, ':') ||
      !take_hex(&s, end, 2, 2, dev) || !take_char(&s, end, '.') ||
      !take_hex(&s, end, 1, 1, fn) || s != end)
    return 0;
  return *dev <= 0x1f && *fn <= 7; /* what a BDF can encode (ARI still prints dev.fn) */
}

/* "pciDDDD:BB" */
static int is_root(comp k) {
  const char *s = k.s, *end = k.s + k.len;
  unsigned dom, bus;
  return take_char(&s, end, 'p') && take_char(&s, end, 'c') && take_char(&s, end, 'i') &&
         take_hex(&s, end, 4, 8, &dom) && take_char(&s, end, ':') &&
         take_hex(&s, end, 2, 2, &bus) && s == end;
}

static int is_bdf(comp k) {
  unsigned d, b, v, f;
  return parse_bdf(k, &d, &b, &v, &f);
}

/* Split path into loc; 0 when it is not a PCI device path. A path that fills
 * the whole buffer without a terminator was cut (or never written) and is
 * rejected rather than read past its end. */
static int pci_parse(const char *path, size_t cap, pci_loc *loc) {
  size_t len = strnlen(path, cap);
  if (len == 0 || len == cap) return 0;
  loc->ncomp = 0;
  for (size_t i = 0; i < len;) {
    while (i < len && path[i] == '/') i++; /* "//" and a trailing '/' are harmless */
    size_t start = i;
    while (i < len && path[i] != '/') i++;
    if (i == start) break;
    if (loc->ncomp == MAX_COMPONENTS) return 0;
    loc->c[loc->ncomp++] = (comp){path + start, i - start};
  }
  if (loc->ncomp < 2) return 0;
  /* Walk back over the PCI tail; its first component must be a host bridge,
   * its last a device (not a nested root), with at least one device between. */
  int first = loc->ncomp;
  while (first > 0 && (is_bdf(loc->c[first - 1]) || is_root(loc->c[first - 1]))) first--;
  if (first >= loc->ncomp || !is_root(loc->c[first])) return 0;
  if (!parse_bdf(loc->c[loc->ncomp - 1], &loc->dom, &loc->bus, &loc->dev, &loc->fn)) return 0;
  loc->root = first;
  return 1;
}

static int comp_eq(comp x, comp y) { return x.len == y.len && !memcmp(x.s, y.s, x.len); }

/* Class and refinement from two parsed paths; -1 when they hang off different
 * host bridges (then NUMA decides). */
static int pci_distance(const pci_loc *a, const pci_loc *b) {
  if (!comp_eq(a->c[a->root], b->c[b->root])) return -1;
  /* Bridges are c[root + 1 .. ncomp - 2]; count how many leading ones match. */
  int na = a->ncomp - a->root - 2, nb = b->ncomp - b->root - 2;
  int common = 0;
  while (common < na && common < nb &&
         comp_eq(a->c[a->root + 1 + common], b->c[b->root + 1 + common]))
    common++;
  /* Same bus implies the same parent bridge in a real tree; requiring the whole
   * bridge chain to match as well keeps an inconsistent (fake or corrupt) tree
   * from calling two distant devices one adapter. */
  if (na == nb && common == na && a->dom == b->dom && a->bus == b->bus && a->dev == b->dev)
    return RR_TOPO_SAME_DEVICE;
  if (common > 0) {
    int refine = RR_TOPO_CLASS_STRIDE - 1 - common;
    return RR_TOPO_SAME_SWITCH + (refine < 0 ? 0 : refine);
  }
  return RR_TOPO_SAME_ROOT;
}

/* ---- NUMA distances ------------------------------------------------------ */

/* libnuma builds its distance table lazily on first use without a lock; the
 * plugin calls in here from NCCL's proxy threads, so serialise. */
#ifdef RERAIL_HAVE_LIBNUMA
/* guards: libnuma's lazily built distance table (every numa_* call); a leaf. */
static pthread_mutex_t numa_lock = PTHREAD_MUTEX_INITIALIZER;
#endif

/* Entry `to` of <root>/devices/system/node/node<from>/distance; -1 if absent. */
static int sysfs_numa_distance(const char *root, int from, int to) {
  char path[PATH_MAX];
  int n = snprintf(path, sizeof path, "%s/devices/system/node/node%d/distance", root, from);
  if (n < 0 || (size_t)n >= sizeof path) return -1;
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int v = -1, d;
  for (int i = 0; fscanf(f, "%d", &d) == 1; i++)
    if (i == to) {
      v = d;
      break;
    }
  fclose(f);
  return v > 0 ? v : -1; /* 0 and negatives are not distances */
}

/* Built without libnuma (RERAIL_LIBNUMA=AUTO/OFF), the distances come from
 * sysfs alone: the same table libnuma reads. */
static int one_way_numa_distance(const char *root, int use_libnuma, int from, int to) {
#ifdef RERAIL_HAVE_LIBNUMA
  if (use_libnuma) {
    pthread_mutex_lock(&numa_lock);
    int d = numa_distance(from, to); /* 0 when libnuma does not know */
    pthread_mutex_unlock(&numa_lock);
    if (d > 0) return d;
  }
#else
  (void)use_libnuma;
#endif
  return sysfs_numa_distance(root, from, to);
}

static int numa_refinement(const char *root, int x, int y) {
  int use_libnuma = 0;
#ifdef RERAIL_HAVE_LIBNUMA
  if (!strcmp(root, "/sys")) {
    pthread_mutex_lock(&numa_lock);
    use_libnuma = numa_available() >= 0;
    pthread_mutex_unlock(&numa_lock);
  }
#endif
  /* SLIT tables may be asymmetric; the larger direction keeps
   * distance(a, b) == distance(b, a) without favouring either end. */
  int dxy = one_way_numa_distance(root, use_libnuma, x, y);
  int dyx = one_way_numa_distance(root, use_libnuma, y, x);
  int d = dxy > dyx ? dxy : dyx;
  if (d <= 0) d = RR_TOPO_NUMA_DISTANCE_DEFAULT;
  return d < RR_TOPO_CLASS_STRIDE ? d : RR_TOPO_CLASS_STRIDE - 1;
}

/* ---- Public ---------------------------------------------------------------- */

static int parse_nif(const rr_netif *nif, pci_loc *loc) {
  if (!nif->pci_path[0]) return 0; /* virtual interface: nothing to say */
  if (pci_parse(nif->pci_path, sizeof nif->pci_path, loc)) return 1;
  RR_TRACE("topology: %.*s: PCI path '%.*s' not understood, ranking by NUMA only",
           (int)sizeof nif->name, nif->name, (int)sizeof nif->pci_path, nif->pci_path);
  return 0;
}

int rr_topo_distance(const char *sysfs_root, const rr_netif *a, const rr_netif *b) {
  if (!a || !b) return RR_TOPO_UNKNOWN;
  if (!sysfs_root) sysfs_root = "/sys";
  /* Two locs are ~2 KiB each: fine on any thread's stack. */
  pci_loc la, lb;
  int pa = parse_nif(a, &la), pb = parse_nif(b, &lb);
  if (pa && pb) {
    int d = pci_distance(&la, &lb);
    if (d >= 0) return d;
  }
  int same_known = a->numa_node >= 0 && a->numa_node == b->numa_node;
  if (same_known) return RR_TOPO_SAME_NUMA;
  /* Without a PCI path on both sides a NUMA mismatch says too little to rank
   * against PCI-attached NICs on the other node: leave it unknown. */
  if (pa && pb && a->numa_node >= 0 && b->numa_node >= 0)
    return RR_TOPO_OTHER_NUMA + numa_refinement(sysfs_root, a->numa_node, b->numa_node);
  return RR_TOPO_UNKNOWN;
}

typedef struct chain_key {
  int dist;
  int speed;
  int index;
} chain_key;

/* Total order (index breaks every tie), so qsort's instability cannot leak. */
static int chain_cmp(const void *pa, const void *pb) {
  const chain_key *x = pa, *y = pb;
  if (x->dist != y->dist) return x->dist < y->dist ? -1 : 1;
  if (x->speed != y->speed) return x->speed > y->speed ? -1 : 1;
  return (x->index > y->index) - (x->index < y->index);
}

int rr_topo_failover_chain(const char *sysfs_root, const rr_netif *nifs, int n, int dev,
                           const unsigned char *healthy, int *chain, int max) {
  if (!nifs || n < 0 || dev < 0 || dev >= n || max < 0 || (max > 0 && !chain))
    return RR_ERR_INVALID;
  chain_key *keys = malloc((size_t)n * sizeof *keys);
  if (!keys) return RR_ERR_NOMEM;
  /* Distances are computed once per candidate, not in the comparator: a
   * distance reads sysfs, and a file changing mid-sort must not make the
   * comparison inconsistent. */
  int count = 0;
  for (int i = 0; i < n; i++) {
    if (i == dev || (healthy && !healthy[i])) continue;
    keys[count].dist = rr_topo_distance(sysfs_root, &nifs[dev], &nifs[i]);
    keys[count].speed = nifs[i].speed_mbps > 0 ? nifs[i].speed_mbps : 0;
    keys[count].index = i;
    count++;
  }
  qsort(keys, (size_t)count, sizeof *keys, chain_cmp);
  int out = count < max ? count : max;
  for (int i = 0; i < out; i++) chain[i] = keys[i].index;
  for (int i = 0; i < out; i++)
    RR_TRACE("topology: failover chain of %.*s [%d]: %.*s (%s, distance %d, %d Mb/s)",
             (int)sizeof nifs[dev].name, nifs[dev].name, i, (int)sizeof nifs[keys[i].index].name,
             nifs[keys[i].index].name, rr_topo_class_str(rr_topo_class_of(keys[i].dist)),
             keys[i].dist, keys[i].speed);
  free(keys);
  return out;
}
