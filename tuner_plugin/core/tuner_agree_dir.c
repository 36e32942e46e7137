/* Plan-agreement registers as files in a shared directory (tuner_agree_dir.h). */
#include "tuner_agree_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int path_of(const rr_agree_dir *d, const char *name, char *out, size_t len) {
  int n = snprintf(out, len, "%s/%s", d->path, name);
  return n > 0 && (size_t)n < len ? 0 : -1;
}

/* A register's text (at most len - 1 bytes, NUL-terminated); -1 when it is
 * absent or unreadable, else its length. */
static ssize_t read_text(const rr_agree_dir *d, const char *name, char *buf, size_t len) {
  char p[PATH_MAX + 64];
  if (path_of(d, name, p, sizeof(p)) != 0) return -1;
  int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, len - 1);
  close(fd);
  if (n < 0) n = 0;
  buf[n] = '\0';
  return n;
}

/* The register's value; 0 when absent, unreadable or not a number. */
static uint64_t read_reg(const rr_agree_dir *d, const char *name, int *present) {
  char buf[32];
  if (present != NULL) *present = 0;
  ssize_t n = read_text(d, name, buf, sizeof(buf));
  if (n < 0) return 0;
  if (present != NULL) *present = 1;
  if (n == 0) return 0;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(buf, &end, 10);
  if (errno != 0 || end == buf || (*end != '\n' && *end != '\0')) return 0;
  return (uint64_t)v;
}

/* Write-once with a text value: returns 1 if this call wrote it, 0 if it
 * was there (link: EEXIST, decided by the server even where reads are
 * late), -1 on error. */
static int write_text_once(rr_agree_dir *d, const char *name, const char *buf, size_t n) {
  char tmp[PATH_MAX + 64], dst[PATH_MAX + 64], leaf[160];
  snprintf(leaf, sizeof(leaf), ".t.%s.%" PRIu64, d->token, d->tmp_seq++);
  if (path_of(d, leaf, tmp, sizeof(tmp)) != 0 || path_of(d, name, dst, sizeof(dst)) != 0) return -1;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return -1;
  int ok = write(fd, buf, n) == (ssize_t)n;
  if (close(fd) != 0) ok = 0;
  int rc = -1;
  if (ok) {
    if (link(tmp, dst) == 0) rc = 1;
    else if (errno == EEXIST) rc = 0;
  }
  unlink(tmp);
  return rc;
}

static int write_once(rr_agree_dir *d, const char *name, uint64_t value) {
  char buf[32];
  int n = snprintf(buf, sizeof(buf), "%" PRIu64 "\n", value);
  return write_text_once(d, name, buf, (size_t)n);
}

static uint64_t m_proposal(void *arg, uint32_t e) {
  char name[32];
  snprintf(name, sizeof(name), "p%" PRIu32, e);
  return read_reg(arg, name, NULL);
}

static void m_propose(void *arg, uint32_t e, uint64_t at) {
  char name[32];
  snprintf(name, sizeof(name), "p%" PRIu32, e);
  write_once(arg, name, at);
}

static void m_vote(void *arg, uint32_t e, uint32_t voter, uint64_t view) {
  (void)voter; /* the token names the voter */
  rr_agree_dir *d = arg;
  char name[160];
  snprintf(name, sizeof(name), "v%" PRIu32 ".%s", e, d->token);
  /* +1: a stored 0 would read as "not written" */
  write_once(d, name, view + 1);
}

static uint32_t m_count_votes(void *arg, uint32_t e, uint32_t n, uint64_t *worst) {
  rr_agree_dir *d = arg;
  *worst = 0;
  char prefix[32];
  int plen = snprintf(prefix, sizeof(prefix), "v%" PRIu32 ".", e);
  DIR *dir = opendir(d->path);
  if (dir == NULL) return 0;
  uint32_t count = 0;
  struct dirent *ent;
  while ((ent = readdir(dir)) != NULL && count < n) {
    if (strncmp(ent->d_name, prefix, (size_t)plen) != 0) continue;
    uint64_t v = read_reg(d, ent->d_name, NULL);
    if (v == 0) continue; /* not a vote: does not count */
    count++;
    if (v - 1 > *worst) *worst = v - 1;
  }
  closedir(dir);
  return count;
}

static uint64_t m_decision(void *arg, uint32_t e) {
  char name[32];
  snprintf(name, sizeof(name), "d%" PRIu32, e);
  int present = 0;
  uint64_t v = read_reg(arg, name, &present);
  if (!present) return RR_AGREE_NONE;
  return v == RR_AGREE_NONE ? RR_AGREE_ABORT : v; /* unreadable: ABORT, the same everywhere */
}

/* What a decision register holds after this rank's compare-and-swap:
 * its own value when it wrote it; else the winner's, or NONE when that is
 * not visible here yet (the protocol reads it again: tuner_agree.c). */
static uint64_t decide_in(rr_agree_dir *d, const char *name, uint64_t value) {
  int rc = write_once(d, name, value);
  if (rc == 1) return value;
  int present = 0;
  uint64_t v = read_reg(d, name, &present);
  if (present) return v == RR_AGREE_NONE ? RR_AGREE_ABORT : v;
  /* Could not even try (rc -1) and nothing there: the directory went away,
   * which the protocol assumes does not happen during a job (docs/tuner.md). */
  return rc == 0 ? RR_AGREE_NONE : RR_AGREE_ABORT;
}

