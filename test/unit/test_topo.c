/* Failover-chain topology on fake sysfs trees shaped like real servers.
 *
 * Each tree is built under a mkdtemp() directory the way the kernel lays sysfs
 * out (PCI device directories under devices/pciDDDD:BB/..., numa_node files,
 * class/net/<if>/device symlinks, the NUMA distance table), then read back
 * through rr_netif_read_sysfs() exactly as the plugin reads /sys, so the tests
 * cover the path from sysfs to chain and not just the ranking. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rr_netif.h"
#include "rr_topo.h"

/* ---- fake sysfs ------------------------------------------------------------ */

/* snprintf into an array that must hold the whole result: a truncated path
 * would build a different tree than the test means. */
#define FMT(buf, ...) assert_true(snprintf((buf), sizeof(buf), __VA_ARGS__) < (int)sizeof(buf))

static void mkdirs(const char *path) {
  char buf[PATH_MAX];
  assert_true(strlen(path) < sizeof buf);
  strcpy(buf, path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    assert_true(mkdir(buf, 0755) == 0 || errno == EEXIST);
    *p = '/';
  }
  assert_true(mkdir(buf, 0755) == 0 || errno == EEXIST);
}

static void put(const char *root, const char *rel, const char *content) {
  char path[PATH_MAX];
  FMT(path, "%s/%s", root, rel);
  char *slash = strrchr(path, '/');
  *slash = '\0';
  mkdirs(path);
  *slash = '/';
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(content, f);
  fclose(f);
}

/* A PCI device at devices/<pcipath>; every bridge on the way gets a numa_node
 * file too, as in the kernel. */
static void add_pci(const char *root, const char *pcipath, int numa, const char *pci_class) {
  char rel[PATH_MAX], val[32];
  FMT(val, "%d\n", numa);
  FMT(rel, "devices/%s", pcipath);
  for (char *p = strchr(rel + strlen("devices/"), '/'); p; p = strchr(p + 1, '/')) {
    char sub[PATH_MAX];
    FMT(sub, "%.*s/numa_node", (int)(p - rel), rel);
    put(root, sub, val);
  }
  char file[PATH_MAX];
  FMT(file, "%s/numa_node", rel);
  put(root, file, val);
  FMT(file, "%s/class", rel);
  put(root, file, pci_class);
}

/* class/net/<ifname> with device -> ../../../<target> (target NULL: no device
 * link, like veth and lo) and a speed file (speed NULL: none). */
static void add_netdev(const char *root, const char *ifname, const char *target,
                       const char *speed) {
  char rel[PATH_MAX], path[PATH_MAX];
  FMT(path, "%s/class/net/%s", root, ifname);
  mkdirs(path);
  if (target) {
    char link[PATH_MAX];
    FMT(link, "../../../%s", target);
    FMT(path, "%s/class/net/%s/device", root, ifname);
    assert_int_equal(symlink(link, path), 0);
  }
  if (speed) {
    FMT(rel, "class/net/%s/speed", ifname);
    put(root, rel, speed);
  }
}

static void add_nic(const char *root, const char *ifname, const char *pcipath, int numa,
                    const char *speed) {
  char target[PATH_MAX];
  add_pci(root, pcipath, numa, "0x020000\n");
  FMT(target, "devices/%s", pcipath);
  add_netdev(root, ifname, target, speed);
}

