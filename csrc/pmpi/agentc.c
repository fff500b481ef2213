/* The rank's side of the node agent protocol, without MPI (see agentc.h). */
#include "agentc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "event.h"
#include "sdnmpi/tag.h"

static const struct {
	const char *coll;
	unsigned code;
} COLL_CODES[] = {
	{"barrier", SDNMPI_PRIM_BARRIER},     {"bcast", SDNMPI_PRIM_BCAST},
	{"reduce", SDNMPI_PRIM_REDUCE},       {"allreduce", SDNMPI_PRIM_ALLREDUCE},
	{"alltoall", SDNMPI_PRIM_ALLTOALL},   {"allgather", SDNMPI_PRIM_ALLGATHER},
	{"gather", SDNMPI_PRIM_GATHER},       {"scatter", SDNMPI_PRIM_SCATTER},
	{"reduce_scatter", SDNMPI_PRIM_REDUCE_SCATTER},
	{"scan", SDNMPI_PRIM_SCAN},           {"exscan", SDNMPI_PRIM_EXSCAN},
	{"alltoallv", SDNMPI_PRIM_ALLTOALLV}, {"allgatherv", SDNMPI_PRIM_ALLGATHERV},
	{"gatherv", SDNMPI_PRIM_GATHERV},     {"scatterv", SDNMPI_PRIM_SCATTERV},
	{"reduce_scatter_block", SDNMPI_PRIM_REDUCE_SCATTER_BLOCK},
};

unsigned sdn_primitive_of(int kind, const char *coll)
{
	if (kind == SDN_KIND_SEND || kind == SDN_KIND_RECV || kind == SDN_KIND_SENDRECV)
		return SDNMPI_PRIM_P2P;
	if (kind != SDN_KIND_COLL && kind != SDN_KIND_COLLV)
		return 0;
	for (size_t i = 0; coll && i < sizeof(COLL_CODES) / sizeof(COLL_CODES[0]); i++)
		if (strcmp(coll, COLL_CODES[i].coll) == 0)
			return COLL_CODES[i].code;
	return SDNMPI_PRIM_OTHER;
}

int sdn_expand_host(const char *tmpl, const char *host, char *out, size_t len)
{
	size_t used = 0, hlen = strlen(host);

	for (const char *p = tmpl; *p; p++) {
		const char *piece = p;
		size_t n = 1;
		if (p[0] == '%' && p[1] == 'h') {
			piece = host;
			n = hlen;
			p++;
		}
		if (used + n >= len)
			return -1;
		memcpy(out + used, piece, n);
		used += n;
	}
	if (used >= len)
		return -1;
	out[used] = '\0';
	return 0;
}

/* The text after "key": in a flat JSON object, or NULL. */
static const char *value_of(const char *line, const char *key)
{
	char pat[64];
	const char *p;
	size_t n = strlen(key);

	if (n + 3 > sizeof(pat))
		return NULL;
	pat[0] = '"';
	memcpy(pat + 1, key, n);
	pat[n + 1] = '"';
	pat[n + 2] = '\0';
	p = strstr(line, pat);
	if (!p)
		return NULL;
	p += n + 2;
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p != ':')
		return NULL;
	p++;
	while (*p == ' ' || *p == '\t')
		p++;
	return p;
}

static void copy_string(const char *v, char *out, size_t len)
{
	size_t i = 0;

	out[0] = '\0';
	if (!v || *v != '"')
		return;
	for (v++; *v && *v != '"' && i + 1 < len; v++) {
		if (*v == '\\' && v[1])
			v++;
		out[i++] = *v;
	}
	out[i] = '\0';
}

static void parse_ports(const char *v, struct sdn_agent_reply *r)
{
	char *end;

	r->nports = 0;
	if (!v || *v != '[')
		return;
	for (v++; *v && *v != ']' && r->nports < SDN_AGENT_MAX_PORTS;) {
		long port = strtol(v, &end, 10);
		if (end == v)
			break;
		r->ports[r->nports++] = (int)port;
		v = end;
		while (*v == ',' || *v == ' ')
			v++;
	}
}