static uint64_t m_decide(void *arg, uint32_t e, uint64_t value) {
  char name[32];
  snprintf(name, sizeof(name), "d%" PRIu32, e);
  return decide_in(arg, name, value);
}

/* INPUTS: i.<token> holds a context's fingerprints as hex words; 'di' the
 * decision. */
static void m_post_inputs(void *arg, const uint64_t fp[RR_AGREE_INPUT_KINDS]) {
  rr_agree_dir *d = arg;
  char name[160], buf[RR_AGREE_INPUT_KINDS * 17 + 2];
  size_t n = 0;
  snprintf(name, sizeof(name), "i.%s", d->token);
  for (int k = 0; k < RR_AGREE_INPUT_KINDS; k++)
    n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%016" PRIx64 "%c", fp[k],
                          k + 1 < RR_AGREE_INPUT_KINDS ? ' ' : '\n');
  write_text_once(d, name, buf, n);
}

/* One context's fingerprints; 0 when the text is not exactly that. */
static int parse_inputs(const char *text, uint64_t fp[RR_AGREE_INPUT_KINDS]) {
  const char *p = text;
  for (int k = 0; k < RR_AGREE_INPUT_KINDS; k++) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 16);
    if (errno != 0 || end != p + 16) return 0;
    fp[k] = (uint64_t)v;
    if (*end != (k + 1 < RR_AGREE_INPUT_KINDS ? ' ' : '\n')) return 0;
    p = end + 1;
  }
  return *p == '\0';
}

static uint32_t m_count_inputs(void *arg, uint32_t n, const uint64_t mine[RR_AGREE_INPUT_KINDS],
                               uint32_t *differ) {
  rr_agree_dir *d = arg;
  *differ = 0;
  DIR *dir = opendir(d->path);
  if (dir == NULL) return 0;
  uint32_t count = 0;
  struct dirent *ent;
  while ((ent = readdir(dir)) != NULL && count <= n) {
    if (strncmp(ent->d_name, "i.", 2) != 0) continue;
    char buf[RR_AGREE_INPUT_KINDS * 17 + 8];
    uint64_t fp[RR_AGREE_INPUT_KINDS];
    /* Not parsable (yet): not counted; a register is complete once visible,
     * so this is a foreign file, the same for every reader. */
    if (read_text(d, ent->d_name, buf, sizeof(buf)) <= 0 || !parse_inputs(buf, fp)) continue;
    count++;
    for (int k = 0; k < RR_AGREE_INPUT_KINDS; k++)
      if (fp[k] != mine[k]) *differ |= 1u << k;
  }
  closedir(dir);
  return count;
}

static uint64_t m_inputs_decision(void *arg) {
  int present = 0;
  uint64_t v = read_reg(arg, "di", &present);
  if (!present) return RR_AGREE_NONE;
  return v == RR_AGREE_NONE ? RR_AGREE_IN_REFUSE : v; /* unreadable: REFUSE everywhere */
}

static uint64_t m_inputs_decide(void *arg, uint64_t value) {
  uint64_t v = decide_in(arg, "di", value);
  return v == RR_AGREE_ABORT ? RR_AGREE_IN_REFUSE : v;
}

rr_status rr_agree_dir_open(rr_agree_dir *d, const char *base, uint64_t comm_id,
                            const char *token) {
  memset(d, 0, sizeof(*d));
  if (base == NULL || base[0] == '\0' || token == NULL || token[0] == '\0' ||
      strlen(token) >= sizeof(d->token))
    return RR_ERR_INVALID;
  for (const char *t = token; *t; t++)
    if (!((*t >= 'a' && *t <= 'z') || (*t >= 'A' && *t <= 'Z') || (*t >= '0' && *t <= '9') ||
          *t == '.' || *t == '-' || *t == '_'))
      return RR_ERR_INVALID;
  int n = snprintf(d->path, sizeof(d->path), "%s/comm-%016" PRIx64, base, comm_id);
  if (n <= 0 || (size_t)n >= sizeof(d->path)) return RR_ERR_INVALID;
  if (mkdir(d->path, 0700) != 0 && errno != EEXIST) return RR_ERR_SYSTEM;
  struct stat sb;
  if (lstat(d->path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return RR_ERR_SYSTEM;
  strcpy(d->token, token);
  return RR_OK;
}

rr_agree_medium rr_agree_dir_medium(rr_agree_dir *d) {
  rr_agree_medium m = {.arg = d, .proposal = m_proposal, .propose = m_propose, .vote = m_vote,
                       .count_votes = m_count_votes, .decision = m_decision, .decide = m_decide,
                       .post_inputs = m_post_inputs, .count_inputs = m_count_inputs,
                       .inputs_decision = m_inputs_decision, .inputs_decide = m_inputs_decide};
  return m;
}

int rr_agree_dir_claim_leader(rr_agree_dir *d) { return write_once(d, "leader", 1) == 1; }

void rr_agree_dir_hint(rr_agree_dir *d) {
  char p[PATH_MAX + 64];
  if (path_of(d, "hint", p, sizeof(p)) != 0) return;
  int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  futimens(fd, NULL);
  close(fd);
}

uint64_t rr_agree_dir_hint_ns(rr_agree_dir *d) {
  char p[PATH_MAX + 64];
  struct stat sb;
  if (path_of(d, "hint", p, sizeof(p)) != 0 || stat(p, &sb) != 0) return 0;
  return (uint64_t)sb.st_mtim.tv_sec * 1000000000ull + (uint64_t)sb.st_mtim.tv_nsec;
}
