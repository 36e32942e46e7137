/* The rules file (tuner_plugin/core/tuner_rules.h): NCCL's example CSV
 * accepted unchanged, rerail's extensions, every rejection with its line
 * number and reason, and first-match semantics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "tuner_ids.h"
#include "tuner_rules.h"

static rr_rules rules;
static char err[512];

static rr_rule_query query(int coll, uint64_t nbytes, int nodes, int ranks) {
  rr_rule_query q = {.coll = coll, .nbytes = nbytes, .nodes = nodes, .ranks = ranks,
                     .pipe_ops = 1, .reg_buff = 0, .rails_down = 0};
  return q;
}

/* NCCL's example file, as its README shows the format (comments, blank
 * lines, 8- and 10-field rules). */
static const char nccl_example[] =
    "# NCCL tuner configuration\n"
    "# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,"
    "numPipeOps,regBuff\n"
    "\n"
    "allreduce,0,65536,tree,ll,-1,-1,-1\n"
    "allreduce,65537,1048576,ring,ll128,8,2,16\n"
    "broadcast,0,4294967295,ring,simple,4,-1,-1,-1,-1\n"
    "allgather,1024,8192,ring,ll,2,-1,-1,1,0\n"
    "reducescatter,0,100000,pat,simple,-1,4,32,-1,1\n";

static void test_nccl_example_unchanged(void **state) {
  (void)state;
  assert_int_equal(rr_rules_parse(nccl_example, "ex.conf", &rules, err, sizeof(err)), RR_OK);
  assert_int_equal(rules.count, 5);
  assert_int_equal(rules.rule[0].line, 4);
  assert_int_equal(rules.rule[0].algo, RR_ALGO_TREE);
  assert_int_equal(rules.rule[0].proto, RR_PROTO_LL);
  assert_int_equal(rules.rule[0].channels, -1);
  assert_int_equal(rules.rule[4].algo, RR_ALGO_PAT);

  rr_rule_query q = query(RR_COLL_ALL_REDUCE, 65536, 8, 64);
  const rr_rule *r = rr_rules_match(&rules, &q);
  assert_non_null(r);
  assert_int_equal(r->line, 4); /* max_bytes is inclusive */
  q.nbytes = 65537;
  assert_null(rr_rules_match(&rules, &q)); /* line 5 wants 2 nodes, 16 ranks */
  q.nodes = 2;
  q.ranks = 16;
  r = rr_rules_match(&rules, &q);
  assert_non_null(r);
  assert_int_equal(r->channels, 8);
  q = query(RR_COLL_ALL_GATHER, 4096, 2, 2);
  assert_int_equal(rr_rules_match(&rules, &q)->line, 7);
  q.reg_buff = 1;
  assert_null(rr_rules_match(&rules, &q)); /* regBuff 0 only */
  q.reg_buff = 0;
  q.pipe_ops = 2;
  assert_null(rr_rules_match(&rules, &q));
  q = query(RR_COLL_REDUCE, 0, 2, 2);
  assert_null(rr_rules_match(&rules, &q));
}

static void test_extensions(void **state) {
  (void)state;
  const char *text =
      "@net, nics=8, gbps=400, lat_us=2.5\n"
      "*,0,4K,keep,ll,-1,-1,-1\n"
      "allreduce,4K,-1,ring,simple,6,2-8,-1,-1,-1,rails_down=1-3,chunk=512K\n"
      "allreduce, 1M , 1G , ring , ll128 , -1 , -1 , -1 , chunk=1MiB\n";
  assert_int_equal(rr_rules_parse(text, "x", &rules, err, sizeof(err)), RR_OK);
  assert_true(rules.net.present);
  assert_int_equal(rules.net.nics, 8);
  assert_true(rules.net.gbps == 400.0 && rules.net.lat_us == 2.5);
  assert_int_equal(rules.count, 3);
  assert_int_equal(rules.rule[0].coll, RR_RULE_ANY_COLL);
  assert_int_equal(rules.rule[0].max_bytes, 4096);
  assert_int_equal(rules.rule[0].algo, RR_RULE_KEEP);
  assert_int_equal(rules.rule[1].max_bytes, UINT64_MAX);
  assert_int_equal(rules.rule[1].chunk, 512 * 1024);
  assert_int_equal(rules.rule[2].chunk, 1024 * 1024);

  rr_rule_query q = query(RR_COLL_BROADCAST, 100, 64, 512);
  assert_int_equal(rr_rules_match(&rules, &q)->line, 2); /* '*' */
  q = query(RR_COLL_ALL_REDUCE, 1 << 20, 4, 32);
  assert_int_equal(rr_rules_match(&rules, &q)->line, 4); /* no rail down: line 3 skipped */
  q.rails_down = 2;
  assert_int_equal(rr_rules_match(&rules, &q)->line, 3);
  q.nodes = 9;
  assert_int_equal(rr_rules_match(&rules, &q)->line, 4); /* nNodes 2-8 */
  q.rails_down = 4;
  q.nodes = 4;
  assert_int_equal(rr_rules_match(&rules, &q)->line, 4);
  /* getChunkSize does not know numPipeOps/regBuff: those are not compared. */
  q = query(RR_COLL_ALL_REDUCE, 1 << 20, 4, 32);
  q.pipe_ops = -1;
  q.reg_buff = -1;
  q.rails_down = 1;
  q.shape_unknown = 1;
  assert_int_equal(rr_rules_match(&rules, &q)->line, 3);
}

