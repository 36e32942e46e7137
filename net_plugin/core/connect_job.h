/* Connecting a reopened rail's endpoint without blocking the thread that
 * drives its connection (connect_job.c). */
#ifndef RERAIL_CORE_CONNECT_JOB_H
#define RERAIL_CORE_CONNECT_JOB_H
#include <stdint.h>

#include "rail.h"

typedef struct rr_connect_job rr_connect_job;

/* Connect ep (opened on pooled device dev) with the peer's blob and the
 * setup sockets; the job takes both (fds[] become -1). It runs on a thread
 * of its own when ep's device may block in connect, at once otherwise.
 * RR_OK: *job exists, ask rr_connect_job_finish. Another status: no job,
 * ep and the sockets are gone. */
rr_status rr_connect_job_start(rr_rail_ep *ep, int dev, const uint8_t *peer_blob, uint16_t peer_blob_len,
                               int *fds, int nfds, rr_connect_job **job);
/* RR_AGAIN while it runs. Else the job is gone and the connect's result
 * is returned: RR_OK with *ep the connected endpoint (the caller's now), or
 * the failure, the endpoint destroyed. */
rr_status rr_connect_job_finish(rr_connect_job *job, rr_rail_ep **ep);
/* The caller no longer wants it: the endpoint is destroyed once the
 * connect returns (at once if it has). NULL is ignored. */
void rr_connect_job_abandon(rr_connect_job *job);
/* Teardown: wait up to timeout_ms for every job thread to be through (an
 * abandoned job's thread also destroys its endpoint), and join those that
 * are: none of them runs this library's code any more when it returns.
 * Returns how many still run, with a warning: the caller must then leave
 * their devices open. */
int rr_connect_job_drain(unsigned timeout_ms);
#endif
