/* The engine's control messages on the wire: every type round-trips, the
 * byte order is little-endian whatever the host's, and every malformed
 * message (short, long, reserved bits or unknown entry flags, bad counts, keys for another rail
 * count, a buffer that wraps) is refused with a reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine_wire.h"
#include "rail.h"

static engine_msg sample_cts(int n, int nrails) {
  engine_msg m;
  memset(&m, 0, sizeof m);
  m.type = ENGINE_CTRL_CTS;
  m.u.cts.seq = 0x01020304;
  m.u.cts.n = (uint8_t)n;
  m.u.cts.nrails = (uint8_t)nrails;
  for (int i = 0; i < n; i++) {
    m.u.cts.e[i].tag = -7 + i;
    m.u.cts.e[i].flags = i % 2 ? ENGINE_CTS_NO_CPU : 0; /* GPU buffers among host ones */
    m.u.cts.e[i].addr = 0x1000u * (uint64_t)(i + 1);
    m.u.cts.e[i].size = 4096u * (uint64_t)(i + 3);
    for (int r = 0; r < nrails; r++) m.u.cts.e[i].rkey[r] = 0xa0000000u + (uint32_t)(i * 16 + r);
  }
  return m;
}

static void roundtrip(const engine_msg *in, int nrails) {
  uint8_t buf[RR_RAIL_CTRL_MAX];
  uint32_t len = engine_msg_encode(in, buf, sizeof buf);
  assert_true(len > 0);
  engine_msg out;
  const char *why = NULL;
  assert_int_equal(engine_msg_decode(buf, len, nrails, &out, &why), RR_OK);
  assert_memory_equal(in, &out, sizeof out);
  /* One byte short or long is never accepted. */
  assert_int_equal(engine_msg_decode(buf, len - 1, nrails, &out, &why), RR_ERR_PROTOCOL);
  assert_non_null(why);
  buf[len] = 0;
  assert_int_equal(engine_msg_decode(buf, len + 1, nrails, &out, &why), RR_ERR_PROTOCOL);
}

static void every_type_roundtrips(void **state) {
  (void)state;
  for (int nrails = 1; nrails <= RR_MAX_RAILS; nrails++)
    for (int n = 1; n <= RR_NET_MAX_RECVS; n++) {
      engine_msg c = sample_cts(n, nrails);
      roundtrip(&c, nrails);
      engine_msg s;
      memset(&s, 0, sizeof s);
      s.type = ENGINE_CTRL_RESUME_SLOT;
      s.u.slot.epoch = 77;
      for (int i = 0; i < n; i++) s.u.slot.prefix[i] = (uint32_t)(i * 3);
      s.u.slot.cts = c.u.cts;
      roundtrip(&s, nrails);
    }
  engine_msg a = {.type = ENGINE_CTRL_ACK, .u.ack = {.seq = 0xfffffffe, .more = 0x80000003u}};
  roundtrip(&a, 2);
  engine_msg p = {.type = ENGINE_CTRL_PROBE, .u.probe_rail = 3};
  roundtrip(&p, 4);
  engine_msg f = {.type = ENGINE_CTRL_FAIL, .u.fail = {.epoch = 9, .down_mask = 0x5}};
  roundtrip(&f, 3);
  engine_msg d = {.type = ENGINE_CTRL_DOWN, .u.fail = {.epoch = 9, .down_mask = 0x2}};
  roundtrip(&d, 3);
  engine_msg g = {.type = ENGINE_CTRL_FAIL, .u.fail = {.epoch = 9, .down_mask = 0x7, .degraded_mask = 0x1, .local_mask = 0x4}};
  roundtrip(&g, 3);
  engine_msg gd = {.type = ENGINE_CTRL_DOWN, .u.fail = {.epoch = 9, .down_mask = 0x2, .degraded_mask = 0x2}};
  roundtrip(&gd, 2);
  engine_msg e = {.type = ENGINE_CTRL_RESUME_END, .u.end = {.epoch = 9, .recv_seq = 40, .slot_mask = 0x80000001u}};
  roundtrip(&e, 2);
  engine_msg b = {.type = ENGINE_CTRL_BYE, .u.bye_seq = 0xfffffff0u};
  roundtrip(&b, 2);
  /* A BYE is its header and one word: a truncated or padded one is refused. */
  uint8_t buf[16] = {0};
  engine_msg out;
  const char *why;
  assert_int_equal(engine_msg_encode(&b, buf, sizeof buf), 8);
  assert_int_equal(engine_msg_decode(buf, 7, 2, &out, &why), RR_ERR_PROTOCOL);
  assert_int_equal(engine_msg_decode(buf, 9, 2, &out, &why), RR_ERR_PROTOCOL);
  /* A placement claim: 20 bytes exactly; a sub-receive past the 8 a receive
   * has, or a reserved byte set, is refused. */
  engine_msg pl = {.type = ENGINE_CTRL_PLACED, .u.placed = {.seq = 0xfffffff1u, .sub = 7, .size = 0x123456789ull}};
  roundtrip(&pl, 2);
  uint8_t cb[24] = {0};
  assert_int_equal(engine_msg_encode(&pl, cb, sizeof cb), 20);
  assert_int_equal(engine_msg_decode(cb, 19, 2, &out, &why), RR_ERR_PROTOCOL);
  cb[8] = RR_NET_MAX_RECVS;
  assert_int_equal(engine_msg_decode(cb, 20, 2, &out, &why), RR_ERR_PROTOCOL);
  cb[8] = 1;
  cb[9] = 1;
  assert_int_equal(engine_msg_decode(cb, 20, 2, &out, &why), RR_ERR_PROTOCOL);
  cb[9] = 0;
  assert_int_equal(engine_msg_decode(cb, 20, 2, &out, &why), RR_OK);
  assert_int_equal(out.u.placed.sub, 1);
}