static void add_numa_row(const char *root, int node, const char *row) {
  char rel[PATH_MAX];
  FMT(rel, "devices/system/node/node%d/distance", node);
  put(root, rel, row);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static char *make_root(void) {
  char tmpl[] = "/tmp/rr_topo.XXXXXX";
  char *dir = mkdtemp(tmpl);
  assert_non_null(dir);
  return strdup(dir);
}

static void remove_root(char *root) {
  if (!root) return;
  nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(root);
}

static void load(const char *root, rr_netif *nif, const char *name) {
  memset(nif, 0, sizeof *nif);
  strcpy(nif->name, name);
  rr_netif_read_sysfs(root, nif);
}

/* Does nif's pci_path end in "/<tail>"? */
static int path_ends(const rr_netif *nif, const char *tail) {
  size_t n = strlen(nif->pci_path), t = strlen(tail);
  return n > t && nif->pci_path[n - t - 1] == '/' && !strcmp(nif->pci_path + n - t, tail);
}

static void expect_chain(const char *root, const rr_netif *nifs, int n, int dev,
                         const unsigned char *healthy, const int *want, int nwant) {
  int got[RR_MAX_NETIFS];
  int rc = rr_topo_failover_chain(root, nifs, n, dev, healthy, got, RR_MAX_NETIFS);
  if (rc != nwant) fprintf(stderr, "chain of %s: %d entries, want %d\n", nifs[dev].name, rc, nwant);
  for (int i = 0; i < rc && i < nwant; i++)
    if (got[i] != want[i])
      fprintf(stderr, "chain of %s [%d]: %s, want %s\n", nifs[dev].name, i, nifs[got[i]].name,
              nifs[want[i]].name);
  assert_int_equal(rc, nwant);
  assert_memory_equal(got, want, (size_t)nwant * sizeof *want);
}

#define CHAIN(root, nifs, n, dev, healthy, ...)                                             \
  do {                                                                                      \
    const int want_[] = {__VA_ARGS__};                                                      \
    expect_chain(root, nifs, n, dev, healthy, want_, (int)(sizeof want_ / sizeof *want_)); \
  } while (0)

/* ---- tree 1: 8-GPU, 8-NIC server ---------------------------------------------
 *
 * Two sockets (NUMA 0 and 1), two PCIe switches per socket, each switch with
 * two NICs and two GPUs behind its downstream ports. NIC0 is a dual-port
 * adapter: its second port (function 1) is the netdev nic0b. Socket 0's
 * switches sit under two root ports of one host bridge (pci0000:00); socket
 * 1's under two host bridges (pci0000:80, pci0000:c0), as on CPUs with one
 * host bridge per PCIe stack. nic2 negotiated 200G, the rest 400G.
 *
 * Index order is the discovery order: nic0..nic7, then nic0b. */
enum { NIC0, NIC1, NIC2, NIC3, NIC4, NIC5, NIC6, NIC7, NIC0B, T1_N };
static char *t1_root;
static rr_netif t1[T1_N];

static const char *const t1_names[T1_N] = {"nic0", "nic1", "nic2", "nic3", "nic4",
                                           "nic5", "nic6", "nic7", "nic0b"};

static void build_switch(const char *root, const char *host, int rp, int up_bus, int numa,
                         const char *nic_a, const char *nic_b, const char *speed_a,
                         const char *speed_b) {
  /* root port <host>:rp.0 -> switch upstream port up_bus:00.0 -> downstream
   * ports (up_bus+1):0x.0 -> endpoints on buses up_bus+2 .. up_bus+5 */
  char base[256], p[512];
  unsigned dom = 0;
  FMT(base, "pci%04x:%s/%04x:%s:%02x.0/%04x:%02x:00.0", dom, host, dom, host,
           rp, dom, up_bus);
  for (int port = 0; port < 4; port++) {
    int bus = up_bus + 2 + port;
    FMT(p, "%s/%04x:%02x:%02x.0/%04x:%02x:00.0", base, dom, up_bus + 1, port, dom,
             bus);
    if (port == 0) add_nic(root, nic_a, p, numa, speed_a);
    else if (port == 1) add_nic(root, nic_b, p, numa, speed_b);
    else add_pci(root, p, numa, "0x030200\n"); /* a GPU: in the tree, not a netdev */
  }
}

static int t1_setup(void **state) {
  (void)state;
  t1_root = make_root();
  const char *r = t1_root;
  build_switch(r, "00", 0x01, 0x01, 0, "nic0", "nic1", "400000\n", "400000\n");
  build_switch(r, "00", 0x03, 0x07, 0, "nic2", "nic3", "200000\n", "400000\n");
  build_switch(r, "80", 0x01, 0x81, 1, "nic4", "nic5", "400000\n", "400000\n");
  build_switch(r, "c0", 0x01, 0xc1, 1, "nic6", "nic7", "400000\n", "400000\n");
  /* nic0's second port: function 1 of the same adapter. */
  add_nic(r, "nic0b", "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.1", 0,
          "400000\n");
  add_numa_row(r, 0, "10 21\n");
  add_numa_row(r, 1, "21 10\n");
  for (int i = 0; i < T1_N; i++) load(r, &t1[i], t1_names[i]);
  return 0;
}

static int t1_teardown(void **state) {
  (void)state;
  remove_root(t1_root);
  t1_root = NULL;
  return 0;
}

static void test_t1_sysfs_read(void **state) {
  (void)state;
  assert_true(path_ends(&t1[NIC0], "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"));
  assert_true(path_ends(&t1[NIC0B], "0000:02:00.0/0000:03:00.1"));
  assert_true(path_ends(&t1[NIC7], "pci0000:c0/0000:c0:01.0/0000:c1:00.0/0000:c2:01.0/0000:c4:00.0"));
  assert_int_equal(t1[NIC0].numa_node, 0);
  assert_int_equal(t1[NIC5].numa_node, 1);
  assert_int_equal(t1[NIC2].speed_mbps, 200000);
  assert_int_equal(t1[NIC3].speed_mbps, 400000);
}

static void test_t1_classes(void **state) {
  (void)state;
  const char *r = t1_root;
  assert_int_equal(rr_topo_distance(r, &t1[NIC0], &t1[NIC0B]), RR_TOPO_SAME_DEVICE);
  assert_int_equal(rr_topo_class_of(rr_topo_distance(r, &t1[NIC0], &t1[NIC1])),
                   RR_TOPO_SAME_SWITCH);
  assert_int_equal(rr_topo_class_of(rr_topo_distance(r, &t1[NIC0B], &t1[NIC1])),
                   RR_TOPO_SAME_SWITCH);
  assert_int_equal(rr_topo_distance(r, &t1[NIC0], &t1[NIC2]), RR_TOPO_SAME_ROOT);
  assert_int_equal(rr_topo_distance(r, &t1[NIC4], &t1[NIC6]), RR_TOPO_SAME_NUMA);
  assert_int_equal(rr_topo_distance(r, &t1[NIC0], &t1[NIC4]), RR_TOPO_OTHER_NUMA + 21);
  assert_int_equal(rr_topo_distance(r, &t1[NIC3], &t1[NIC7]), RR_TOPO_OTHER_NUMA + 21);
  /* The classes are strictly ordered. */
  assert_true(RR_TOPO_SAME_DEVICE < RR_TOPO_SAME_SWITCH);
  assert_true(rr_topo_distance(r, &t1[NIC0], &t1[NIC1]) < RR_TOPO_SAME_ROOT);
  assert_true(RR_TOPO_SAME_ROOT < RR_TOPO_SAME_NUMA);
  assert_true(RR_TOPO_OTHER_NUMA + RR_TOPO_CLASS_STRIDE - 1 < RR_TOPO_UNKNOWN);
  assert_string_equal(rr_topo_class_str(RR_TOPO_SAME_SWITCH), "same-switch");
}

static void test_t1_symmetric(void **state) {
  (void)state;
  for (int i = 0; i < T1_N; i++)
    for (int j = 0; j < T1_N; j++)
      assert_int_equal(rr_topo_distance(t1_root, &t1[i], &t1[j]),
                       rr_topo_distance(t1_root, &t1[j], &t1[i]));
}

static void test_t1_chains(void **state) {
  (void)state;
  const char *r = t1_root;
  /* Port twin, switch neighbour, the other switch of the socket (400G nic3
   * before 200G nic2), then the other socket by index. */
  CHAIN(r, t1, T1_N, NIC0, NULL, NIC0B, NIC1, NIC3, NIC2, NIC4, NIC5, NIC6, NIC7);
  CHAIN(r, t1, T1_N, NIC0B, NULL, NIC0, NIC1, NIC3, NIC2, NIC4, NIC5, NIC6, NIC7);
  /* Both ports of the adapter are equally close to nic1: index decides. */
  CHAIN(r, t1, T1_N, NIC1, NULL, NIC0, NIC0B, NIC3, NIC2, NIC4, NIC5, NIC6, NIC7);
  CHAIN(r, t1, T1_N, NIC2, NULL, NIC3, NIC0, NIC1, NIC0B, NIC4, NIC5, NIC6, NIC7);
  /* Socket 1: switch neighbour, the other host bridge of the node, then socket
   * 0 with 400G by index (nic0b's index is last) before the 200G nic2. */
  CHAIN(r, t1, T1_N, NIC4, NULL, NIC5, NIC6, NIC7, NIC0, NIC1, NIC3, NIC0B, NIC2);
  CHAIN(r, t1, T1_N, NIC7, NULL, NIC6, NIC4, NIC5, NIC0, NIC1, NIC3, NIC0B, NIC2);
}

static void test_t1_unhealthy(void **state) {
  (void)state;
  const char *r = t1_root;
  unsigned char healthy[T1_N];
  memset(healthy, 1, sizeof healthy);
  healthy[NIC0B] = 0;
  healthy[NIC1] = 0;
  CHAIN(r, t1, T1_N, NIC0, healthy, NIC3, NIC2, NIC4, NIC5, NIC6, NIC7);
  healthy[NIC5] = 0;
  healthy[NIC6] = 0;
  CHAIN(r, t1, T1_N, NIC4, healthy, NIC7, NIC0, NIC3, NIC2);
  /* The failed NIC's own health does not matter: it is never in its chain. */
  healthy[NIC0] = 0;
  CHAIN(r, t1, T1_N, NIC0, healthy, NIC3, NIC2, NIC4, NIC7);
  memset(healthy, 0, sizeof healthy);
  int chain[T1_N];
  assert_int_equal(rr_topo_failover_chain(r, t1, T1_N, NIC0, healthy, chain, T1_N), 0);
}

static void test_t1_truncated_and_deterministic(void **state) {
  (void)state;
  const char *r = t1_root;
  int chain[T1_N], first[T1_N];
  assert_int_equal(rr_topo_failover_chain(r, t1, T1_N, NIC0, NULL, chain, 3), 3);
  assert_int_equal(chain[0], NIC0B);
  assert_int_equal(chain[1], NIC1);
  assert_int_equal(chain[2], NIC3);
  assert_int_equal(rr_topo_failover_chain(r, t1, T1_N, NIC0, NULL, NULL, 0), 0);
  /* Same inputs, same chain, every time, for every device. */
  for (int dev = 0; dev < T1_N; dev++) {
    assert_int_equal(rr_topo_failover_chain(r, t1, T1_N, dev, NULL, first, T1_N), T1_N - 1);
    for (int k = 0; k < 50; k++) {
      assert_int_equal(rr_topo_failover_chain(r, t1, T1_N, dev, NULL, chain, T1_N), T1_N - 1);
      assert_memory_equal(chain, first, sizeof(int) * (T1_N - 1));
    }
  }
  /* The chain is a permutation of the others. */
  for (int dev = 0; dev < T1_N; dev++) {
    int seen[T1_N] = {0};
    rr_topo_failover_chain(r, t1, T1_N, dev, NULL, chain, T1_N);
    for (int i = 0; i < T1_N - 1; i++) {
      assert_int_not_equal(chain[i], dev);
      assert_int_equal(seen[chain[i]]++, 0);
    }
  }
}

static void test_bad_args(void **state) {
  (void)state;
  int chain[4];
  assert_true(rr_topo_failover_chain("/sys", NULL, 2, 0, NULL, chain, 4) < 0);
  assert_true(rr_topo_failover_chain("/sys", t1, -1, 0, NULL, chain, 4) < 0);
  assert_true(rr_topo_failover_chain("/sys", t1, T1_N, T1_N, NULL, chain, 4) < 0);
  assert_true(rr_topo_failover_chain("/sys", t1, T1_N, -1, NULL, chain, 4) < 0);
  assert_true(rr_topo_failover_chain("/sys", t1, T1_N, 0, NULL, chain, -1) < 0);
  assert_true(rr_topo_failover_chain("/sys", t1, T1_N, 0, NULL, NULL, 4) < 0);
  assert_int_equal(rr_topo_failover_chain("/sys", t1, 1, 0, NULL, chain, 4), 0);
  assert_int_equal(rr_topo_distance("/sys", NULL, &t1[0]), RR_TOPO_UNKNOWN);
  assert_int_equal(rr_topo_distance("/sys", &t1[0], NULL), RR_TOPO_UNKNOWN);
}

/* ---- tree 2: 2-socket host, NICs on root ports, plus virtual interfaces ------
 *
 * Socket 0: eth0 (25G) and eth1 (100G) on two root ports of pci0000:00.
 * Socket 1: eth2 and eth3 (100G) on two host bridges, pci0000:40 and
 * pci0000:60. The SLIT is asymmetric (node0 -> node1 32, node1 -> node0 31).
 * Then what has no PCI path: veth0 (no device link, 10G), plat0 (a platform
 * device with numa_node 0, 1G), ghost0 (device link to nothing, no speed). */
enum { ETH0, ETH1, ETH2, ETH3, VETH0, PLAT0, GHOST0, T2_N };
static char *t2_root;
static rr_netif t2[T2_N];
static const char *const t2_names[T2_N] = {"eth0",  "eth1",  "eth2",  "eth3",
                                           "veth0", "plat0", "ghost0"};

static int t2_setup(void **state) {
  (void)state;
  t2_root = make_root();
  const char *r = t2_root;
  add_nic(r, "eth0", "pci0000:00/0000:00:02.0/0000:01:00.0", 0, "25000\n");
  add_nic(r, "eth1", "pci0000:00/0000:00:03.0/0000:02:00.0", 0, "100000\n");
  add_nic(r, "eth2", "pci0000:40/0000:40:01.0/0000:41:00.0", 1, "100000\n");
  add_nic(r, "eth3", "pci0000:60/0000:60:01.0/0000:61:00.0", 1, "100000\n");
  add_netdev(r, "veth0", NULL, "10000\n");
  put(r, "devices/platform/soc/eth-plat.0/numa_node", "0\n");
  add_netdev(r, "plat0", "devices/platform/soc/eth-plat.0", "1000\n");
  add_netdev(r, "ghost0", "devices/pci0000:00/0000:00:09.0/0000:09:00.0", NULL);
  add_numa_row(r, 0, "10 32\n");
  add_numa_row(r, 1, "31 10\n");
  for (int i = 0; i < T2_N; i++) load(r, &t2[i], t2_names[i]);
  return 0;
}

static int t2_teardown(void **state) {
  (void)state;
  remove_root(t2_root);
  t2_root = NULL;
  return 0;
}

static void test_t2_sysfs_read(void **state) {
  (void)state;
  assert_true(path_ends(&t2[ETH2], "pci0000:40/0000:40:01.0/0000:41:00.0"));
  assert_string_equal(t2[VETH0].pci_path, "");
  assert_string_equal(t2[PLAT0].pci_path, "");
  assert_string_equal(t2[GHOST0].pci_path, "");
  assert_int_equal(t2[VETH0].numa_node, -1);
  assert_int_equal(t2[PLAT0].numa_node, 0);
  assert_int_equal(t2[GHOST0].numa_node, -1);
  assert_int_equal(t2[GHOST0].speed_mbps, 0);
}

static void test_t2_classes(void **state) {
  (void)state;
  const char *r = t2_root;
  assert_int_equal(rr_topo_distance(r, &t2[ETH0], &t2[ETH1]), RR_TOPO_SAME_ROOT);
  assert_int_equal(rr_topo_distance(r, &t2[ETH2], &t2[ETH3]), RR_TOPO_SAME_NUMA);
  /* Asymmetric SLIT: the larger direction, both ways. */
  assert_int_equal(rr_topo_distance(r, &t2[ETH0], &t2[ETH2]), RR_TOPO_OTHER_NUMA + 32);
  assert_int_equal(rr_topo_distance(r, &t2[ETH3], &t2[ETH1]), RR_TOPO_OTHER_NUMA + 32);
  /* No PCI path: same known NUMA node, else unknown. */
  assert_int_equal(rr_topo_distance(r, &t2[PLAT0], &t2[ETH0]), RR_TOPO_SAME_NUMA);
  assert_int_equal(rr_topo_distance(r, &t2[PLAT0], &t2[ETH2]), RR_TOPO_UNKNOWN);
  assert_int_equal(rr_topo_distance(r, &t2[VETH0], &t2[ETH0]), RR_TOPO_UNKNOWN);
  assert_int_equal(rr_topo_distance(r, &t2[VETH0], &t2[GHOST0]), RR_TOPO_UNKNOWN);
  for (int i = 0; i < T2_N; i++)
    for (int j = 0; j < T2_N; j++)
      assert_int_equal(rr_topo_distance(r, &t2[i], &t2[j]), rr_topo_distance(r, &t2[j], &t2[i]));
}

static void test_t2_chains(void **state) {
  (void)state;
  const char *r = t2_root;
  CHAIN(r, t2, T2_N, ETH0, NULL, ETH1, PLAT0, ETH2, ETH3, VETH0, GHOST0);
  CHAIN(r, t2, T2_N, ETH1, NULL, ETH0, PLAT0, ETH2, ETH3, VETH0, GHOST0);
  /* Other socket: 100G eth1 before 25G eth0; unknowns last, by speed. */
  CHAIN(r, t2, T2_N, ETH2, NULL, ETH3, ETH1, ETH0, VETH0, PLAT0, GHOST0);
  /* From a virtual interface everything is unknown: speed, then index. */
  CHAIN(r, t2, T2_N, VETH0, NULL, ETH1, ETH2, ETH3, ETH0, PLAT0, GHOST0);
  CHAIN(r, t2, T2_N, PLAT0, NULL, ETH1, ETH0, ETH2, ETH3, VETH0, GHOST0);
  unsigned char healthy[T2_N] = {1, 0, 1, 1, 1, 0, 1};
  CHAIN(r, t2, T2_N, ETH0, healthy, ETH2, ETH3, VETH0, GHOST0);
}

/* NUMA nodes the table does not describe: Linux's remote default. */
static void test_t2_missing_numa_table(void **state) {
  (void)state;
  rr_netif a = t2[ETH0], b = t2[ETH2];
  a.numa_node = 5;
  b.numa_node = 6;
  assert_int_equal(rr_topo_distance(t2_root, &a, &b),
                   RR_TOPO_OTHER_NUMA + RR_TOPO_NUMA_DISTANCE_DEFAULT);
  /* A root with no table at all. */
  assert_int_equal(rr_topo_distance("/nonexistent/rr_topo", &t2[ETH0], &t2[ETH2]),
                   RR_TOPO_OTHER_NUMA + RR_TOPO_NUMA_DISTANCE_DEFAULT);
  /* Unknown NUMA on different host bridges: unknown. */
  a = t2[ETH0];
  a.numa_node = -1;
  assert_int_equal(rr_topo_distance(t2_root, &a, &t2[ETH2]), RR_TOPO_UNKNOWN);
}

/* ---- tree 3: deep switches and four NUMA nodes ------------------------------
 *
 * Node 0: root port -> switch A -> two leaf switches B1 (n0a, n0b) and B2
 * (n0c). Nodes 1-3: one NIC each on its own host bridge. SLIT of a two-socket,
 * two-nodes-per-socket box where node 3 is a little nearer to node 0 than
 * node 2 is: index order (n1, n2, n3) is not the distance order. */
enum { N0A, N0B, N0C, N1, N2, N3, T3_N };
static char *t3_root;
static rr_netif t3[T3_N];
static const char *const t3_names[T3_N] = {"n0a", "n0b", "n0c", "n1", "n2", "n3"};

static int t3_setup(void **state) {
  (void)state;
  t3_root = make_root();
  const char *r = t3_root;
  const char *a = "pci0000:00/0000:00:01.0/0000:01:00.0";
  char p[512];
  FMT(p, "%s/0000:02:00.0/0000:03:00.0/0000:04:00.0/0000:05:00.0", a);
  add_nic(r, "n0a", p, 0, "200000\n");
  FMT(p, "%s/0000:02:00.0/0000:03:00.0/0000:04:01.0/0000:06:00.0", a);
  add_nic(r, "n0b", p, 0, "200000\n");
  FMT(p, "%s/0000:02:01.0/0000:07:00.0/0000:08:00.0/0000:09:00.0", a);
  add_nic(r, "n0c", p, 0, "200000\n");
  add_nic(r, "n1", "pci0000:20/0000:20:01.0/0000:21:00.0", 1, "200000\n");
  add_nic(r, "n2", "pci0000:40/0000:40:01.0/0000:41:00.0", 2, "200000\n");
  add_nic(r, "n3", "pci0000:60/0000:60:01.0/0000:61:00.0", 3, "200000\n");
  add_numa_row(r, 0, "10 12 32 30\n");
  add_numa_row(r, 1, "12 10 32 32\n");
  add_numa_row(r, 2, "32 32 10 12\n");
  add_numa_row(r, 3, "30 32 12 10\n");
  for (int i = 0; i < T3_N; i++) load(r, &t3[i], t3_names[i]);
  return 0;
}

static int t3_teardown(void **state) {
  (void)state;
  remove_root(t3_root);
  t3_root = NULL;
  return 0;
}

static void test_t3_chains(void **state) {
  (void)state;
  const char *r = t3_root;
  int leaf = rr_topo_distance(r, &t3[N0A], &t3[N0B]);
  int sibling = rr_topo_distance(r, &t3[N0A], &t3[N0C]);
  assert_int_equal(rr_topo_class_of(leaf), RR_TOPO_SAME_SWITCH);
  assert_int_equal(rr_topo_class_of(sibling), RR_TOPO_SAME_SWITCH);
  assert_true(leaf < sibling);
  assert_int_equal(rr_topo_distance(r, &t3[N0A], &t3[N1]), RR_TOPO_OTHER_NUMA + 12);
  CHAIN(r, t3, T3_N, N0A, NULL, N0B, N0C, N1, N3, N2);
  CHAIN(r, t3, T3_N, N0C, NULL, N0A, N0B, N1, N3, N2);
  CHAIN(r, t3, T3_N, N2, NULL, N3, N0A, N0B, N0C, N1);
  CHAIN(r, t3, T3_N, N3, NULL, N2, N0A, N0B, N0C, N1);
}

/* ---- PCI paths that are not what the kernel writes ---------------------------- */

static rr_netif with_path(const char *path, int numa) {
  rr_netif nif;
  memset(&nif, 0, sizeof nif);
  strcpy(nif.name, "x");
  FMT(nif.pci_path, "%s", path);
  nif.numa_node = numa;
  return nif;
}

static void test_malformed_paths(void **state) {
  (void)state;
  rr_netif good = with_path("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0", 0);
  static const char *const bad[] = {
      "/",
      "////",
      "pci0000:00",
      "/sys/devices/pci0000:00",
      "/sys/devices/pci0000:00/",
      "/sys/devices/0000:00:01.0/0000:01:00.0",          /* no host bridge */
      "/sys/devices/pci0000:00/garbage/0000:01:00.0",    /* junk inside the tail */
      "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00", /* cut BDF */
      "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0.1",
      "/sys/devices/pci0000:00/0000:00:01.0/0000:01:20.0", /* device 0x20 */
      "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.8", /* function 8 */
      "/sys/devices/pci0000:00/0000:00:01.0/0000:0g:00.0",
      "/sys/devices/pci0000:00/0000:00:01.0/000000000:01:00.0", /* 9-digit domain */
      "/sys/devices/pci0000:00/0000:00:01.0/pci0000:01",        /* ends in a root */
      "/sys/devices/pci0000:0/0000:00:01.0/0000:01:00.0",       /* 1-digit root bus */
      "/sys/devices/pcx0000:00/0000:00:01.0/0000:01:00.0",
      "/sys/devices/pci0000:00/0000:00:01.0/net/eth0",
      "relative/0000:01:00.0",
      ":::::",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    rr_netif b = with_path(bad[i], -1);
    if (rr_topo_distance("/sys", &good, &b) != RR_TOPO_UNKNOWN)
      fprintf(stderr, "accepted malformed path '%s'\n", bad[i]);
    assert_int_equal(rr_topo_distance("/sys", &good, &b), RR_TOPO_UNKNOWN);
    assert_int_equal(rr_topo_distance("/sys", &b, &b), RR_TOPO_UNKNOWN);
    /* The NUMA fallback still applies. */
    b.numa_node = 0;
    assert_int_equal(rr_topo_distance("/sys", &good, &b), RR_TOPO_SAME_NUMA);
  }
  /* A buffer with no terminator: rejected, not read past its end. */
  rr_netif full = good;
  memset(full.pci_path, '/', sizeof full.pci_path);
  memcpy(full.pci_path, good.pci_path, strlen(good.pci_path));
  full.numa_node = -1;
  assert_int_equal(rr_topo_distance("/sys", &good, &full), RR_TOPO_UNKNOWN);
  /* A path full of components, at the length limit. */
  rr_netif deep = good;
  memset(deep.pci_path, 0, sizeof deep.pci_path);
  deep.numa_node = -1;
  for (size_t k = 0; k + 2 < sizeof deep.pci_path; k += 2) memcpy(deep.pci_path + k, "/a", 2);
  assert_int_equal(rr_topo_distance("/sys", &good, &deep), RR_TOPO_UNKNOWN);
  /* ... and the same prefix of components ending in a real PCI tail is fine. */
  const char *tail = "/pci0000:00/0000:00:01.0/0000:01:00.1";
  size_t at = sizeof deep.pci_path - 1 - strlen(tail);
  memcpy(deep.pci_path + at, tail, strlen(tail) + 1);
  assert_int_equal(rr_topo_distance("/sys", &good, &deep), RR_TOPO_SAME_DEVICE);
  /* Harmless oddities are accepted: "//" and a trailing '/'. */
  rr_netif odd = with_path("/sys//devices/pci0000:00//0000:00:01.0/0000:01:00.1/", -1);
  assert_int_equal(rr_topo_distance("/sys", &good, &odd), RR_TOPO_SAME_DEVICE);
}

static void test_unusual_but_valid_paths(void **state) {
  (void)state;
  /* Behind a VMD controller: a nested 5-digit domain. */
  rr_netif v1 = with_path(
      "/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:1d.0/10000:e1:00.0", 0);
  rr_netif v1b = with_path(
      "/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:1d.0/10000:e1:00.1", 0);
  rr_netif v2 = with_path(
      "/sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:1c.0/10000:e2:00.0", 0);
  rr_netif rp = with_path("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0", 0);
  assert_int_equal(rr_topo_distance("/sys", &v1, &v1b), RR_TOPO_SAME_DEVICE);
  assert_int_equal(rr_topo_class_of(rr_topo_distance("/sys", &v1, &v2)), RR_TOPO_SAME_SWITCH);
  assert_int_equal(rr_topo_distance("/sys", &v1, &rp), RR_TOPO_SAME_ROOT);
  /* Integrated endpoints on the root bus, and a Hyper-V style prefix. */
  rr_netif i1 = with_path("/sys/devices/pci0000:00/0000:00:1f.6", -1);
  rr_netif i2 = with_path("/sys/devices/pci0000:00/0000:00:19.0", -1);
  assert_int_equal(rr_topo_distance("/sys", &i1, &i2), RR_TOPO_SAME_ROOT);
  rr_netif h1 = with_path("/sys/devices/LNXSYSTM:00/VMBUS:00/abcd-ef/pci7870:00/7870:00:00.0", -1);
  rr_netif h2 = with_path("/sys/devices/LNXSYSTM:00/VMBUS:00/abcd-f0/pci7871:00/7871:00:00.0", -1);
  assert_int_equal(rr_topo_distance("/sys", &h1, &h1), RR_TOPO_SAME_DEVICE);
  assert_int_equal(rr_topo_distance("/sys", &h1, &h2), RR_TOPO_UNKNOWN);
  /* Two netdevs on one PCI function (mlx4-style ports). */
  assert_int_equal(rr_topo_distance("/sys", &rp, &rp), RR_TOPO_SAME_DEVICE);
}

/* The real /sys goes through libnuma when it works; whatever this host's table
 * holds, the answer stays in its class and symmetric. */
static void test_real_sys(void **state) {
  (void)state;
  rr_netif a = with_path("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0", 0);
  rr_netif b = with_path("/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0", 1);
  int d = rr_topo_distance("/sys", &a, &b);
  assert_int_equal(rr_topo_class_of(d), RR_TOPO_OTHER_NUMA);
  assert_int_equal(d, rr_topo_distance(NULL, &b, &a));
  b.numa_node = 0;
  assert_int_equal(rr_topo_distance("/sys", &a, &b), RR_TOPO_SAME_NUMA);
}

/* ---- rail ids ---------------------------------------------------------------- */

static rr_netif addr_nif(const char *addr, int prefix_len) {
  rr_netif n;
  memset(&n, 0, sizeof n);
  n.prefix_len = prefix_len;
  if (strchr(addr, ':')) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&n.addr;
    a->sin6_family = AF_INET6;
    assert_int_equal(inet_pton(AF_INET6, addr, &a->sin6_addr), 1);
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)&n.addr;
    a->sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, addr, &a->sin_addr), 1);
  }
  return n;
}

