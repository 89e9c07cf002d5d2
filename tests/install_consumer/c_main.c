/* A C program outside the numarena tree, linked against the installed libnumarena.so alone
 * (find_package's numarena::shared, and pkg-config numarena-shared) by the C compiler:
 * proves the shared library carries everything it needs (tests/install_consumer/run.sh). */
#include <numarena/numarena.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  numarena_arena* arena = numarena_arena_for_node(0);
  if (arena == NULL) {
    fprintf(stderr, "c consumer: %s\n", numarena_last_error_message());
    return 1;
  }
  const size_t len = (size_t)1 << 20;
  char* p = numarena_malloc(arena, len);
  if (p == NULL) {
    fprintf(stderr, "c consumer: %s\n", numarena_last_error_message());
    return 1;
  }
  memset(p, 1, len);
  size_t on_node[1] = {0};
  numarena_page_counts counts;
  if (numarena_page_nodes(p, len, on_node, 1, &counts) != NUMARENA_OK ||
      on_node[0] != counts.total_pages) {
    fprintf(stderr, "c consumer: pages not on node 0: %s\n", numarena_last_error_message());
    return 1;
  }
  numarena_free(p);
  printf("c consumer (libnumarena.so %s): %zu of %zu pages on node 0\n", numarena_version(),
         on_node[0], counts.total_pages);
  return 0;
}
