/* The KV-cache pool's C API (numarena.h, "the KV-cache pool") on the host's node 0: options
 * checking and the cold-tier strings, sequences and block ids, a pin's layout against the
 * geometry, and the lifetime rule (destroying the pool while a pin lives defers it). Demotion
 * needs a second node: tests/torch/torch_lab.cpp and tests/lab/kv_pool_lab.cpp. */
#include <stdio.h>
#include <string.h>

#include "numarena/numarena.h"

static int failures = 0;
#define EXPECT(cond) \
  ((cond) ? (void)0 : (void)(++failures, fprintf(stderr, "%s:%d: %s failed (%s)\n", __FILE__, \
                                                   __LINE__, #cond, numarena_last_error_message())))

static numarena_kv_pool_options small_options(void) {
  static const int home[] = {0};
  numarena_kv_pool_options o;
  memset(&o, 0, sizeof o);
  o.size = sizeof o;
  o.layers = 2;
  o.kv_heads = 4;
  o.head_dim = 8;
  o.dtype = NUMARENA_KV_FP16;
  o.tokens_per_block = 4;
  o.heads_per_group = 2;
  o.home_nodes = home;
  o.home_node_count = 1;
  return o;
}

/* numarena_kv_pool_create refuses `o` with `code` and a message containing `text`. */
static void expect_refused(numarena_kv_pool_options o, numarena_code code, const char* text) {
  numarena_clear_error();
  EXPECT(numarena_kv_pool_create(&o) == NULL);
  EXPECT(numarena_last_error() == code);
  EXPECT(strstr(numarena_last_error_message(), text) != NULL);
}

static void test_options(void) {
  numarena_kv_pool_options o = small_options();
  EXPECT(numarena_kv_pool_create(NULL) == NULL);
  o.size = 8;
  expect_refused(o, NUMARENA_INVALID_ARGUMENT, "options->size");
  o = small_options();
  o.dtype = (numarena_kv_dtype)9;
  expect_refused(o, NUMARENA_INVALID_ARGUMENT, "dtype 9");
  o = small_options();
  o.home_node_count = 5000;
  expect_refused(o, NUMARENA_INVALID_ARGUMENT, "home_node_count 5000");
  o = small_options();
  o.kv_heads = 3; /* 2 heads per group do not divide 3 */
  expect_refused(o, NUMARENA_INVALID_ARGUMENT, "");
  const char* bad_tiers[] = {"moon", "node:", "node:1,2", "node:x", "interleave:",
                             "interleave:0,", "interleave:,1", "target:speed"};
  for (size_t i = 0; i < sizeof bad_tiers / sizeof bad_tiers[0]; ++i) {
    o = small_options();
    o.cold_tier = bad_tiers[i];
    expect_refused(o, NUMARENA_INVALID_ARGUMENT, "is not one of");
  }
  o = small_options();
  o.cold_tier = "node:0"; /* a home node cannot be the cold tier */
  expect_refused(o, NUMARENA_INVALID_ARGUMENT, "");
}

static void test_blocks_and_pins(void) {
  numarena_kv_pool_options o = small_options();
  numarena_kv_pool* pool = numarena_kv_pool_create(&o);
  EXPECT(pool != NULL);
  if (pool == NULL) return;
  numarena_kv_pool_layout layout;
  int group_nodes[4] = {-1, -1, -1, -1};
  EXPECT(numarena_kv_pool_layout_of(pool, &layout, group_nodes, 4) == NUMARENA_OK);
  EXPECT(layout.head_groups == 2 && layout.heads_per_group == 2 && layout.layer_ranges == 2);
  EXPECT(layout.tokens_per_block == 4 && layout.head_dim == 8);
  EXPECT(layout.dtype == NUMARENA_KV_FP16 && layout.block_bytes > 0);
  EXPECT(group_nodes[0] == 0 && group_nodes[1] == 0 && group_nodes[2] == -1);

  const int32_t prompt[] = {1, 2, 3, 4, 5, 6};
  uint64_t seq = 0;
  size_t reused = 99;
  EXPECT(numarena_kv_sequence_create(pool, prompt, 6, &seq, &reused) == NUMARENA_OK);
  EXPECT(reused == 0);
  uint64_t blocks[1];
  size_t count = 0;
  EXPECT(numarena_kv_blocks(pool, seq, 1, 1, blocks, 1, &count) == NUMARENA_OUT_OF_RANGE);
  EXPECT(count == 2);
  uint64_t all[2];
  EXPECT(numarena_kv_blocks(pool, seq, 1, 1, all, 2, &count) == NUMARENA_OK);
  EXPECT(numarena_kv_sequence_append(pool, seq, prompt, 3) == NUMARENA_OK);
  EXPECT(numarena_kv_blocks(pool, seq, 1, 1, NULL, 0, &count) == NUMARENA_OUT_OF_RANGE);
  EXPECT(count == 3);
  EXPECT(numarena_kv_sequence_mark_computed(pool, seq, 9) == NUMARENA_OK);
  EXPECT(numarena_kv_sequence_mark_computed(pool, seq, 10) == NUMARENA_OUT_OF_RANGE);

  numarena_kv_pin_info info;
  numarena_kv_block_pin* pin = numarena_kv_pin(pool, all[1], &info);
  EXPECT(pin != NULL);
  EXPECT(info.tier == 1 && info.node == 0 && info.group == 1 && info.first_head == 2);
  EXPECT(info.first_layer == 1);
  EXPECT(info.row_bytes == 8 * 2);
  EXPECT(info.value_offset_bytes >= 4 * info.row_bytes);  /* the K area of one head */
  EXPECT(info.head_stride_bytes >= 2 * info.value_offset_bytes);
  EXPECT(info.layer_stride_bytes == 0);  /* one layer per block */
  int tier = 0, node = -1, pins = 0;
  EXPECT(numarena_kv_locate(pool, all[1], &tier, &node, &pins) == NUMARENA_OK);
  EXPECT(tier == 1 && node == 0 && pins == 1);
  EXPECT(numarena_kv_demote_block(pool, all[1]) == NUMARENA_FAILED_PRECONDITION);
  EXPECT(numarena_kv_demote(pool, 0, 10) == 0); /* no cold tier */
  /* The placement audit: the kernel has moved nothing here (the pool's blocks are on the
   * host's node 0, in slabs bound there); max_blocks 0 is refused. */
  numarena_kv_audit_report audit;
  memset(&audit, 0xFF, sizeof audit);
  ((unsigned char*)info.data)[0] = 1; /* a resident page to ask about */
  EXPECT(numarena_kv_audit(pool, 1, 1000, 10, &audit) == NUMARENA_OK);
  EXPECT(audit.blocks_checked == 3 * (size_t)(layout.head_groups * layout.layer_ranges));
  EXPECT(audit.pages_checked > 0);
  EXPECT(audit.hot_pages_misplaced == 0 && audit.cold_pages_misplaced == 0);
  EXPECT(audit.pages_moved_back == 0 && audit.pages_not_moved == 0 && audit.blocks_left == 0);
  EXPECT(audit.wrapped == 1);
  EXPECT(numarena_kv_audit(pool, 0, 0, 0, NULL) == NUMARENA_INVALID_ARGUMENT);
  EXPECT(strstr(numarena_last_error_message(), "max_blocks") != NULL);
  EXPECT(numarena_kv_audit(NULL, 0, 1, 0, NULL) == NUMARENA_INVALID_ARGUMENT);

  /* The pin outlives the caller's handle: the pool stays until the pin goes. */
  memset(info.data, 0x5A, layout.block_bytes);
  numarena_kv_pool_destroy(pool);
  EXPECT(((unsigned char*)info.data)[layout.block_bytes - 1] == 0x5A);
  numarena_kv_unpin(pin);
  numarena_kv_unpin(NULL);
  numarena_kv_pool_destroy(NULL);
}

static void test_stale_and_null(void) {
  numarena_kv_pool_options o = small_options();
  numarena_kv_pool* pool = numarena_kv_pool_create(&o);
  EXPECT(pool != NULL);
  if (pool == NULL) return;
  const int32_t prompt[] = {7, 7, 7, 7};
  uint64_t seq = 0, block = 0;
  size_t count = 0;
  EXPECT(numarena_kv_sequence_create(pool, prompt, 4, &seq, NULL) == NUMARENA_OK);
  EXPECT(numarena_kv_blocks(pool, seq, 0, 0, &block, 1, &count) == NUMARENA_OK);
  EXPECT(numarena_kv_sequence_free(pool, seq) == NUMARENA_OK);
  const int32_t other[] = {8, 8, 8, 8};
  EXPECT(numarena_kv_sequence_create(pool, other, 4, &seq, NULL) == NUMARENA_OK);
  numarena_clear_error();
  EXPECT(numarena_kv_pin(pool, block, NULL) == NULL);
  EXPECT(numarena_last_error() == NUMARENA_FAILED_PRECONDITION);
  EXPECT(numarena_kv_locate(pool, block, NULL, NULL, NULL) == NUMARENA_FAILED_PRECONDITION);
  EXPECT(numarena_kv_sequence_create(NULL, other, 4, &seq, NULL) == NUMARENA_INVALID_ARGUMENT);
  EXPECT(strstr(numarena_last_error_message(), "NULL pool") != NULL);
  EXPECT(numarena_kv_sequence_create(pool, NULL, 4, &seq, NULL) == NUMARENA_INVALID_ARGUMENT);
  EXPECT(numarena_kv_blocks(pool, seq, 0, 0, NULL, 1, &count) == NUMARENA_INVALID_ARGUMENT);
  EXPECT(numarena_kv_pool_layout_of(pool, NULL, NULL, 0) == NUMARENA_INVALID_ARGUMENT);
  numarena_kv_pool_destroy(pool);
}

int main(void) {
  test_options();
  test_blocks_and_pins();
  test_stale_and_null();
  if (failures != 0) {
    fprintf(stderr, "kv_capi_test: %d check(s) failed\n", failures);
    return 1;
  }
  puts("kv_capi_test: all checks passed");
  return 0;
}
