/* Connecting a reopened rail's endpoint off the thread that drives its
 * connection.
 *
 * A verbs endpoint connects by moving its queue pair to RTR and RTS, and on
 * RoCE the kernel resolves the peer's MAC address inside that call: on a
 * link that has just come back it waits for ARP (20-270 ms measured in the
 * Soft-RoCE lab under load, up to the resolver's timeout in the worst case).
 * A reconnect runs on the thread that drives the connection (NCCL's proxy
 * thread, or the monitor's for a listener), holding the engine or listener,
 * so every other rail of it would go unserviced that long. A transport whose
 * device says its connect may block (RR_RAIL_CAP_CONNECT_MAY_BLOCK) is
 * therefore connected on a short-lived thread of its own; the caller polls
 * for the result. Others connect at once, inside rr_connect_job_start.
 *
 * Ownership: the job owns the endpoint and the setup sockets from start
 * until finish hands the endpoint back, or abandon, after which the job's
 * thread destroys it when the connect returns. Nothing else touches the
 * endpoint meanwhile (it is in no engine yet).
 *
 * Teardown: a job's thread runs in the transport, on a pooled device, and
 * in this library's code. The devices close (and NCCL may dlclose the
 * library) when the plugin goes, so that waits for the job threads first
 * (rr_connect_job_drain), for a bounded time: a connect stuck in the kernel
 * must not hang NCCL's process at its exit. */
#include "connect_job.h"

#include "core_internal.h"
#include "rr_log.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Job threads, joinable, each on a list until joined: a thread counts as
 * through when it has touched its job for the last time, and is joined
 * (freed, and past its last instruction of this library) by the next start
 * or by teardown. Joining is what lets teardown promise that no job thread
 * still runs this library's code when NCCL may dlclose it; a detached
 * thread would still be returning from it. */
typedef struct job_thread {
  pthread_t tid;
  int through;               /* its job is done with (under threads_lock) */
  struct job_thread *next;
} job_thread;

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
/* guards: threads and each entry's `through`; with threads_idle; joins only threads that
 * are through. Taken under an engine's or a listener's lock (leaf in effect). */
static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t threads_idle; /* with threads_lock: a thread became through */
static job_thread *threads;  /* started, not yet joined: after a reap, those not through */

/* The bound of the wait is on the monotonic clock: a clock step at exit
 * must neither cut it short nor stretch it. */
static void threads_init(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&threads_idle, &a);
  pthread_condattr_destroy(&a);
}

/* Joins every thread that is through (each has at most its return left to
 * run, so the joins are short). Called with threads_lock held. */
static void threads_reap_locked(void) {
  for (job_thread **at = &threads; *at;) {
    job_thread *t = *at;
    if (!t->through) {
      at = &t->next;
      continue;
    }
    *at = t->next;
    pthread_join(t->tid, NULL);
    free(t);
  }
}

struct rr_connect_job {
  /* guards: done, abandoned, result (the owner and the job thread); a leaf. */
  pthread_mutex_t lock;
  rr_rail_ep *ep;
  int dev;
  uint16_t blob_len;
  uint8_t blob[RR_HS_BLOB_MAX];
  int fds[RR_HS_MAX_STREAMS];
  int nfds;
  rr_status result;
  int done;                  /* the connect returned (under lock) */
  int abandoned;             /* the owner is gone: the thread cleans up (under lock) */
};

static void job_free(rr_connect_job *job) {
  rr_setup_ep_abandon(&job->ep);
  for (int i = 0; i < job->nfds; i++)
    if (job->fds[i] >= 0) close(job->fds[i]);
  pthread_mutex_destroy(&job->lock);
  free(job);
}

/* rr_setup_ep_connect closes the sockets the transport did not take and
 * destroys the endpoint when the connect fails. */
static void job_connect(rr_connect_job *job) {
  rr_status st = rr_setup_ep_connect(&job->ep, job->dev, NULL, job->blob, job->blob_len, job->fds, job->nfds);
  pthread_mutex_lock(&job->lock);
  job->result = st;
  job->done = 1;
  int abandoned = job->abandoned;
  pthread_mutex_unlock(&job->lock);
  if (abandoned) job_free(job);
}

typedef struct job_thread_arg {
  rr_connect_job *job;
  job_thread *self;
} job_thread_arg;

