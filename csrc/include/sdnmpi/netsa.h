/* SPDX-License-Identifier: MIT */
/*
 * NetSA's application API, from libsdnmpi.so (csrc/pmpi/netsa.c).
 *
 * net_set_pattern(pattern_id): make the routes of the stored communication
 * pattern `pattern_id` (sdnmpi pattern put) active for the calling job.
 * Returns 1 on success, 0 on error (the reason is printed on stderr once per
 * call; the job keeps its current routes). The job is $SLURM_JOB_ID or
 * $SDNMPI_JOB, the manager $SDNMPI_MANAGER (default /run/sdnmpi/manager.sock).
 * It blocks until the manager has installed the routes (or refused).
 */
#ifndef SDNMPI_NETSA_H
#define SDNMPI_NETSA_H

#ifdef __cplusplus
extern "C" {
#endif

int net_set_pattern(const char *pattern_id);

#ifdef __cplusplus
}
#endif

#endif /* SDNMPI_NETSA_H */
