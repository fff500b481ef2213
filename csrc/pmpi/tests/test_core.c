/* Unit tests of libsdnmpi's MPI-free core: configuration, SDNMPI_DUPLEX, event
 * buffer, JSON escaping, histogram and the two writers.  Run by
 * tests/pmpi/test_core.py.
 * Usage: test_core [OUTDIR]   (with OUTDIR: also writes a 2-rank trace there,
 * which the Python side reads back with its own reader).  Prints the compiled
 * duplex table first, one "duplex LIBRARY NAME=VALUE" line per variable
 * (tests/node/test_duplex.py compares it with sdnmpi.node.duplex). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/socket.h>
#include <unistd.h>

#include "agentc.h"
#include "config.h"
#include "duplex.h"
#include "event.h"
#include "histo.h"
#include "jsonw.h"
#include "reqmap.h"
#include "trace.h"

#include <sdnmpi/duplex.h>

#include "check.h"

static char reported[8][512];
static int n_reported;

static void record_report(void *ctx, const char *msg)
{
	(void)ctx;
	if (n_reported < 8)
		snprintf(reported[n_reported++], sizeof(reported[0]), "%s", msg);
}

static const char *fake_env[][2] = {
	{"SDNMPI_MODE", "profile,tag"},
	{"SDNMPI_JOB", "job-42"},
	{"SDNMPI_CONFIG", NULL},
};

static const char *fake_getenv(const char *name)
{
	for (size_t i = 0; i < sizeof(fake_env) / sizeof(fake_env[0]); i++)
		if (strcmp(fake_env[i][0], name) == 0)
			return fake_env[i][1];
	return NULL;
}

static void test_modes(void)
{
	unsigned modes = 99;

	CHECK(sdn_config_parse_modes("profile", &modes, record_report, NULL) == 0);
	CHECK(modes == SDN_MODE_PROFILE);
	CHECK(sdn_config_parse_modes("profile, tag,push,register", &modes, NULL, NULL) == 0);
	CHECK(modes == (SDN_MODE_PROFILE | SDN_MODE_TAG | SDN_MODE_PUSH | SDN_MODE_REGISTER));
	CHECK(sdn_config_parse_modes("off", &modes, NULL, NULL) == 0 && modes == 0);
	n_reported = 0;
	CHECK(sdn_config_parse_modes("profile,bogus", &modes, record_report, NULL) == 1);
	CHECK(modes == SDN_MODE_PROFILE);
	CHECK(n_reported == 1 && strstr(reported[0], "unknown mode 'bogus'"));
}

static void test_config_file(const char *dir)
{
	char path[1024];
	struct sdn_config cfg;
	FILE *f;

	snprintf(path, sizeof(path), "%s/sdnmpi.conf", dir);
	f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("# comment\n\nSDNMPI_TRACE_DIR = /tmp/x y\nSDNMPI_MODE=off\nSDNMPI_COLOUR=red\n"
	      "garbage line\n", f);
	fclose(f);
	fake_env[2][1] = path;
	n_reported = 0;
	CHECK(sdn_config_load(&cfg, fake_getenv, record_report, NULL) == 2);
	CHECK(strcmp(cfg.trace_dir, "/tmp/x y") == 0);
	CHECK(cfg.modes == (SDN_MODE_PROFILE | SDN_MODE_TAG)); /* env overrides the file */
	CHECK(strcmp(cfg.job, "job-42") == 0);
	CHECK(n_reported == 2 && strstr(reported[0], "unknown key 'SDNMPI_COLOUR'"));
	CHECK(strstr(reported[1], "sdnmpi.conf:6: expected KEY=VALUE"));
	fake_env[2][1] = "/nonexistent/sdnmpi.conf";
	n_reported = 0;
	CHECK(sdn_config_load(&cfg, fake_getenv, record_report, NULL) == 1);
	CHECK(strstr(reported[0], "cannot read SDNMPI_CONFIG /nonexistent/sdnmpi.conf"));
	fake_env[2][1] = NULL;
}

/* An environment of at most 8 variables for sdn_duplex_apply. */
static struct {
	char name[64], value[64];
} dx_env[8];
static int dx_n, dx_sets, dx_fail_on;

static const char *dx_getenv(const char *name)
{
	for (int i = 0; i < dx_n; i++)
		if (strcmp(dx_env[i].name, name) == 0)
			return dx_env[i].value;
	return NULL;
}

