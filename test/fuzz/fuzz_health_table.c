/* Fuzz the shared health table reader (common/health/rr_health_table_reader.c):
 * the file any process of the host that may write it can fill with anything.
 * Each input becomes the whole file (a private temporary one, mode 0600) and
 * is read through the real API, both ways a caller does: open-read-close
 * and a long-lived reader read twice. Whatever the bytes, a snapshot that
 * succeeds holds only rows a caller can print and trust the shape of. */
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "rr_health_table.h"

static char dir[4096], path[4200];

static void cleanup(void) {
  unlink(path);
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  rr_log_set_logger(fuzz_quiet_logger);
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/rr-fuzz-ht-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) abort();
  snprintf(path, sizeof path, "%s/health", dir);
  atexit(cleanup);
  return 0;
}

static void check_snapshot(const rr_ht_snapshot *s) {
  FUZZ_CHECK(s->problem == RR_HT_FINE);
  FUZZ_CHECK(s->nic_count >= 0 && (uint32_t)s->nic_count <= s->header.nic_rows);
  FUZZ_CHECK(s->peer_count >= 0 && (uint32_t)s->peer_count <= s->header.peer_rows);
  FUZZ_CHECK(s->live_nics <= s->nic_count && s->live_peers <= s->peer_count);
  for (int i = 0; i < s->nic_count; i++) {
    const rr_ht_nic_entry *e = &s->nic[i];
    FUZZ_CHECK(memchr(e->row.ifname, 0, sizeof e->row.ifname));
    FUZZ_CHECK(memchr(e->row.reason, 0, sizeof e->row.reason));
    FUZZ_CHECK(e->liveness <= RR_HT_AGED);
    FUZZ_CHECK(e->torn || e->row.state <= RR_HT_RECOVERING);
  }
  for (int i = 0; i < s->peer_count; i++) {
    const rr_ht_peer_entry *e = &s->peer[i];
    FUZZ_CHECK(memchr(e->row.ifname, 0, sizeof e->row.ifname));
    FUZZ_CHECK(memchr(e->row.peer, 0, sizeof e->row.peer));
    FUZZ_CHECK(memchr(e->row.reason, 0, sizeof e->row.reason));
    FUZZ_CHECK(e->torn || e->row.state <= RR_HT_RECOVERING);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) abort();
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) abort();
    done += (size_t)n;
  }
  close(fd);

  rr_ht_snapshot s;
  rr_status st = rr_health_table_read_ex(path, 1000000000ull, &s);
  FUZZ_CHECK((st == RR_OK) == (s.problem == RR_HT_FINE));
  if (st == RR_OK) check_snapshot(&s);
  else FUZZ_CHECK(s.nic_count == 0 && s.peer_count == 0 && s.detail[0]);
  rr_health_table_snapshot_free(&s);

  rr_ht_reader *r = NULL;
  rr_ht_problem p = RR_HT_CORRUPT;
  char why[200];
  if (rr_health_table_reader_open(path, &r, &p, why, sizeof why) == RR_OK) {
    FUZZ_CHECK(p == RR_HT_FINE);
    for (int k = 0; k < 2; k++) {
      if (rr_health_table_reader_read(r, 0, &s) == RR_OK) check_snapshot(&s);
      rr_health_table_snapshot_free(&s);
    }
    rr_health_table_reader_close(r);
  } else {
    FUZZ_CHECK(p != RR_HT_FINE && r == NULL);
  }
  return 0;
}
