/* sdnmpi-replay: the replay format's parser (docs/replay-format.md).
 *
 * One pass over a buffer, line by line, with the checks in the order the
 * document gives them and the same messages as the Python reader
 * (src/sdnmpi/formats/replay.py), so both can be held to the shared vectors.
 * Nothing here trusts the input: every line is bounded, every number range
 * checked before use, every sum checked for overflow, and a lying header
 * (nphases, ncells) allocates nothing in advance.
 */
#include "format.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FIELDS 4
#define MAX_SHOWN 32

struct field {
	const char *s;
	size_t n;
};

struct parser {
	const char *text;
	size_t len;
	size_t pos;
	long lineno;
	int keep_rank;
	struct field f[MAX_FIELDS];
	int nf; /* fields on the line; MAX_FIELDS + 1 means "more" */
	size_t phase_cap; /* phases allocated (zeroed past the ones parsed) */
	struct replay_error *err;
	int status; /* REPLAY_BAD_FILE or REPLAY_NO_MEMORY once failed */
};

static int fail_at(struct parser *p, long line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail_at(struct parser *p, long line, const char *fmt, ...)
{
	va_list ap;

	p->err->line = line;
	va_start(ap, fmt);
	vsnprintf(p->err->msg, sizeof(p->err->msg), fmt, ap);
	va_end(ap);
	p->status = REPLAY_BAD_FILE;
	return -1;
}

static int no_memory(struct parser *p)
{
	p->err->line = p->lineno;
	snprintf(p->err->msg, sizeof(p->err->msg), "out of memory");
	p->status = REPLAY_NO_MEMORY;
	return -1;
}

static bool field_is(const struct field *f, const char *word)
{
	return f->n == strlen(word) && memcmp(f->s, word, f->n) == 0;
}

/* Split the line into fields; an empty field anywhere is an error. */
static int split_fields(struct parser *p, const char *line, size_t n)
{
	size_t start = 0;

	p->nf = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && line[i] != ' ')
			continue;
		if (i == start)
			return fail_at(p, p->lineno,
				       "empty field (fields are separated by single spaces)");
		if (p->nf < MAX_FIELDS)
			p->f[p->nf] = (struct field){line + start, i - start};
		if (p->nf <= MAX_FIELDS)
			p->nf++;
		start = i + 1;
	}
	return 0;
}

/* The next line's fields; "want" completes the end-of-file message. */
static int next_line(struct parser *p, const char *want_fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int next_line(struct parser *p, const char *want_fmt, ...)
{
	const char *line = p->text + p->pos;
	const char *lf;
	size_t n;

	if (p->pos >= p->len) {
		char want[128];
		va_list ap;

		va_start(ap, want_fmt);
		vsnprintf(want, sizeof(want), want_fmt, ap);
		va_end(ap);
		return fail_at(p, p->lineno + 1, "unexpected end of file: %s", want);
	}
	p->lineno++;
	lf = memchr(line, '\n', p->len - p->pos);
	if (lf == NULL)
		return fail_at(p, p->lineno, "line does not end with a newline");
	n = (size_t)(lf - line);
	p->pos += n + 1;
	if (n > REPLAY_MAX_LINE_BYTES)
		return fail_at(p, p->lineno, "line longer than %d bytes", REPLAY_MAX_LINE_BYTES);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)line[i];
		if (c < 0x20 || c > 0x7e)
			return fail_at(p, p->lineno,
				       "byte 0x%02x not allowed (printable ASCII and single "
				       "spaces only)",
				       c);
	}
	return split_fields(p, line, n);
}

static bool is_decimal(const struct field *f)
{
	if (f->n == 0 || (f->n > 1 && f->s[0] == '0'))
		return false;
	for (size_t i = 0; i < f->n; i++) {
		if (f->s[i] < '0' || f->s[i] > '9')
			return false;
	}
	return true;
}

/* The field as errors quote it: at most MAX_SHOWN characters, then "...". */
#define SHOWN(f) ((f)->n > MAX_SHOWN ? MAX_SHOWN : (int)(f)->n), (f)->s, \
		 ((f)->n > MAX_SHOWN ? "..." : "")

static int parse_integer(struct parser *p, const char *name, const struct field *f, int64_t lo,
			 int64_t hi, int64_t *out)
{
	uint64_t value = 0;
	bool over = f->n > 20;

	if (!is_decimal(f))
		return fail_at(p, p->lineno, "%s: '%.*s%s' is not a decimal integer", name,
			       SHOWN(f));
	for (size_t i = 0; i < f->n && !over; i++) {
		unsigned digit = (unsigned)(f->s[i] - '0');
		if (value > (UINT64_MAX - digit) / 10)
			over = true;
		else
			value = value * 10 + digit;
	}
	if (over || value > (uint64_t)hi || (int64_t)value < lo)
		return fail_at(p, p->lineno, "%s: %.*s%s is out of range [%" PRId64 ", %" PRId64 "]",
			       name, SHOWN(f), lo, hi);
	*out = (int64_t)value;
	return 0;
}