static int dx_setenv(const char *name, const char *value, int overwrite)
{
	dx_sets++;
	if (dx_sets == dx_fail_on || dx_n == 8)
		return -1;
	CHECK(overwrite == 0);
	if (dx_getenv(name))
		return 0;
	snprintf(dx_env[dx_n].name, sizeof(dx_env[0].name), "%s", name);
	snprintf(dx_env[dx_n].value, sizeof(dx_env[0].value), "%s", value);
	dx_n++;
	return 0;
}

static void dx_reset(void)
{
	dx_n = dx_sets = dx_fail_on = 0;
}

static void test_duplex(void)
{
	struct sdn_config cfg;

	for (size_t i = 0; i < SDNMPI_DUPLEX_NVARS; i++)
		printf("duplex %s %s=%s\n", sdnmpi_duplex_vars[i].library, sdnmpi_duplex_vars[i].name,
		       sdnmpi_duplex_vars[i].value);
	/* the key: 0 or 1, anything else reported and ignored */
	sdn_config_defaults(&cfg);
	CHECK(cfg.duplex == 0);
	CHECK(sdn_config_set(&cfg, "SDNMPI_DUPLEX", "1", NULL, NULL) == 0 && cfg.duplex == 1);
	n_reported = 0;
	CHECK(sdn_config_set(&cfg, "SDNMPI_DUPLEX", "yes", record_report, NULL) == 1);
	CHECK(cfg.duplex == 1 && n_reported == 1);
	CHECK(strcmp(reported[0], "SDNMPI_DUPLEX 'yes' is not 0 or 1; ignored") == 0);
	CHECK(sdn_config_set(&cfg, "SDNMPI_DUPLEX", "", NULL, NULL) == 1 && cfg.duplex == 1);
	CHECK(sdn_config_set(&cfg, "SDNMPI_DUPLEX", "10", NULL, NULL) == 1 && cfg.duplex == 1);
	CHECK(sdn_config_set(&cfg, "SDNMPI_DUPLEX", "0", NULL, NULL) == 0 && cfg.duplex == 0);
	/* every variable set in an empty environment */
	dx_reset();
	CHECK(sdn_duplex_apply(dx_getenv, dx_setenv) == (int)SDNMPI_DUPLEX_NVARS);
	CHECK(dx_n == (int)SDNMPI_DUPLEX_NVARS);
	for (size_t i = 0; i < SDNMPI_DUPLEX_NVARS; i++) {
		const char *v = dx_getenv(sdnmpi_duplex_vars[i].name);
		CHECK(v && strcmp(v, sdnmpi_duplex_vars[i].value) == 0);
	}
	CHECK(strcmp(dx_getenv("OMPI_MCA_btl_tcp_eager_limit"), "4194304") == 0);
	CHECK(strcmp(dx_getenv("UCX_RNDV_THRESH"), "inf") == 0);
	/* the user's values are kept, even an empty one; the others are set */
	dx_reset();
	dx_setenv("UCX_RNDV_THRESH", "64k", 0);
	dx_setenv("OMPI_MCA_btl_tcp_eager_limit", "", 0);
	dx_sets = 0;
	CHECK(sdn_duplex_apply(dx_getenv, dx_setenv) == (int)SDNMPI_DUPLEX_NVARS - 2);
	CHECK(dx_sets == (int)SDNMPI_DUPLEX_NVARS - 2);
	CHECK(strcmp(dx_getenv("UCX_RNDV_THRESH"), "64k") == 0);
	CHECK(strcmp(dx_getenv("OMPI_MCA_btl_tcp_eager_limit"), "") == 0);
	CHECK(strcmp(dx_getenv("OMPI_MCA_btl_tcp_max_send_size"), "4194304") == 0);
	/* a failed setenv is reported, the others are still set */
	dx_reset();
	dx_fail_on = 1;
	CHECK(sdn_duplex_apply(dx_getenv, dx_setenv) == -1);
	CHECK(dx_n == (int)SDNMPI_DUPLEX_NVARS - 1);
	dx_reset();
}

