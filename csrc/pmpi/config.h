/* libsdnmpi configuration: SDNMPI_MODE, SDNMPI_TRACE_DIR, SDNMPI_JOB, ... from the
 * environment or an SDNMPI_CONFIG file (same keys, KEY=VALUE lines, '#'
 * comments).  The environment overrides the file.  No MPI dependency. */
#ifndef SDN_CONFIG_H
#define SDN_CONFIG_H

#include <stddef.h>

/* Mode bits: the library's four modes. */
#define SDN_MODE_PROFILE 0x1u
#define SDN_MODE_REGISTER 0x2u
#define SDN_MODE_PUSH 0x4u
#define SDN_MODE_TAG 0x8u
#define SDN_MODE_BCAST 0x10u /* switch-replicated MPI_Bcast (bcast.h) */
#define SDN_MODES_IMPLEMENTED \
	(SDN_MODE_PROFILE | SDN_MODE_REGISTER | SDN_MODE_TAG | SDN_MODE_PUSH | SDN_MODE_BCAST)

#define SDN_PATH_MAX 4096
#define SDN_JOB_MAX 256

struct sdn_config {
	unsigned modes;
	char trace_dir[SDN_PATH_MAX];
	char job[SDN_JOB_MAX];
	char agent_socket[SDN_PATH_MAX]; /* %h: this host's name */
	int job_slot;                    /* 0: none asked for (the hub decides) */
	int push_timeout_ms;             /* push mode: longest wait for routes */
	int agent_timeout_ms;            /* longest wait for the agent's register reply */
	int duplex;                      /* 1: set the full-duplex MPI settings (duplex.h) */
	long long bcast_min_bytes;       /* bcast mode: smallest replicated broadcast */
	long long bcast_min_rate;        /* bcast mode: bytes/s the UDP phase must average */
	int bcast_timeout_ms;            /* bcast mode: a receiver's dead timeout */
	int bcast_open_timeout_ms;       /* bcast mode: wait for the agent's tree */
	int bcast_window;                /* bcast mode: credit window in packets */
	char bcast_group[32];            /* bcast mode: static "239.a.b.c:port" (tests) or "" */
	int bcast_stats;                 /* 1: a stats line per rank at MPI_Finalize */
};

/* Problems are passed to report(ctx, message) (message without prefix). */
typedef void (*sdn_report_fn)(void *ctx, const char *message);
/* Environment lookup (getenv in the library, a table in tests). */
typedef const char *(*sdn_getenv_fn)(const char *name);

/* Defaults: mode profile, trace_dir ".", job "", agent_socket
 * "/run/sdnmpi/agent.sock", job_slot 0, push_timeout_ms 2000,
 * agent_timeout_ms 30000, duplex 0, bcast_min_bytes 65536, bcast_min_rate 1000000,
 * bcast_timeout_ms 1000,
 * bcast_open_timeout_ms 10000,
 * bcast_window 128, bcast_group "", bcast_stats 0. */
void sdn_config_defaults(struct sdn_config *cfg);
/* Parse "profile,tag" into bits; unknown names are reported and skipped.
 * "off" or "none" alone give 0.  Returns the number of problems. */
int sdn_config_parse_modes(const char *text, unsigned *modes, sdn_report_fn report, void *ctx);
/* Set one key (SDNMPI_MODE, SDNMPI_TRACE_DIR, SDNMPI_JOB, SDNMPI_AGENT_SOCKET,
 * SDNMPI_JOB_SLOT, SDNMPI_PUSH_TIMEOUT_MS, SDNMPI_AGENT_TIMEOUT_MS, SDNMPI_DUPLEX,
 * SDNMPI_BCAST_MIN_BYTES, SDNMPI_BCAST_MIN_RATE, SDNMPI_BCAST_TIMEOUT_MS,
 * SDNMPI_BCAST_OPEN_TIMEOUT_MS, SDNMPI_BCAST_WINDOW,
 * SDNMPI_BCAST_GROUP, SDNMPI_BCAST_STATS); unknown keys reported. */
int sdn_config_set(struct sdn_config *cfg, const char *key, const char *value,
		   sdn_report_fn report, void *ctx);
/* Read a KEY=VALUE file; a missing file or bad line is reported. */
int sdn_config_load_file(struct sdn_config *cfg, const char *path, sdn_report_fn report,
			 void *ctx);
/* Defaults, then SDNMPI_CONFIG's file if set, then the environment. */
int sdn_config_load(struct sdn_config *cfg, sdn_getenv_fn get, sdn_report_fn report, void *ctx);
/* "239.a.b.c:port" (a.b.c any, port 1..65535) into the group address and port
 * in host byte order; 0, or -1 if it is not one. */
int sdn_config_parse_group(const char *text, unsigned *addr, unsigned *port);
/* "profile,tag" for the bits set (buffer of at least 64 bytes). */
void sdn_config_modes_str(unsigned modes, char *buf, size_t len);

#endif