static void little_endian_on_the_wire(void **state) {
  (void)state;
  engine_msg a = {.type = ENGINE_CTRL_ACK, .u.ack = {.seq = 0x11223344, .more = 0x5}};
  uint8_t buf[16];
  assert_int_equal(engine_msg_encode(&a, buf, sizeof buf), 12);
  const uint8_t want[12] = {ENGINE_CTRL_ACK, 0, 0, 0, 0x44, 0x33, 0x22, 0x11, 0x05, 0, 0, 0};
  assert_memory_equal(buf, want, sizeof want);
}

static void malformed_is_refused(void **state) {
  (void)state;
  uint8_t buf[RR_RAIL_CTRL_MAX];
  engine_msg out;
  const char *why;
  engine_msg c = sample_cts(2, 2);
  uint32_t len = engine_msg_encode(&c, buf, sizeof buf);
  /* Keys for another rail count. */
  assert_int_equal(engine_msg_decode(buf, len, 3, &out, &why), RR_ERR_PROTOCOL);
  /* Reserved header bits. */
  buf[1] = 1;
  assert_int_equal(engine_msg_decode(buf, len, 2, &out, &why), RR_ERR_PROTOCOL);
  buf[1] = 0;
  /* n = 0 and n = 9. */
  buf[8] = 0;
  assert_int_equal(engine_msg_decode(buf, len, 2, &out, &why), RR_ERR_PROTOCOL);
  buf[8] = 9;
  assert_int_equal(engine_msg_decode(buf, len, 2, &out, &why), RR_ERR_PROTOCOL);
  buf[8] = 2;
  assert_int_equal(engine_msg_decode(buf, len, 2, &out, &why), RR_OK);
  /* Entry flags: NO_CPU is the only one defined; any other bit is refused. */
  assert_int_equal(buf[16], 0);
  buf[16] = ENGINE_CTS_NO_CPU;
  assert_int_equal(engine_msg_decode(buf, len, 2, &out, &why), RR_OK);
  assert_int_equal(out.u.cts.e[0].flags, ENGINE_CTS_NO_CPU);
  buf[16] = 0x2;
  assert_int_equal(engine_msg_decode(buf, len, 2, &out, &why), RR_ERR_PROTOCOL);
  buf[19] = 0x80;
  buf[16] = 0;
  assert_int_equal(engine_msg_decode(buf, len, 2, &out, &why), RR_ERR_PROTOCOL);
  buf[19] = 0;
  /* A buffer that wraps the address space. */
  engine_msg w = sample_cts(1, 1);
  w.u.cts.e[0].addr = UINT64_MAX - 10;
  w.u.cts.e[0].size = 100;
  len = engine_msg_encode(&w, buf, sizeof buf);
  assert_int_equal(engine_msg_decode(buf, len, 1, &out, &why), RR_ERR_PROTOCOL);
  /* Unknown types, an empty message, a probe for rail 40, a notice for rails the connection lacks. */
  uint8_t junk[8] = {99, 0, 0, 0, 0, 0, 0, 0};
  assert_int_equal(engine_msg_decode(junk, sizeof junk, 2, &out, &why), RR_ERR_PROTOCOL);
  assert_int_equal(engine_msg_decode(junk, 0, 2, &out, &why), RR_ERR_PROTOCOL);
  engine_msg p = {.type = ENGINE_CTRL_PROBE, .u.probe_rail = 40};
  len = engine_msg_encode(&p, buf, sizeof buf);
  assert_int_equal(engine_msg_decode(buf, len, 2, &out, &why), RR_ERR_PROTOCOL);
  engine_msg f = {.type = ENGINE_CTRL_FAIL, .u.fail = {.epoch = 1, .down_mask = 0x4}};
  len = engine_msg_encode(&f, buf, sizeof buf);
  assert_int_equal(engine_msg_decode(buf, len, 2, &out, &why), RR_ERR_PROTOCOL);
  assert_int_equal(engine_msg_decode(buf, len, 3, &out, &why), RR_OK);
  /* Degraded or local rails the notice does not name down, or a rail both. */
  engine_msg q = {.type = ENGINE_CTRL_DOWN, .u.fail = {.epoch = 1, .down_mask = 0x1, .degraded_mask = 0x2}};
  len = engine_msg_encode(&q, buf, sizeof buf);
  assert_int_equal(engine_msg_decode(buf, len, 2, &out, &why), RR_ERR_PROTOCOL);
  q.u.fail.degraded_mask = 0, q.u.fail.local_mask = 0x2;
  len = engine_msg_encode(&q, buf, sizeof buf);
  assert_int_equal(engine_msg_decode(buf, len, 2, &out, &why), RR_ERR_PROTOCOL);
  q.u.fail.down_mask = 0x3, q.u.fail.degraded_mask = 0x2;
  len = engine_msg_encode(&q, buf, sizeof buf);
  assert_int_equal(engine_msg_decode(buf, len, 2, &out, &why), RR_ERR_PROTOCOL);
  /* The short form of a peer that knows no degraded rails: both masks 0. */
  q.u.fail.local_mask = 0;
  len = engine_msg_encode(&q, buf, sizeof buf);
  assert_int_equal(len, 20);
  assert_int_equal(engine_msg_decode(buf, 12, 2, &out, &why), RR_OK);
  assert_int_equal(out.u.fail.down_mask, 0x3);
  assert_int_equal(out.u.fail.degraded_mask | out.u.fail.local_mask, 0);
  /* A resume whose prefix count and CTS count disagree. */
  engine_msg s;
  memset(&s, 0, sizeof s);
  s.type = ENGINE_CTRL_RESUME_SLOT;
  s.u.slot.cts = sample_cts(3, 2).u.cts;
  len = engine_msg_encode(&s, buf, sizeof buf);
  buf[8 + 12 + 4] = 2; /* the CTS body's n, behind 3 prefixes */
  assert_int_equal(engine_msg_decode(buf, len, 2, &out, &why), RR_ERR_PROTOCOL);
}

