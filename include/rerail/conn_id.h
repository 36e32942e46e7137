/* The id of a rerail connection, for test programs.
 *
 * libnccl-net-rerail.so exports rerailConnId_v1 next to its NCCL tables. A
 * connection's id is drawn by its connecting side and sent in every setup
 * hello, so both ends know it; a program that dlopen()ed the plugin (the
 * test harness) can learn it without reading log text, and hand it to a
 * test that plays a peer holding the handle (a reconnect names its
 * connection by this id).
 *
 * rerailConnId_v1(comm, &id): comm is a send comm connect() returned or a
 * receive comm accept() returned, not yet closed. Returns 0 and sets *id,
 * or -1 for NULL or a listen comm. A closed comm is freed by its close, as
 * NCCL's own calls assume: passing one reads freed memory (the call can
 * only tell comms apart by the word they begin with), so a caller must ask
 * before it closes. A send comm connect() handed out before the listener's
 * ACCEPTs may still start over as a new connection (a fresh id) until its
 * first isend() returns a request: the id both ends agree on is the one
 * read after that. */
#ifndef RERAIL_CONN_ID_H
#define RERAIL_CONN_ID_H
#include <stdint.h>

#define RERAIL_CONN_ID_SYMBOL "rerailConnId_v1"
typedef int rerail_conn_id_v1_fn(const void *comm, uint64_t *id);

#endif