int sdn_agent_parse_reply(const char *line, struct sdn_agent_reply *r)
{
	const char *v;

	memset(r, 0, sizeof(*r));
	r->ctx_slot = -1;
	r->job_slot = -1;
	if (line[0] != '{' || !(v = value_of(line, "ok")))
		return -1;
	r->ok = strncmp(v, "true", 4) == 0;
	if ((v = value_of(line, "ctx_slot")))
		r->ctx_slot = (int)strtol(v, NULL, 10);
	if ((v = value_of(line, "job_slot")) && *v >= '0' && *v <= '9')
		r->job_slot = (int)strtol(v, NULL, 10);
	copy_string(value_of(line, "ip"), r->ip, sizeof(r->ip));
	copy_string(value_of(line, "error"), r->error, sizeof(r->error));
	copy_string(value_of(line, "group"), r->group, sizeof(r->group));
	if ((v = value_of(line, "port")) && *v >= '0' && *v <= '9')
		r->port = (int)strtol(v, NULL, 10);
	parse_ports(value_of(line, "listen_ports"), r);
	return 0;
}

int sdn_agent_connect(const char *path, int timeout_ms)
{
	struct sockaddr_un addr;
	struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
	int fd;

	if (strlen(path) >= sizeof(addr.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	strcpy(addr.sun_path, path);
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) ||
	    connect(fd, (struct sockaddr *)&addr, sizeof(addr))) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

static int send_all(int fd, const char *buf, size_t n)
{
	while (n) {
		ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		buf += w;
		n -= (size_t)w;
	}
	return 0;
}

/* One recvmsg; a passed descriptor lands in *passed_fd.  Bytes read, or -1. */
static ssize_t recv_some(int fd, char *buf, size_t len, int *passed_fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} control;
	struct iovec iov = {buf, len};
	struct msghdr msg = {0};
	ssize_t n;

	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = control.buf;
	msg.msg_controllen = sizeof(control.buf);
	do
		n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int))) {
			int got;
			memcpy(&got, CMSG_DATA(c), sizeof(int));
			if (*passed_fd >= 0)
				close(*passed_fd);
			*passed_fd = got;
		}
	}
	return n;
}

/* Read one line (to its newline, not beyond: a reply queued behind it stays for the
 * next read) into line; 0, or -1 on timeout, close, error or a line too long. */
static int read_line(int fd, char *line, size_t len, int *passed_fd)
{
	size_t used = 0;

	while (used + 1 < len) {
		ssize_t peeked, n;
		char *nl;
		do
			peeked = recv(fd, line + used, len - 1 - used, MSG_PEEK);
		while (peeked < 0 && errno == EINTR);
		if (peeked <= 0)
			break;
		nl = memchr(line + used, '\n', (size_t)peeked);
		n = recv_some(fd, line + used, nl ? (size_t)(nl - (line + used)) + 1 : (size_t)peeked,
			      passed_fd);
		if (n < 0)
			break;
		used += (size_t)n;
		line[used] = '\0';
		nl = strchr(line, '\n');
		if (nl) {
			*nl = '\0';
			return 0;
		}
	}
	if (*passed_fd >= 0) {
		close(*passed_fd);
		*passed_fd = -1;
	}
	return -1;
}

int sdn_agent_call(int fd, const char *request, char *line, size_t len, int *passed_fd)
{
	*passed_fd = -1;
	if (send_all(fd, request, strlen(request)) || send_all(fd, "\n", 1))
		return -1;
	return read_line(fd, line, len, passed_fd);
}

int sdn_agent_exchange(int fd, const char *request, char *line, size_t len, int *passed_fd,
		       unsigned *stale)
{
	*passed_fd = -1;
	if (send_all(fd, request, strlen(request)) || send_all(fd, "\n", 1))
		return -1;
	for (;;) {
		if (read_line(fd, line, len, passed_fd)) {
			++*stale; /* this request's reply is still to come */
			return -1;
		}
		if (!*stale)
			return 0;
		--*stale; /* a reply to an earlier request that had timed out */
		if (*passed_fd >= 0) {
			close(*passed_fd);
			*passed_fd = -1;
		}
	}
}