static void *job_thread_main(void *argp) {
  job_thread_arg arg = *(job_thread_arg *)argp;
  free(argp);
  job_connect(arg.job);
  /* Nothing of the job, its endpoint or its device is touched after this. */
  pthread_mutex_lock(&threads_lock);
  arg.self->through = 1;
  pthread_cond_broadcast(&threads_idle);
  pthread_mutex_unlock(&threads_lock);
  return NULL;
}

/* Starts job's connect on a joinable thread of its own. Returns 0, or -1
 * when no thread could be had (nothing was started). */
static int job_thread_start(rr_connect_job *job) {
  pthread_once(&threads_once, threads_init);
  job_thread *t = calloc(1, sizeof *t);
  job_thread_arg *arg = malloc(sizeof *arg);
  if (!t || !arg) {
    free(t);
    free(arg);
    return -1;
  }
  *arg = (job_thread_arg){.job = job, .self = t};
  /* Under the lock, so the thread cannot be counted through before it is
   * on the list, and earlier threads that are through are joined now
   * rather than piling up until teardown. */
  pthread_mutex_lock(&threads_lock);
  threads_reap_locked();
  int rc = pthread_create(&t->tid, NULL, job_thread_main, arg);
  if (rc == 0) {
    t->next = threads;
    threads = t;
  }
  pthread_mutex_unlock(&threads_lock);
  if (rc != 0) {
    free(t);
    free(arg);
    return -1;
  }
  return 0;
}

static int may_block(const rr_rail_ep *ep) {
  return (ep->dev->attr.caps & RR_RAIL_CAP_CONNECT_MAY_BLOCK) != 0;
}

rr_status rr_connect_job_start(rr_rail_ep *ep, int dev, const uint8_t *peer_blob, uint16_t peer_blob_len,
                               int *fds, int nfds, rr_connect_job **out) {
  *out = NULL;
  rr_connect_job *job = calloc(1, sizeof *job);
  if (!job || peer_blob_len > RR_HS_BLOB_MAX || nfds > RR_HS_MAX_STREAMS) {
    free(job);
    for (int i = 0; i < nfds; i++)
      if (fds[i] >= 0) close(fds[i]), fds[i] = -1;
    ep->ops->destroy(ep);
    return job ? RR_ERR_INTERNAL : RR_ERR_NOMEM;
  }
  pthread_mutex_init(&job->lock, NULL);
  job->ep = ep;
  job->dev = dev;
  job->blob_len = peer_blob_len;
  memcpy(job->blob, peer_blob, peer_blob_len);
  job->nfds = nfds;
  for (int i = 0; i < nfds; i++) job->fds[i] = fds[i], fds[i] = -1;
  *out = job;
  if (may_block(ep)) {
    if (job_thread_start(job) == 0) return RR_OK;
    RR_INFO(RR_SUB_NET, "connect: no thread for a reopened rail's endpoint; connecting it in place");
  }
  job_connect(job);
  return RR_OK;
}

rr_status rr_connect_job_finish(rr_connect_job *job, rr_rail_ep **ep) {
  *ep = NULL;
  pthread_mutex_lock(&job->lock);
  int done = job->done;
  pthread_mutex_unlock(&job->lock);
  if (!done) return RR_AGAIN;
  rr_status st = job->result;
  *ep = job->ep;
  job->ep = NULL;
  job_free(job);
  return st;
}

void rr_connect_job_abandon(rr_connect_job *job) {
  if (!job) return;
  pthread_mutex_lock(&job->lock);
  int done = job->done;
  job->abandoned = 1;
  pthread_mutex_unlock(&job->lock);
  if (done) job_free(job);
}

int rr_connect_job_drain(unsigned timeout_ms) {
  pthread_once(&threads_once, threads_init);
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  /* Those through are joined, gone for good when drain returns; what the
   * list holds after a reap is still connecting. */
  pthread_mutex_lock(&threads_lock);
  threads_reap_locked();
  while (threads && pthread_cond_timedwait(&threads_idle, &threads_lock, &until) != ETIMEDOUT)
    threads_reap_locked();
  threads_reap_locked();
  int left = 0;
  for (const job_thread *t = threads; t; t = t->next) left++;
  pthread_mutex_unlock(&threads_lock);
  if (left)
    RR_WARN("connect: %d reopened rail endpoint(s) still connecting after %u ms at shutdown "
            "(stuck in the transport); their devices are left open",
            left, timeout_ms);
  return left;
}
