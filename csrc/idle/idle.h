/* libsdnmpi_idle.so: settings and the sleep schedule (see idle.c). */
#ifndef SDNMPI_IDLE_H
#define SDNMPI_IDLE_H

#define SDN_IDLE_DEFAULT_FIRST_US 50L
#define SDN_IDLE_DEFAULT_LONGEST_US 200L
#define SDN_IDLE_MAX_US 100000L /* 0.1 s: longer would stall any MPI program */

struct sdn_idle_cfg {
	long first_ns;   /* 0: plain sched_yield() */
	long longest_ns;
};

/* "FIRST,LONGEST" (microseconds, FIRST <= LONGEST <= SDN_IDLE_MAX_US) or
 * "FIRST" (a constant sleep); NULL or "" gives the defaults, "0" turns sleeping
 * off.  Returns 0, or -1 for a malformed or out-of-range value (cfg then holds
 * the defaults). */
int sdn_idle_parse(const char *text, struct sdn_idle_cfg *cfg);

/* The next sleep: FIRST again when the previous call returned more than twice
 * the current sleep (plus 0.2 ms) ago, i.e. the rank worked in between;
 * otherwise twice the current sleep, at most LONGEST. */
long sdn_idle_next(const struct sdn_idle_cfg *cfg, long current_ns, long since_last_ns);

#endif
