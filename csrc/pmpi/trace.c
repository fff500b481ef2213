/* Trace writers (see trace.h). */
#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "histo.h"
#include "jsonw.h"

static void write_comms(FILE *f, const struct sdn_trace_meta *m)
{
	fputs("\"communicators\":[", f);
	for (size_t i = 0; i < m->ncomms; i++) {
		const struct sdn_comm_info *c = &m->comms[i];
		fprintf(f, "%s{\"id\":%" PRId32 ",\"ranks\":[", i ? "," : "", c->id);
		for (int32_t r = 0; r < c->size; r++)
			fprintf(f, "%s%" PRId32, r ? "," : "", c->world_ranks[r]);
		fputs("]}", f);
	}
	fputc(']', f);
}

static void write_header(FILE *f, const struct sdn_trace_meta *m, const struct sdn_evbuf *b)
{
	char modes[64];

	sdn_config_modes_str(m->modes, modes, sizeof(modes));
	fprintf(f, "{\"schema\":\"%s\",\"rank\":%d,\"nprocs\":%d,\"host\":", SDN_TRACE_SCHEMA,
		m->rank, m->nprocs);
	sdn_json_str(f, m->host);
	fprintf(f, ",\"pid\":%ld,\"mpi_library\":", m->pid);
	sdn_json_str(f, m->mpi_library);
	fputs(",\"job\":", f);
	sdn_json_str(f, m->job);
	fputs(",\"t0_wall\":", f);
	sdn_json_double(f, m->t0_wall);
	fputs(",\"modes\":", f);
	sdn_json_str(f, modes);
	fprintf(f, ",\"n_events\":%zu,\"dropped_events\":%" PRIu64 ",", b->n, b->dropped);
	write_comms(f, m);
	fputs("}\n", f);
}

static void write_peer(FILE *f, const char *key, int32_t peer)
{
	if (peer >= 0)
		fprintf(f, ",\"%s\":%" PRId32, key, peer);
	else if (peer == SDN_PEER_ANY)
		fprintf(f, ",\"%s\":null,\"%s_special\":\"any_source\"", key, key);
	else if (peer == SDN_PEER_NULL)
		fprintf(f, ",\"%s\":null,\"%s_special\":\"proc_null\"", key, key);
}

static void write_data(FILE *f, const struct sdn_evbuf *b, const struct sdn_event *e)
{
	const int64_t *counts = sdn_event_counts(b, e);

	if (e->count >= 0)
		fprintf(f, ",\"count\":%" PRId64, e->count);
	fprintf(f, ",\"type_bytes\":%" PRId64 ",\"bytes\":%" PRId64, e->type_bytes, e->bytes);
	if (counts) {
		fputs(",\"counts\":[", f);
		for (int32_t i = 0; i < e->counts_len; i++)
			fprintf(f, "%s%" PRId64, i ? "," : "", counts[i]);
		fputc(']', f);
	}
}

static void write_event(FILE *f, const struct sdn_evbuf *b, const struct sdn_event *e)
{
	fputs("{\"call\":", f);
	sdn_json_str(f, e->name);
	fprintf(f, ",\"kind\":\"%s\",\"t_start\":", sdn_kind_name(e->kind));
	sdn_json_double(f, e->t_start);
	fputs(",\"t_end\":", f);
	sdn_json_double(f, e->t_end);
	if (e->comm_id >= 0)
		fprintf(f, ",\"comm\":%" PRId32, e->comm_id);
	if (e->coll)
		fprintf(f, ",\"coll\":\"%s\"", e->coll);
	switch (e->kind) {
	case SDN_KIND_SEND:
	case SDN_KIND_RECV:
	case SDN_KIND_SENDRECV:
		write_peer(f, "peer", e->peer);
		fprintf(f, ",\"tag\":%" PRId32, e->tag);
		write_data(f, b, e);
		if (e->kind == SDN_KIND_SENDRECV) {
			write_peer(f, "recv_peer", e->recv_peer);
			fprintf(f, ",\"recv_bytes\":%" PRId64, e->recv_bytes);
		}
		break;
	case SDN_KIND_COLL:
	case SDN_KIND_COLLV:
		write_peer(f, "root", e->root);
		write_data(f, b, e);
		break;
	case SDN_KIND_COMM_NEW:
		if (e->new_comm_id >= 0)
			fprintf(f, ",\"new_comm\":%" PRId32, e->new_comm_id);
		else
			fputs(",\"new_comm\":null", f);
		break;
	default:
		break;
	}
	fputs("}\n", f);
}

int sdn_write_trace(FILE *f, const struct sdn_trace_meta *m, const struct sdn_evbuf *b)
{
	write_header(f, m, b);
	for (size_t i = 0; i < b->n; i++)
		write_event(f, b, &b->ev[i]);
	return ferror(f) ? -1 : 0;
}

/* -- pfprof ---------------------------------------------------------------------- */

struct p2p_totals {
	int64_t *tx_bytes, *rx_bytes, *tx_msgs, *rx_msgs;
	struct sdn_histo tx_sizes, rx_sizes;
	int64_t n_events;
};

static int count_msg(struct p2p_totals *t, int nprocs, int32_t peer, int64_t bytes, int tx)
{
	if (peer < 0 || peer >= nprocs)
		return 0;
	(tx ? t->tx_bytes : t->rx_bytes)[peer] += bytes;
	(tx ? t->tx_msgs : t->rx_msgs)[peer] += 1;
	t->n_events++;
	return sdn_histo_add(tx ? &t->tx_sizes : &t->rx_sizes, bytes, 1);
}