static void test_duplex_config_file(const char *dir)
{
	char path[1024];
	struct sdn_config cfg;
	FILE *f;

	snprintf(path, sizeof(path), "%s/duplex.conf", dir);
	f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("SDNMPI_DUPLEX=1\n", f);
	fclose(f);
	fake_env[2][1] = path;
	CHECK(sdn_config_load(&cfg, fake_getenv, NULL, NULL) == 0 && cfg.duplex == 1);
	f = fopen(path, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("SDNMPI_DUPLEX=on\n", f);
	fclose(f);
	n_reported = 0;
	CHECK(sdn_config_load(&cfg, fake_getenv, record_report, NULL) == 1 && cfg.duplex == 0);
	CHECK(n_reported == 1 && strstr(reported[0], "SDNMPI_DUPLEX 'on' is not 0 or 1"));
	fake_env[2][1] = NULL;
}

static void test_evbuf(void)
{
	struct sdn_evbuf b;
	int counts[3] = {5, 6, 7};
	struct sdn_event *e = NULL;

	sdn_evbuf_init(&b);
	for (int i = 0; i < 5000; i++) {
		e = sdn_evbuf_push(&b);
		CHECK(e != NULL);
		e->bytes = (int64_t)i * 3000000000LL; /* beyond 32 bits */
	}
	CHECK(b.n == 5000 && b.cap >= 5000);
	CHECK(b.ev[4999].bytes == 4999LL * 3000000000LL);
	CHECK(b.ev[10].peer == SDN_PEER_NONE && b.ev[10].counts_off == -1);
	e->counts_off = sdn_evbuf_push_counts(&b, counts, 3);
	e->counts_len = 3;
	CHECK(e->counts_off == 0 && sdn_event_counts(&b, e)[2] == 7);
	CHECK(sdn_evbuf_push_counts(&b, counts, 2) == 3);
	CHECK(strcmp(sdn_kind_name(SDN_KIND_COLLV), "collv") == 0);
	CHECK(strcmp(sdn_kind_name(99), "unknown") == 0);
	sdn_evbuf_free(&b);
	CHECK(b.n == 0 && b.ev == NULL);
}

static void test_json(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	sdn_json_str(f, "a\"b\\c\nd\te\x01\xc3\xa9");
	fputc(' ', f);
	sdn_json_str(f, NULL);
	fputc(' ', f);
	sdn_json_double(f, 1.5);
	fclose(f);
	CHECK(strcmp(buf, "\"a\\\"b\\\\c\\nd\\te\\u0001\\u00c3\\u00a9\" \"\" 1.500000000") == 0);
	free(buf);
}

static void test_histo(void)
{
	struct sdn_histo h;
	int64_t sizes[2000];
	uint64_t counts[2000];

	sdn_histo_init(&h);
	CHECK(sdn_histo_add(&h, -1, 1) == -1);
	for (int64_t s = 1000; s >= 0; s--)
		CHECK(sdn_histo_add(&h, s * 8, (uint64_t)s + 1) == 0);
	CHECK(sdn_histo_add(&h, 8, 10) == 0);
	CHECK(h.n == 1001);
	CHECK(sdn_histo_sorted(&h, sizes, counts) == 1001);
	CHECK(sizes[0] == 0 && counts[0] == 1);
	CHECK(sizes[1] == 8 && counts[1] == 12);
	CHECK(sizes[1000] == 8000 && counts[1000] == 1001);
	sdn_histo_free(&h);
}

static void test_reqmap(void)
{
	struct sdn_reqmap m;
	int ok = 1;

	sdn_reqmap_init(&m);
	CHECK(sdn_reqmap_get(&m, 5) == -1 && sdn_reqmap_take(&m, 5) == -1);
	for (uint64_t k = 0; k < 3000; k++) /* handles: small ints (MPICH), pointers (Open MPI) */
		CHECK(sdn_reqmap_put(&m, k < 1500 ? k : 0x7f0000001000ull + 16 * k, (int64_t)k) == 0);
	CHECK(m.n == 3000);
	CHECK(sdn_reqmap_put(&m, 7, 70) == 0 && m.n == 3000 && sdn_reqmap_get(&m, 7) == 70);
	for (uint64_t k = 0; k < 1500; k += 2) /* remove every other entry ... */
		CHECK(sdn_reqmap_take(&m, k) == (k == 7 ? 70 : (int64_t)k));
	for (uint64_t k = 0; k < 3000; k++) { /* ... the rest must still be found */
		uint64_t key = k < 1500 ? k : 0x7f0000001000ull + 16 * k;
		int64_t want = (k < 1500 && k % 2 == 0) ? -1 : (k == 7 ? 70 : (int64_t)k);
		ok &= sdn_reqmap_get(&m, key) == want;
	}
	CHECK(ok);
	CHECK(m.n == 3000 - 750);
	sdn_reqmap_free(&m);
}

/* A 2-rank trace: rank r sends 3 x 100 B to the other, receives 1 x 40 B, one
 * allreduce of 16 doubles, an alltoallv with counts {1, 2} ints. */
static void fill_rank(struct sdn_evbuf *b, int rank)
{
	static const int counts[2] = {1, 2};
	struct sdn_event *e;

	for (int i = 0; i < 3; i++) {
		e = sdn_evbuf_push(b);
		e->name = "MPI_Send";
		e->kind = SDN_KIND_SEND;
		e->comm_id = 0;
		e->peer = 1 - rank;
		e->tag = 7;
		e->count = 25;
		e->type_bytes = 4;
		e->bytes = 100;
		e->t_start = 0.1 * i;
		e->t_end = 0.1 * i + 0.01;
	}
	e = sdn_evbuf_push(b);
	e->name = "MPI_Recv";
	e->kind = SDN_KIND_RECV;
	e->comm_id = 0;
	e->peer = 1 - rank;
	e->tag = 8;
	e->count = 10;
	e->type_bytes = 4;
	e->bytes = 40;
	e->t_start = 0.4;
	e->t_end = 0.41;
	e = sdn_evbuf_push(b);
	e->name = "MPI_Allreduce";
	e->coll = "allreduce";
	e->kind = SDN_KIND_COLL;
	e->comm_id = 0;
	e->count = 16;
	e->type_bytes = 8;
	e->bytes = 128;
	e->t_start = 0.5;
	e->t_end = 0.6;
	e = sdn_evbuf_push(b);
	e->name = "MPI_Alltoallv";
	e->coll = "alltoallv";
	e->kind = SDN_KIND_COLLV;
	e->comm_id = 0;
	e->type_bytes = 4;
	e->counts_off = sdn_evbuf_push_counts(b, counts, 2);
	e->counts_len = 2;
	e->bytes = 12;
	e->t_start = 0.7;
	e->t_end = 0.8;
}

static void test_writers(const char *outdir)
{
	static const int32_t world[2] = {0, 1}, self[2][1] = {{0}, {1}};
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	for (int rank = 0; rank < 2; rank++) {
		struct sdn_comm_info comms[2] = {{0, 2, world}, {1, 1, self[rank]}};
		struct sdn_trace_meta m = {rank, 2, 1000 + rank, "host\"1", "MPICH Version: 4.0.2",
					   "unit", 1700000000.5, SDN_MODE_PROFILE, comms, 2};
		struct sdn_evbuf b;

		sdn_evbuf_init(&b);
		fill_rank(&b, rank);
		f = open_memstream(&buf, &len);
		CHECK(sdn_write_trace(f, &m, &b) == 0);
		fclose(f);
		CHECK(strncmp(buf, "{\"schema\":\"sdnmpi-trace/1\",\"rank\":", 34) == 0);
		CHECK(strstr(buf, "\"host\":\"host\\\"1\"") != NULL);
		CHECK(strstr(buf, "\"communicators\":[{\"id\":0,\"ranks\":[0,1]}") != NULL);
		CHECK(strstr(buf, "\"counts\":[1,2]") != NULL);
		free(buf);
		f = open_memstream(&buf, &len);
		CHECK(sdn_write_pfprof(f, &m, &b) == 0);
		fclose(f);
		CHECK(strstr(buf, rank ? "\"tx_bytes\": [300, 0]" : "\"tx_bytes\": [0, 300]"));
		CHECK(strstr(buf, rank ? "\"rx_messages\": [1, 0]" : "\"rx_messages\": [0, 1]"));
		CHECK(strstr(buf, "\"tx_message_sizes\": [{\"frequency\": 3, \"message_size\": 100}]"));
		free(buf);
		if (outdir)
			CHECK(sdn_write_outputs(outdir, &m, &b, record_report, NULL) == 0);
		sdn_evbuf_free(&b);
	}
	CHECK(sdn_prepare_dir("/proc/sdnmpi-no-such-dir") == -1);
}

/* bcast mode: the mode word and its keys (csrc/pmpi/README.md) */
static void test_bcast_config(struct sdn_config *cfg)
{
	unsigned modes = 0, addr = 0, port = 0;

	sdn_config_defaults(cfg);
	CHECK(cfg->bcast_min_bytes == 65536 && cfg->bcast_timeout_ms == 1000);
	CHECK(cfg->bcast_open_timeout_ms == 10000);
	CHECK(sdn_config_set(cfg, "SDNMPI_BCAST_OPEN_TIMEOUT_MS", "30000", NULL, NULL) == 0);
	CHECK(cfg->bcast_open_timeout_ms == 30000);
	CHECK(sdn_config_set(cfg, "SDNMPI_BCAST_OPEN_TIMEOUT_MS", "x", NULL, NULL) == 1);
	CHECK(cfg->bcast_open_timeout_ms == 30000);
	CHECK(cfg->bcast_window == 128 && cfg->bcast_group[0] == '\0' && !cfg->bcast_stats);
	CHECK(sdn_config_parse_modes("register,bcast", &modes, NULL, NULL) == 0);
	CHECK(modes == (SDN_MODE_REGISTER | SDN_MODE_BCAST));
	CHECK(sdn_config_set(cfg, "SDNMPI_BCAST_MIN_BYTES", "1048576", NULL, NULL) == 0);
	CHECK(cfg->bcast_min_bytes == 1048576);
	CHECK(sdn_config_set(cfg, "SDNMPI_BCAST_MIN_BYTES", "0", NULL, NULL) == 1);
	CHECK(cfg->bcast_min_rate == 1000000);
	CHECK(sdn_config_set(cfg, "SDNMPI_BCAST_MIN_RATE", "156250", NULL, NULL) == 0);
	CHECK(cfg->bcast_min_rate == 156250);
	CHECK(sdn_config_set(cfg, "SDNMPI_BCAST_MIN_RATE", "999", NULL, NULL) == 1);
	CHECK(sdn_config_set(cfg, "SDNMPI_BCAST_MIN_RATE", "fast", NULL, NULL) == 1);
	CHECK(cfg->bcast_min_rate == 156250);
	CHECK(sdn_config_set(cfg, "SDNMPI_BCAST_TIMEOUT_MS", "250", NULL, NULL) == 0);
	CHECK(cfg->bcast_timeout_ms == 250);
	CHECK(sdn_config_set(cfg, "SDNMPI_BCAST_TIMEOUT_MS", "5", NULL, NULL) == 1);
	CHECK(sdn_config_set(cfg, "SDNMPI_BCAST_WINDOW", "64", NULL, NULL) == 0);
	CHECK(cfg->bcast_window == 64);
	CHECK(sdn_config_set(cfg, "SDNMPI_BCAST_STATS", "1", NULL, NULL) == 0 && cfg->bcast_stats);
	CHECK(sdn_config_set(cfg, "SDNMPI_BCAST_GROUP", "239.1.2.3:5000", NULL, NULL) == 0);
	CHECK(strcmp(cfg->bcast_group, "239.1.2.3:5000") == 0);
	n_reported = 0;
	CHECK(sdn_config_set(cfg, "SDNMPI_BCAST_GROUP", "224.0.0.1:5000", record_report, NULL) == 1);
	CHECK(n_reported == 1 && strstr(reported[0], "239.a.b.c:port") != NULL);
	CHECK(strcmp(cfg->bcast_group, "239.1.2.3:5000") == 0);
	CHECK(sdn_config_parse_group("239.1.2.3:5000", &addr, &port) == 0);
	CHECK(addr == 0xEF010203u && port == 5000);
	CHECK(sdn_config_parse_group("239.1.2.3", &addr, &port) == -1);
	CHECK(sdn_config_parse_group("239.1.2.3:0", &addr, &port) == -1);
	CHECK(sdn_config_parse_group("239.1.2.256:1", &addr, &port) == -1);
	CHECK(sdn_config_parse_group("239.1.2.3:1x", &addr, &port) == -1);
}

static void test_agent_protocol(void)
{
	struct sdn_agent_reply r;
	char out[64], line[256];
	int sv[2], passed = -1, pipefd[2];
	struct sdn_config cfg;

	/* primitive codes: the tag layout's (csrc/include/sdnmpi/tag.h) */
	CHECK(sdn_primitive_of(SDN_KIND_SEND, NULL) == 1);
	CHECK(sdn_primitive_of(SDN_KIND_SENDRECV, NULL) == 1);
	CHECK(sdn_primitive_of(SDN_KIND_COLL, "bcast") == 3);
	CHECK(sdn_primitive_of(SDN_KIND_COLL, "reduce") == 4);
	CHECK(sdn_primitive_of(SDN_KIND_COLLV, "alltoallv") == 13);
	CHECK(sdn_primitive_of(SDN_KIND_COLL, "frobnicate") == 31);
	CHECK(sdn_primitive_of(SDN_KIND_COMPLETION, NULL) == 0);
	CHECK(sdn_primitive_of(SDN_KIND_INIT, NULL) == 0);
	/* %h expansion */
	CHECK(sdn_expand_host("/run/x/%h.sock", "h7", out, sizeof(out)) == 0);
	CHECK(strcmp(out, "/run/x/h7.sock") == 0);
	CHECK(sdn_expand_host("%h%h", "abc", out, 7) == 0 && strcmp(out, "abcabc") == 0);
	CHECK(sdn_expand_host("%h%h", "abc", out, 6) == -1);
	/* replies as the agent writes them (json.dumps) */
	CHECK(sdn_agent_parse_reply("{\"ok\": true, \"ctx_slot\": 3, \"ip\": \"10.0.0.7\", "
				    "\"listen_ports\": [1024, 40000]}", &r) == 0);
	CHECK(r.ok && r.ctx_slot == 3 && strcmp(r.ip, "10.0.0.7") == 0);
	CHECK(r.nports == 2 && r.ports[0] == 1024 && r.ports[1] == 40000);
	CHECK(r.job_slot == -1); /* an agent without job slots in its reply */
	CHECK(sdn_agent_parse_reply("{\"ok\": true, \"ctx_slot\": 0, \"job_slot\": 17, "
				    "\"ip\": \"10.0.0.7\", \"listen_ports\": []}", &r) == 0);
	CHECK(r.ok && r.ctx_slot == 0 && r.job_slot == 17 && r.nports == 0);
	CHECK(sdn_agent_parse_reply("{\"ok\": true, \"ctx_slot\": 0, \"job_slot\": null, "
				    "\"ip\": \"10.0.0.7\", \"listen_ports\": []}", &r) == 0);
	CHECK(r.ok && r.job_slot == -1);
	CHECK(sdn_agent_parse_reply("{\"ok\": false, \"error\": \"rank 0 of job \\\"j\\\" taken\"}",
				    &r) == 0);
	CHECK(!r.ok && strcmp(r.error, "rank 0 of job \"j\" taken") == 0);
	CHECK(sdn_agent_parse_reply("{\"ok\": true, \"group\": \"239.1.2.3\", \"port\": 5001}",
				    &r) == 0);
	CHECK(r.ok && strcmp(r.group, "239.1.2.3") == 0 && r.port == 5001 && r.nports == 0);
	CHECK(sdn_agent_parse_reply("not json", &r) == -1);
	CHECK(sdn_agent_parse_reply("{\"x\": 1}", &r) == -1);
	/* one exchange with a descriptor passed along (SCM_RIGHTS) */
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	CHECK(pipe(pipefd) == 0);
	{
		char data[] = "{\"ok\": true}\n";
		char cbuf[CMSG_SPACE(sizeof(int))];
		struct iovec iov = {data, strlen(data)};
		struct msghdr msg = {0};
		struct cmsghdr *c;
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = cbuf;
		msg.msg_controllen = sizeof(cbuf);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pipefd[1], sizeof(int));
		CHECK(sendmsg(sv[1], &msg, 0) == (ssize_t)strlen(data));
	}
	CHECK(sdn_agent_call(sv[0], "{\"op\":\"status\"}", line, sizeof(line), &passed) == 0);
	CHECK(strcmp(line, "{\"ok\": true}") == 0 && passed >= 0);
	CHECK(read(sv[1], out, sizeof(out)) == 16 && memcmp(out, "{\"op\":\"status\"}\n", 16) == 0);
	if (passed >= 0) {
		CHECK(write(passed, "x", 1) == 1); /* the passed fd is the pipe's write end */
		CHECK(read(pipefd[0], out, 1) == 1 && out[0] == 'x');
		close(passed);
	}
	/* Replies queued together are read one per call, none lost. */
	CHECK(write(sv[1], "{\"ok\": true, \"port\": 1}\n{\"ok\": true, \"port\": 2}\n", 48) == 48);
	CHECK(sdn_agent_call(sv[0], "{}", line, sizeof(line), &passed) == 0);
	CHECK(strcmp(line, "{\"ok\": true, \"port\": 1}") == 0);
	CHECK(sdn_agent_call(sv[0], "{}", line, sizeof(line), &passed) == 0);
	CHECK(strcmp(line, "{\"ok\": true, \"port\": 2}") == 0);
	/* A reply that comes after its request timed out is skipped by the next exchange,
	 * which gets its own. */
	{
		struct timeval tv = {0, 50000};
		unsigned stale = 0;
		CHECK(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0);
		CHECK(sdn_agent_exchange(sv[0], "{\"op\":\"a\"}", line, sizeof(line), &passed,
					 &stale) == -1 && stale == 1);
		CHECK(write(sv[1], "{\"ok\": true, \"group\": \"239.0.0.1\"}\n", 35) == 35);
		CHECK(write(sv[1], "{\"ok\": false, \"error\": \"b\"}\n", 28) == 28);
		CHECK(sdn_agent_exchange(sv[0], "{\"op\":\"b\"}", line, sizeof(line), &passed,
					 &stale) == 0 && stale == 0);
		CHECK(strcmp(line, "{\"ok\": false, \"error\": \"b\"}") == 0);
	}
	while (recv(sv[1], out, sizeof(out), MSG_DONTWAIT) > 0)
		; /* the requests the test sent */
	close(sv[1]); /* the agent went away: the next call fails cleanly */
	CHECK(sdn_agent_call(sv[0], "{}", line, sizeof(line), &passed) == -1 && passed == -1);
	close(sv[0]);
	close(pipefd[0]);
	close(pipefd[1]);
	CHECK(sdn_agent_connect("/proc/sdnmpi-no-such.sock", 100) == -1);
	/* configuration keys of the node modes */
	sdn_config_defaults(&cfg);
	CHECK(strcmp(cfg.agent_socket, "/run/sdnmpi/agent.sock") == 0 && cfg.job_slot == 0);
	CHECK(sdn_config_set(&cfg, "SDNMPI_JOB_SLOT", "5", NULL, NULL) == 0 && cfg.job_slot == 5);
	n_reported = 0;
	CHECK(sdn_config_set(&cfg, "SDNMPI_JOB_SLOT", "128", record_report, NULL) == 1);
	CHECK(cfg.job_slot == 5 && n_reported == 1 && strstr(reported[0], "1..127"));
	CHECK(cfg.push_timeout_ms == 2000);
	CHECK(sdn_config_set(&cfg, "SDNMPI_PUSH_TIMEOUT_MS", "250", NULL, NULL) == 0);
	CHECK(cfg.push_timeout_ms == 250);
	CHECK(sdn_config_set(&cfg, "SDNMPI_PUSH_TIMEOUT_MS", "0", NULL, NULL) == 1);
	CHECK(cfg.push_timeout_ms == 250);
	CHECK(cfg.agent_timeout_ms == 30000);
	n_reported = 0;
	CHECK(sdn_config_set(&cfg, "SDNMPI_AGENT_TIMEOUT_MS", "-5", record_report, NULL) == 1);
	CHECK(cfg.agent_timeout_ms == 30000 && n_reported == 1);
	CHECK(strstr(reported[0], "SDNMPI_AGENT_TIMEOUT_MS '-5'") != NULL);
	CHECK(sdn_config_set(&cfg, "SDNMPI_AGENT_TIMEOUT_MS", "500", NULL, NULL) == 0);
	CHECK(cfg.agent_timeout_ms == 500);
	CHECK(sdn_config_set(&cfg, "SDNMPI_AGENT_SOCKET", "/x/%h.sock", NULL, NULL) == 0);
	CHECK(strcmp(cfg.agent_socket, "/x/%h.sock") == 0);
	test_bcast_config(&cfg);
}

int main(int argc, char **argv)
{
	const char *outdir = argc > 1 ? argv[1] : NULL;

	test_modes();
	test_config_file(outdir ? outdir : "/tmp");
	test_duplex();
	test_duplex_config_file(outdir ? outdir : "/tmp");
	test_evbuf();
	test_json();
	test_histo();
	test_reqmap();
	test_writers(outdir);
	test_agent_protocol();
	printf("test_core: %d checks, %d failures\n", checks, failures);
	return failures ? 1 : 0;
}