static int parse_int32(struct parser *p, const char *name, const struct field *f, int64_t lo,
		       int64_t hi, int32_t *out)
{
	int64_t value;

	if (parse_integer(p, name, f, lo, hi, &value) != 0)
		return -1;
	*out = (int32_t)value;
	return 0;
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Length of the valid UTF-8 sequence at s (RFC 3629), or 0 if invalid. */
static size_t utf8_sequence(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	unsigned char lo = 0x80, hi = 0xbf;
	size_t len;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef)
		len = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		len = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++) {
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	}
	return len;
}

static bool valid_utf8(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t step = utf8_sequence(s + i, n - i);
		if (step == 0)
			return false;
		i += step;
	}
	return true;
}

/* Percent-decode into out (at least f->n + 1 bytes); returns the length or -1. */
static long percent_decode(const struct field *f, char *out)
{
	size_t n = 0;

	for (size_t i = 0; i < f->n; i++) {
		int h, l;

		if (f->s[i] != '%') {
			out[n++] = f->s[i];
			continue;
		}
		if (i + 2 >= f->n)
			return -1;
		h = hex_value(f->s[i + 1]);
		l = hex_value(f->s[i + 2]);
		if (h < 0 || l < 0)
			return -1;
		out[n++] = (char)(h * 16 + l);
		i += 2;
	}
	out[n] = '\0';
	return (long)n;
}

static int parse_text(struct parser *p, const char *name, const struct field *f, char **out)
{
	char *buf = malloc(f->n + 1);
	long n;

	if (buf == NULL)
		return no_memory(p);
	*out = buf;
	if (field_is(f, "-")) {
		buf[0] = '\0';
		return 0;
	}
	n = percent_decode(f, buf);
	if (n < 0)
		return fail_at(p, p->lineno, "%s: bad percent escape", name);
	if (n > REPLAY_MAX_TEXT_BYTES)
		return fail_at(p, p->lineno, "%s: longer than %d bytes", name,
			       REPLAY_MAX_TEXT_BYTES);
	if (memchr(buf, '\0', (size_t)n) != NULL)
		return fail_at(p, p->lineno, "%s: contains NUL", name);
	if (!valid_utf8((const unsigned char *)buf, (size_t)n))
		return fail_at(p, p->lineno, "%s: not valid UTF-8", name);
	return 0;
}

static int parse_header(struct parser *p)
{
	if (next_line(p, "want the header") != 0)
		return -1;
	if (p->nf == 2 && field_is(&p->f[0], "sdnmpi-replay") && field_is(&p->f[1], "1"))
		return 0;
	if (p->nf == 2 && field_is(&p->f[0], "sdnmpi-replay") && is_decimal(&p->f[1]))
		return fail_at(p, p->lineno, "unsupported version %.*s%s (this reader reads %d)",
			       SHOWN(&p->f[1]), REPLAY_VERSION);
	return fail_at(p, p->lineno, "not an sdnmpi-replay file (want \"sdnmpi-replay %d\")",
		       REPLAY_VERSION);
}

static int parse_pattern_line(struct parser *p, struct replay_pattern *pat)
{
	if (next_line(p, "want the pattern line") != 0)
		return -1;
	if (p->nf != 4 || !field_is(&p->f[0], "pattern"))
		return fail_at(p, p->lineno, "want \"pattern NPROCS NPHASES NAME\"");
	if (parse_int32(p, "nprocs", &p->f[1], 1, REPLAY_MAX_NPROCS, &pat->nprocs) != 0 ||
	    parse_int32(p, "nphases", &p->f[2], 0, REPLAY_MAX_PHASES, &pat->nphases) != 0)
		return -1;
	return parse_text(p, "name", &p->f[3], &pat->name);
}

static int keep_cell(struct parser *p, struct replay_phase *ph, const struct replay_cell *c,
		     size_t *cap)
{
	if (p->keep_rank != REPLAY_KEEP_ALL && c->src != p->keep_rank && c->dst != p->keep_rank)
		return 0;
	if (ph->nkept == *cap) {
		size_t grown = *cap ? *cap * 2 : 16;
		struct replay_cell *cells = realloc(ph->cells, grown * sizeof(*cells));
		if (cells == NULL)
			return no_memory(p);
		ph->cells = cells;
		*cap = grown;
	}
	ph->cells[ph->nkept++] = *c;
	return 0;
}

static void note_largest(struct replay_largest *big, const struct replay_cell *c, long line)
{
	int64_t bytes = replay_message_bytes(c, c->messages - 1);

	if (bytes <= big->bytes)
		return;
	big->bytes = bytes;
	big->line = line;
	big->src = c->src;
	big->dst = c->dst;
	big->messages = c->messages;
	big->size_bytes = c->size_bytes;
}

static int parse_cell(struct parser *p, int32_t nprocs, struct replay_cell *c)
{
	int64_t size;

	if (p->nf != 4)
		return fail_at(p, p->lineno, "want \"SRC DST SIZE_BYTES MESSAGES\"");
	if (parse_int32(p, "src", &p->f[0], 0, nprocs - 1, &c->src) != 0 ||
	    parse_int32(p, "dst", &p->f[1], 0, nprocs - 1, &c->dst) != 0 ||
	    parse_integer(p, "size_bytes", &p->f[2], 0, REPLAY_MAX_SIZE_BYTES, &size) != 0 ||
	    parse_int32(p, "messages", &p->f[3], 1, REPLAY_MAX_MESSAGES, &c->messages) != 0)
		return -1;
	c->size_bytes = size;
	return 0;
}