/* The immediate of a group write: both shapes name their chunks and bytes
 * without doubt, from the immediate and the arrival's length alone. */
static void group_immediates(void **state) {
  (void)state;
  const size_t cs = 128u << 10;
  uint32_t f, n;
  uint64_t bytes;
  /* Whole: first chunk 5, 512 KiB: four full chunks. */
  uint32_t imm = imm_encode(3, 17, 2, 0, 1, 5);
  assert_false(imm_split(imm));
  assert_int_equal(imm_epoch(imm), 3);
  assert_int_equal(imm_slot(imm), 17);
  assert_int_equal(imm_sub(imm), 2);
  assert_true(imm_ack_now(imm));
  assert_true(imm_group(imm, 4 * cs, cs, &f, &n, &bytes));
  assert_int_equal(f, 5);
  assert_int_equal(n, 4);
  assert_int_equal(bytes, 4 * cs);
  /* Whole, the message's last: 2.5 chunks are three; an empty one is one. */
  assert_true(imm_group(imm_encode(0, 0, 0, 1, 0, 7), (uint32_t)(2 * cs + cs / 2), cs, &f, &n, &bytes));
  assert_int_equal(n, 3);
  assert_true(imm_group(imm_encode(0, 0, 0, 1, 0, 0), 0, cs, &f, &n, &bytes));
  assert_int_equal(n, 1);
  assert_int_equal(bytes, 0);
  /* The largest chunk index a whole write names. */
  assert_int_equal(imm_chunk(imm_encode(0, 0, 0, 0, 0, IMM_MAX_CHUNKS - 1)), IMM_MAX_CHUNKS - 1);
  assert_false(imm_split(imm_encode(0, 0, 0, 0, 0, IMM_MAX_CHUNKS - 1)));
  /* Split: 32 full chunks from 1000 went before; 100 bytes come with it. */
  imm = imm_encode_split(9, 31, 7, 1, 0, IMM_SPLIT_MAX_FIRST - 1, IMM_SPLIT_MAX_FULL);
  assert_true(imm_split(imm));
  assert_int_equal(imm_epoch(imm), 9);
  assert_int_equal(imm_slot(imm), 31);
  assert_int_equal(imm_sub(imm), 7);
  assert_true(imm_last(imm));
  assert_false(imm_ack_now(imm));
  assert_true(imm_group(imm, 100, cs, &f, &n, &bytes));
  assert_int_equal(f, IMM_SPLIT_MAX_FIRST - 1);
  assert_int_equal(n, IMM_SPLIT_MAX_FULL + 1);
  assert_int_equal(bytes, (uint64_t)IMM_SPLIT_MAX_FULL * cs + 100);
  /* Split with nothing behind the bulk: exactly its full chunks. */
  assert_true(imm_group(imm_encode_split(0, 0, 0, 0, 1, 2, 3), 0, cs, &f, &n, &bytes));
  assert_int_equal(f, 2);
  assert_int_equal(n, 3);
  assert_int_equal(bytes, 3 * cs);
  /* A split write carrying a whole chunk or more is no shape at all. */
  assert_false(imm_group(imm_encode_split(0, 0, 0, 1, 0, 0, 1), (uint32_t)cs, cs, &f, &n, &bytes));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_type_roundtrips),
      cmocka_unit_test(little_endian_on_the_wire),
      cmocka_unit_test(malformed_is_refused),
      cmocka_unit_test(group_immediates),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