static void test_empty_and_comments(void **state) {
  (void)state;
  assert_int_equal(rr_rules_parse("", "e", &rules, err, sizeof(err)), RR_OK);
  assert_int_equal(rules.count, 0);
  assert_int_equal(rr_rules_parse("# only\n\n   \n\t# more", "e", &rules, err, sizeof(err)), RR_OK);
  assert_int_equal(rules.count, 0);
  rr_rule_query q = query(RR_COLL_ALL_REDUCE, 1, 1, 1);
  assert_null(rr_rules_match(&rules, &q));
  assert_null(rr_rules_match(NULL, &q));
  /* CRLF line ends (a file edited on Windows) are fine. */
  assert_int_equal(rr_rules_parse("allreduce,0,1,ring,ll,-1,-1,-1\r\n", "e", &rules, err,
                                  sizeof(err)),
                   RR_OK);
  assert_int_equal(rules.count, 1);
}

/* Every rejection: the message names the file, the line, and the reason;
 * and no rule stays in force. */
static const struct bad_case {
  const char *text;
  int line;
  const char *reason;
} bad[] = {
    {"allreduce,0,1,ring,ll,-1,-1\n", 1, "7 fields"},
    {"\n\nallreduce\n", 3, "1 field;"},
    {"allreduce,0,1,ring,ll,-1,-1,-1\nsendrecv,0,1,ring,ll,-1,-1,-1\n", 2, "unknown collective 'sendrecv'"},
    {"allreduce,x,1,ring,ll,-1,-1,-1\n", 1, "min_bytes 'x'"},
    {"allreduce,-5,1,ring,ll,-1,-1,-1\n", 1, "min_bytes '-5'"},
    {"allreduce,0,1Q,ring,ll,-1,-1,-1\n", 1, "max_bytes '1Q'"},
    {"allreduce,0,99999999999999999999,ring,ll,-1,-1,-1\n", 1, "max_bytes"},
    {"allreduce,0,20000000T,ring,ll,-1,-1,-1\n", 1, "max_bytes"},
    {"allreduce,100,10,ring,ll,-1,-1,-1\n", 1, "below min_bytes"},
    {"allreduce,0,1,ringo,ll,-1,-1,-1\n", 1, "unknown algorithm 'ringo'"},
    {"allreduce,0,1,ring,ll256,-1,-1,-1\n", 1, "unknown protocol 'll256'"},
    {"allreduce,0,1,ring,ll,0,-1,-1\n", 1, "channels '0'"},
    {"allreduce,0,1,ring,ll,65,-1,-1\n", 1, "channels '65'"},
    {"allreduce,0,1,ring,ll,-2,-1,-1\n", 1, "channels '-2'"},
    {"allreduce,0,1,ring,ll,two,-1,-1\n", 1, "channels 'two'"},
    {"allreduce,0,1,ring,ll,-1,-3,-1\n", 1, "nNodes '-3'"},
    {"allreduce,0,1,ring,ll,-1,8-2,-1\n", 1, "nNodes '8-2'"},
    {"allreduce,0,1,ring,ll,-1,-1,x\n", 1, "nRanks 'x'"},
    {"allreduce,0,1,ring,ll,-1,-1,-1,y\n", 1, "numPipeOps 'y'"},
    {"allreduce,0,1,ring,ll,-1,-1,-1,-1,2\n", 1, "regBuff '2'"},
    {"allreduce,0,1,ring,ll,-1,-1,-1,-1,-1,7\n", 1, "only key=value"},
    {"allreduce,0,1,ring,ll,-1,-1,-1,colour=red\n", 1, "unknown key 'colour'"},
    {"allreduce,0,1,ring,ll,-1,-1,-1,rails_down=x\n", 1, "rails_down='x'"},
    {"allreduce,0,1,ring,ll,-1,-1,-1,rails_down=99\n", 1, "rails_down='99'"},
    {"allreduce,0,1,ring,ll,-1,-1,-1,rails_down=1,rails_down=2\n", 1, "rails_down given twice"},
    {"allreduce,0,1,ring,ll,-1,-1,-1,chunk=100\n", 1, "chunk='100'"},
    {"allreduce,0,1,ring,ll,-1,-1,-1,chunk=2G\n", 1, "chunk='2G'"},
    {"allreduce,0,1,ring,ll,-1,-1,-1,chunk=0\n", 1, "chunk='0'"},
    {"allreduce,0,1,ring,ll,-1,-1,-1,chunk=4K,chunk=8K\n", 1, "chunk given twice"},
    {"allreduce,0,1,keep,keep,-1,-1,-1\n", 1, "changes nothing"},
    {"allreduce,0,1,ring,ll,-1,-1,-1,-1,-1,a=1,b=2,c=3,d=4,e=5,f=6,g=7\n", 1, "more than 16 fields"},
    {"@net,nics=8,gbps=100\n", 1, "@net needs"},
    {"@net,nics=0,gbps=100,lat_us=1\n", 1, "nics='0'"},
    {"@net,nics=8,gbps=-1,lat_us=1\n", 1, "gbps='-1'"},
    {"@net,nics=8,gbps=nan,lat_us=1\n", 1, "gbps='nan'"},
    {"@net,nics=8,gbps=100,lat_us=-1\n", 1, "lat_us='-1'"},
    {"@net,nics=8,gbps=100,lat_us=1,mtu=9000\n", 1, "unknown key 'mtu'"},
    {"@net,nics=8,gbps=100,lat_us=1,speed\n", 1, "not key=value"},
    {"@net,nics=8,gbps=100,lat_us=1\n@net,nics=4,gbps=100,lat_us=1\n", 2, "second @net"},
};

