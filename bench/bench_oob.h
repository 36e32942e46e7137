/* rerail-net-bench's out-of-band channel between its two ranks: a
 * socketpair (--fork) or numbered files in a shared directory (--oob-dir,
 * two commands, maybe on two hosts). Every failure ends the program
 * (bc_die). */
#ifndef RERAIL_BENCH_OOB_H
#define RERAIL_BENCH_OOB_H
#include <stddef.h>
#include <stdint.h>

typedef struct oob {
  int fd;             /* socketpair end, or -1 for files */
  const char *dir;
  int rank;
  uint64_t sseq, rseq;
  double timeout_s;    /* a file-channel receive gives up after this */
} oob;

extern oob g_oob; /* set up by main before either rank runs */

void oob_send(const void *buf, size_t len);
void oob_recv(void *buf, size_t len);
/* Both ranks got here. */
void oob_barrier(void);

#endif