static int parse_cells(struct parser *p, struct replay_pattern *pat, struct replay_phase *ph,
		       int index)
{
	struct replay_cell prev = {0, -1, -1, 0};
	struct replay_cell c;
	size_t cap = 0;

	for (int64_t j = 0; j < ph->ncells; j++) {
		if (next_line(p, "phase %d declares %" PRId64 " cells, got %" PRId64, index + 1,
			      ph->ncells, j) != 0 ||
		    parse_cell(p, pat->nprocs, &c) != 0)
			return -1;
		if (c.src < prev.src || (c.src == prev.src && c.dst <= prev.dst))
			return fail_at(p, p->lineno,
				       "cell (%d, %d) is not after (%d, %d) (cells are sorted by "
				       "src, then dst, each pair once)",
				       c.src, c.dst, prev.src, prev.dst);
		if (c.size_bytes > REPLAY_MAX_SIZE_BYTES - ph->bytes)
			return fail_at(p, p->lineno, "phase total size_bytes exceeds %" PRId64,
				       (int64_t)REPLAY_MAX_SIZE_BYTES);
		ph->bytes += c.size_bytes;
		ph->messages += c.messages;
		note_largest(&pat->largest, &c, p->lineno);
		if (keep_cell(p, ph, &c, &cap) != 0)
			return -1;
		prev = c;
	}
	return 0;
}

static int parse_phase(struct parser *p, struct replay_pattern *pat, int index)
{
	struct replay_phase *ph = &pat->phases[index];
	int64_t max_cells = (int64_t)pat->nprocs * pat->nprocs;

	if (next_line(p, "want phase %d of %d", index + 1, pat->nphases) != 0)
		return -1;
	if (p->nf != 4 || !field_is(&p->f[0], "phase"))
		return fail_at(p, p->lineno, "want \"phase REPEAT NCELLS LABEL\"");
	if (parse_int32(p, "repeat", &p->f[1], 1, REPLAY_MAX_REPEAT, &ph->repeat) != 0 ||
	    parse_integer(p, "ncells", &p->f[2], 0, max_cells, &ph->ncells) != 0 ||
	    parse_text(p, "label", &p->f[3], &ph->label) != 0)
		return -1;
	return parse_cells(p, pat, ph, index);
}

/* Room for one more phase, grown as phases arrive (nphases is not trusted). */
static int grow_phases(struct parser *p, struct replay_pattern *pat, int index, size_t *cap)
{
	if ((size_t)index < *cap)
		return 0;
	size_t grown = *cap ? *cap * 2 : 16;
	struct replay_phase *phases = realloc(pat->phases, grown * sizeof(*phases));
	if (phases == NULL)
		return no_memory(p);
	memset(phases + *cap, 0, (grown - *cap) * sizeof(*phases));
	pat->phases = phases;
	*cap = grown;
	return 0;
}

static int parse_all(struct parser *p, struct replay_pattern *pat)
{
	if (parse_header(p) != 0 || parse_pattern_line(p, pat) != 0)
		return -1;
	for (int i = 0; i < pat->nphases; i++) {
		if (grow_phases(p, pat, i, &p->phase_cap) != 0 || parse_phase(p, pat, i) != 0)
			return -1;
	}
	if (p->pos < p->len)
		return fail_at(p, p->lineno + 1, "trailing data after the last phase");
	return 0;
}

int replay_parse(const char *text, size_t len, int keep_rank, struct replay_pattern *out,
		 struct replay_error *err)
{
	struct parser p = {.text = text, .len = len, .keep_rank = keep_rank, .err = err};

	memset(out, 0, sizeof(*out));
	err->line = 0;
	err->msg[0] = '\0';
	if (len > REPLAY_MAX_FILE_BYTES) {
		err->line = 1;
		snprintf(err->msg, sizeof(err->msg), "larger than %zu bytes", REPLAY_MAX_FILE_BYTES);
		return REPLAY_BAD_FILE;
	}
	if (parse_all(&p, out) == 0)
		return REPLAY_OK;
	if ((size_t)out->nphases > p.phase_cap)
		out->nphases = (int32_t)p.phase_cap; /* only these were allocated */
	replay_free(out);
	return p.status;
}

void replay_free(struct replay_pattern *pat)
{
	if (pat->phases != NULL) {
		/* After a failure, phases past the one that failed are zeroed. */
		for (int i = 0; i < pat->nphases; i++) {
			free(pat->phases[i].label);
			free(pat->phases[i].cells);
		}
	}
	free(pat->phases);
	free(pat->name);
	memset(pat, 0, sizeof(*pat));
}

int64_t replay_message_bytes(const struct replay_cell *cell, int32_t i)
{
	int64_t each = cell->size_bytes / cell->messages;

	if (i == cell->messages - 1)
		return each + cell->size_bytes % cell->messages;
	return each;
}
