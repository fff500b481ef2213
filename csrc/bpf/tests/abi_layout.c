/* SPDX-License-Identifier: MIT */
/* Prints the map ABI of tagger.h as JSON (sizes, offsets, constants) so
 * tests/bpf can check the ctypes mirror in sdnmpi.node.bpf against it. */
#include <stddef.h>
#include <stdio.h>

#include "tagger.h"

#define FIELD(s, f) "\"" #s "." #f "\": [%zu, %zu]"
#define FIELD_ARGS(s, f) offsetof(struct s, f), sizeof(((struct s *)0)->f)

int main(void)
{
	printf("{\"sizeof\": {\"sdnmpi_conn_key\": %zu, \"sdnmpi_conn\": %zu, "
	       "\"sdnmpi_rank_ctx\": %zu, \"sdnmpi_tagger_settings\": %zu},\n",
	       sizeof(struct sdnmpi_conn_key), sizeof(struct sdnmpi_conn),
	       sizeof(struct sdnmpi_rank_ctx), sizeof(struct sdnmpi_tagger_settings));
	printf(" \"fields\": {" FIELD(sdnmpi_conn_key, saddr) ", " FIELD(sdnmpi_conn_key, daddr)
	       ", " FIELD(sdnmpi_conn_key, sport) ", " FIELD(sdnmpi_conn_key, dport) ",\n",
	       FIELD_ARGS(sdnmpi_conn_key, saddr), FIELD_ARGS(sdnmpi_conn_key, daddr),
	       FIELD_ARGS(sdnmpi_conn_key, sport), FIELD_ARGS(sdnmpi_conn_key, dport));
	printf("  " FIELD(sdnmpi_conn, ctx_slot) ", " FIELD(sdnmpi_conn, src_rank) ", " FIELD(
		       sdnmpi_conn, dst_rank) ", " FIELD(sdnmpi_conn, job_slot) ",\n",
	       FIELD_ARGS(sdnmpi_conn, ctx_slot), FIELD_ARGS(sdnmpi_conn, src_rank),
	       FIELD_ARGS(sdnmpi_conn, dst_rank), FIELD_ARGS(sdnmpi_conn, job_slot));
	printf("  " FIELD(sdnmpi_rank_ctx, primitive) ", " FIELD(sdnmpi_rank_ctx, flags) ", " FIELD(
		       sdnmpi_rank_ctx, seq) ",\n",
	       FIELD_ARGS(sdnmpi_rank_ctx, primitive), FIELD_ARGS(sdnmpi_rank_ctx, flags),
	       FIELD_ARGS(sdnmpi_rank_ctx, seq));
	printf("  " FIELD(sdnmpi_tagger_settings, enabled) ", " FIELD(sdnmpi_tagger_settings,
								     reserved) "},\n",
	       FIELD_ARGS(sdnmpi_tagger_settings, enabled),
	       FIELD_ARGS(sdnmpi_tagger_settings, reserved));
	printf(" \"constants\": {\"max_conns\": %d, \"max_ctx_slots\": %d, \"counters\": %d}}\n",
	       SDNMPI_TAGGER_MAX_CONNS, SDNMPI_TAGGER_MAX_CTX_SLOTS, SDNMPI_CNT_MAX);
	return 0;
}
