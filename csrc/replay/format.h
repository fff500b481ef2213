/* sdnmpi-replay: the replay format's parser (docs/replay-format.md, version 1).
 *
 * MPI-free, so the shared vectors (tests/vectors/replay) test it with plain cc.
 * It parses a whole file held in memory and keeps either every cell or only the
 * cells one rank takes part in, with every phase's totals over all cells.
 */
#ifndef SDNMPI_REPLAY_FORMAT_H
#define SDNMPI_REPLAY_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define REPLAY_VERSION 1
#define REPLAY_MAX_LINE_BYTES 4096
#define REPLAY_MAX_FILE_BYTES ((size_t)1 << 30)
#define REPLAY_MAX_TEXT_BYTES 1024
#define REPLAY_MAX_NPROCS (1 << 20)
#define REPLAY_MAX_PHASES (1 << 20)
#define REPLAY_MAX_REPEAT INT32_MAX
#define REPLAY_MAX_MESSAGES INT32_MAX
#define REPLAY_MAX_SIZE_BYTES INT64_MAX
#define REPLAY_ERR_LEN 256
#define REPLAY_KEEP_ALL (-1)

enum replay_status { REPLAY_OK = 0, REPLAY_BAD_FILE = -1, REPLAY_NO_MEMORY = -2 };

struct replay_cell {
	int64_t size_bytes;
	int32_t src;
	int32_t dst;
	int32_t messages;
};

struct replay_phase {
	char *label;                /* decoded UTF-8, NUL-terminated */
	int32_t repeat;
	int64_t ncells;             /* cells in the file */
	int64_t bytes;              /* sum of size_bytes over all cells */
	int64_t messages;           /* sum of messages over all cells */
	struct replay_cell *cells;  /* the kept cells, in file order */
	size_t nkept;
};

/* The largest single message of the file (size / messages + size % messages). */
struct replay_largest {
	int64_t bytes;
	long line;
	int32_t src;
	int32_t dst;
	int32_t messages;
	int64_t size_bytes;
};

struct replay_pattern {
	char *name;
	int32_t nprocs;
	int32_t nphases;
	struct replay_phase *phases;
	struct replay_largest largest;
};

struct replay_error {
	long line; /* 1-based; the line after the last one for an error at the end */
	char msg[REPLAY_ERR_LEN];
};

/* Parse len bytes of text.  keep_rank: REPLAY_KEEP_ALL, or a rank whose cells
 * (src or dst) are kept.  Returns REPLAY_OK, REPLAY_BAD_FILE (err says where
 * and why, with the messages of docs/replay-format.md) or REPLAY_NO_MEMORY.
 * On failure *out holds nothing to free. */
int replay_parse(const char *text, size_t len, int keep_rank, struct replay_pattern *out,
		 struct replay_error *err);

void replay_free(struct replay_pattern *pat);

/* Bytes of message i (0-based) of a cell: size / messages, the remainder on the last. */
int64_t replay_message_bytes(const struct replay_cell *cell, int32_t i);

#endif