static int tally(struct p2p_totals *t, int nprocs, const struct sdn_evbuf *b)
{
	int rc = 0;

	for (size_t i = 0; i < b->n; i++) {
		const struct sdn_event *e = &b->ev[i];
		if (e->kind == SDN_KIND_SEND || e->kind == SDN_KIND_SENDRECV)
			rc |= count_msg(t, nprocs, e->peer, e->bytes, 1);
		if (e->kind == SDN_KIND_RECV)
			rc |= count_msg(t, nprocs, e->peer, e->bytes, 0);
		if (e->kind == SDN_KIND_SENDRECV)
			rc |= count_msg(t, nprocs, e->recv_peer, e->recv_bytes, 0);
	}
	return rc;
}

static void write_array(FILE *f, const char *key, const int64_t *v, int n)
{
	fprintf(f, "    \"%s\": [", key);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s%" PRId64, i ? ", " : "", v[i]);
	fputs("],\n", f);
}

static int write_histo(FILE *f, const char *key, const struct sdn_histo *h, int last)
{
	int64_t *sizes = malloc((h->n + 1) * sizeof(int64_t));
	uint64_t *counts = malloc((h->n + 1) * sizeof(uint64_t));
	size_t n;

	if (!sizes || !counts) {
		free(sizes);
		free(counts);
		return -1;
	}
	n = sdn_histo_sorted(h, sizes, counts);
	fprintf(f, "    \"%s\": [", key);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s{\"frequency\": %" PRIu64 ", \"message_size\": %" PRId64 "}",
			i ? ", " : "", counts[i], sizes[i]);
	fprintf(f, "]%s\n", last ? "" : ",");
	free(sizes);
	free(counts);
	return 0;
}

static void write_pfprof_body(FILE *f, const struct sdn_trace_meta *m, struct p2p_totals *t)
{
	fputs("{\n    \"description\": \"Generated by sdnmpi libsdnmpi.so (profile mode): "
	      "point-to-point calls made by the program only; the messages inside "
	      "collectives are not visible to the library and are not counted\",\n",
	      f);
	fprintf(f, "    \"n_events\": %" PRId64 ",\n    \"n_procs\": %d,\n", t->n_events, m->nprocs);
	fputs("    \"processor_name\": ", f);
	sdn_json_str(f, m->host);
	fprintf(f, ",\n    \"rank\": %d,\n", m->rank);
	write_array(f, "rx_bytes", t->rx_bytes, m->nprocs);
}

int sdn_write_pfprof(FILE *f, const struct sdn_trace_meta *m, const struct sdn_evbuf *b)
{
	size_t n = m->nprocs > 0 ? (size_t)m->nprocs : 1;
	int64_t *arr = calloc(4 * n, sizeof(int64_t));
	struct p2p_totals t = {arr, arr + n, arr + 2 * n, arr + 3 * n, {0}, {0}, 0};
	int rc = -1;

	sdn_histo_init(&t.tx_sizes);
	sdn_histo_init(&t.rx_sizes);
	if (arr && tally(&t, m->nprocs, b) == 0) {
		write_pfprof_body(f, m, &t);
		rc = write_histo(f, "rx_message_sizes", &t.rx_sizes, 0);
		write_array(f, "rx_messages", t.rx_msgs, m->nprocs);
		write_array(f, "tx_bytes", t.tx_bytes, m->nprocs);
		rc |= write_histo(f, "tx_message_sizes", &t.tx_sizes, 0);
		fprintf(f, "    \"tx_messages\": [");
		for (int i = 0; i < m->nprocs; i++)
			fprintf(f, "%s%" PRId64, i ? ", " : "", t.tx_msgs[i]);
		fputs("]\n}\n", f);
	}
	sdn_histo_free(&t.tx_sizes);
	sdn_histo_free(&t.rx_sizes);
	free(arr);
	return rc || ferror(f) ? -1 : 0;
}

/* -- files ----------------------------------------------------------------------- */

int sdn_prepare_dir(const char *dir)
{
	char path[SDN_PATH_MAX];
	size_t len = strlen(dir);

	if (len == 0 || len >= sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(path, dir);
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0777) && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(path, 0777) && errno != EEXIST)
		return -1;
	return access(path, W_OK | X_OK);
}

typedef int (*writer_fn)(FILE *, const struct sdn_trace_meta *, const struct sdn_evbuf *);

static int write_file(const char *dir, const char *name, writer_fn writer,
		      const struct sdn_trace_meta *m, const struct sdn_evbuf *b,
		      sdn_report_fn report, void *ctx)
{
	char path[SDN_PATH_MAX], tmp[SDN_PATH_MAX + 16], msg[SDN_PATH_MAX + 128];
	FILE *f;
	int rc;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s.tmp%ld", path, m->pid);
	f = fopen(tmp, "w");
	if (!f) {
		snprintf(msg, sizeof(msg), "cannot write %s: %s", tmp, strerror(errno));
		report(ctx, msg);
		return -1;
	}
	rc = writer(f, m, b);
	rc |= fclose(f);
	if (rc == 0 && rename(tmp, path) == 0)
		return 0;
	snprintf(msg, sizeof(msg), "cannot write %s: %s", path, strerror(errno));
	report(ctx, msg);
	unlink(tmp);
	return -1;
}

int sdn_write_outputs(const char *dir, const struct sdn_trace_meta *m, const struct sdn_evbuf *b,
		      sdn_report_fn report, void *ctx)
{
	char name[64];
	int rc;

	snprintf(name, sizeof(name), "sdnmpi-trace-%d.jsonl", m->rank);
	rc = write_file(dir, name, sdn_write_trace, m, b, report, ctx);
	snprintf(name, sizeof(name), "oxton-result%d.json", m->rank);
	rc |= write_file(dir, name, sdn_write_pfprof, m, b, report, ctx);
	return rc;
}