static int rail_of(const char *addr, int prefix_len) {
  rr_netif n = addr_nif(addr, prefix_len);
  return rr_netif_rail_id(&n);
}

/* NCCL's railId (net v12) is the NIC's subnet: NICs in one subnet share it on
 * every host whatever their host bits, NICs of different subnets (a
 * rail-optimized cluster's rails) get different ids, and an address that
 * names no shared network gives none (-1). */
static void test_rail_ids_follow_subnets(void **state) {
  (void)state;
  int r0 = rail_of("10.77.0.1", 24), r1 = rail_of("10.77.1.1", 24);
  assert_true(r0 >= 0 && r0 <= 32767);
  assert_true(r1 >= 0 && r1 <= 32767);
  assert_int_not_equal(r0, r1);
  assert_int_equal(rail_of("10.77.0.2", 24), r0);   /* the peer host's NIC on rail 0 */
  assert_int_equal(rail_of("10.77.0.254", 24), r0);
  assert_int_not_equal(rail_of("10.77.0.1", 16), r0); /* another network */
  assert_int_equal(rail_of("10.77.0.1", 16), rail_of("10.77.1.1", 16)); /* one flat /16: one rail */
  int v6 = rail_of("fd00:77:0:1::5", 64);
  assert_true(v6 >= 0 && v6 <= 32767);
  assert_int_equal(rail_of("fd00:77:0:1::9", 64), v6);
  assert_int_not_equal(rail_of("fd00:77:0:2::5", 64), v6);
  /* Eight rails of a /24 each: all told apart. */
  int ids[8];
  for (int i = 0; i < 8; i++) {
    char a[32];
    snprintf(a, sizeof a, "192.168.%d.10", i);
    ids[i] = rail_of(a, 24);
    for (int k = 0; k < i; k++) assert_int_not_equal(ids[i], ids[k]);
  }
  /* Unknown: host routes, no prefix, loopback, no address. */
  assert_int_equal(rail_of("10.77.0.1", 32), -1);
  assert_int_equal(rail_of("fd00::1", 128), -1);
  assert_int_equal(rail_of("10.77.0.1", 0), -1);
  assert_int_equal(rail_of("10.77.0.1", -1), -1);
  rr_netif lo = addr_nif("127.0.0.1", 8);
  lo.is_loopback = 1;
  assert_int_equal(rr_netif_rail_id(&lo), -1);
  rr_netif none;
  memset(&none, 0, sizeof none);
  none.prefix_len = 24;
  assert_int_equal(rr_netif_rail_id(&none), -1);
  assert_int_equal(rr_netif_rail_id(NULL), -1);
}