static void test_every_error_has_line_and_reason(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    memset(err, 0, sizeof(err));
    rr_status st = rr_rules_parse(bad[i].text, "bad.conf", &rules, err, sizeof(err));
    char want[64];
    snprintf(want, sizeof(want), "bad.conf:%d: ", bad[i].line);
    if (st != RR_ERR_INVALID || strncmp(err, want, strlen(want)) != 0 ||
        strstr(err, bad[i].reason) == NULL)
      fail_msg("case %zu (%s): status %d, message '%s'; wanted '%s...%s'", i, bad[i].text, st, err,
               want, bad[i].reason);
    assert_int_equal(rules.count, 0);
    assert_false(rules.net.present);
  }
}

static void test_too_many_rules_and_long_lines(void **state) {
  (void)state;
  size_t cap = (RR_RULES_MAX + 2) * 40;
  char *text = malloc(cap), *p = text;
  for (int i = 0; i < RR_RULES_MAX + 1; i++)
    p += sprintf(p, "allreduce,%d,%d,ring,ll,-1,-1,-1\n", i, i);
  assert_int_equal(rr_rules_parse(text, "big", &rules, err, sizeof(err)), RR_ERR_INVALID);
  char want[64];
  snprintf(want, sizeof(want), "big:%d: more than %d rules", RR_RULES_MAX + 1, RR_RULES_MAX);
  assert_string_equal(err, want);
  free(text);

  char longline[2100];
  memset(longline, ' ', sizeof(longline) - 1);
  longline[sizeof(longline) - 1] = '\0';
  assert_int_equal(rr_rules_parse(longline, "long", &rules, err, sizeof(err)), RR_ERR_INVALID);
  assert_non_null(strstr(err, "long:1: line longer than"));
  /* A tiny message buffer truncates, never overflows. */
  char small[8];
  assert_int_equal(rr_rules_parse("bogus", "f", &rules, small, sizeof(small)), RR_ERR_INVALID);
  assert_true(strlen(small) < sizeof(small));
  assert_int_equal(rr_rules_parse("bogus", "f", &rules, NULL, 0), RR_ERR_INVALID);
  assert_int_equal(rr_rules_parse(NULL, "f", &rules, err, sizeof(err)), RR_ERR_INVALID);
}

static void test_load_files(void **state) {
  (void)state;
  char path[] = "/tmp/rr-rules-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  const char body[] = "allreduce,0,1K,ring,ll,2,-1,-1\n";
  assert_int_equal(write(fd, body, sizeof(body) - 1), (ssize_t)(sizeof(body) - 1));
  close(fd);
  assert_int_equal(rr_rules_load(path, &rules, err, sizeof(err)), RR_OK);
  assert_int_equal(rules.count, 1);

  /* NUL bytes: not a text file. */
  fd = open(path, O_WRONLY | O_TRUNC);
  assert_int_equal(write(fd, "allreduce\0junk", 14), 14);
  close(fd);
  assert_int_equal(rr_rules_load(path, &rules, err, sizeof(err)), RR_ERR_INVALID);
  assert_non_null(strstr(err, "NUL"));
  unlink(path);

  assert_int_equal(rr_rules_load(path, &rules, err, sizeof(err)), RR_ERR_SYSTEM);
  assert_non_null(strstr(err, "cannot open"));
  assert_int_equal(rr_rules_load("/tmp", &rules, err, sizeof(err)), RR_ERR_INVALID);
  assert_non_null(strstr(err, "not a regular file"));
  assert_int_equal(rules.count, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nccl_example_unchanged),
      cmocka_unit_test(test_extensions),
      cmocka_unit_test(test_empty_and_comments),
      cmocka_unit_test(test_every_error_has_line_and_reason),
      cmocka_unit_test(test_too_many_rules_and_long_lines),
      cmocka_unit_test(test_load_files),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