int main(void) {
  const struct CMUnitTest t1_tests[] = {
      cmocka_unit_test(test_t1_sysfs_read),
      cmocka_unit_test(test_t1_classes),
      cmocka_unit_test(test_t1_symmetric),
      cmocka_unit_test(test_t1_chains),
      cmocka_unit_test(test_t1_unhealthy),
      cmocka_unit_test(test_t1_truncated_and_deterministic),
      cmocka_unit_test(test_bad_args),
  };
  const struct CMUnitTest t2_tests[] = {
      cmocka_unit_test(test_t2_sysfs_read),
      cmocka_unit_test(test_t2_classes),
      cmocka_unit_test(test_t2_chains),
      cmocka_unit_test(test_t2_missing_numa_table),
  };
  const struct CMUnitTest t3_tests[] = {
      cmocka_unit_test(test_t3_chains),
  };
  const struct CMUnitTest path_tests[] = {
      cmocka_unit_test(test_malformed_paths),
      cmocka_unit_test(test_unusual_but_valid_paths),
      cmocka_unit_test(test_real_sys),
      cmocka_unit_test(test_rail_ids_follow_subnets),
  };
  int failed = 0;
  failed += cmocka_run_group_tests_name("topo_8gpu_server", t1_tests, t1_setup, t1_teardown);
  failed += cmocka_run_group_tests_name("topo_root_ports", t2_tests, t2_setup, t2_teardown);
  failed += cmocka_run_group_tests_name("topo_deep_numa4", t3_tests, t3_setup, t3_teardown);
  failed += cmocka_run_group_tests_name("topo_paths", path_tests, NULL, NULL);
  return failed ? 1 : 0;
}
