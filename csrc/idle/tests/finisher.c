/* A rank that finishes as MPICH 4.0's ranks do over UCX (fakeucp.c's
 * MPI_Finalize): it progresses its worker once, calls MPI_Finalize() and prints
 * fakeucp_report()'s line: how many times the worker was progressed while the
 * rank sat in its barrier, and how many UCX calls met another one or came after
 * the worker was destroyed. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

unsigned ucp_worker_progress(void *worker);
int MPI_Finalize(void);
void fakeucp_report(void);

int main(void)
{
	unsigned events = 0;

	ucp_worker_progress(&events);
	if (MPI_Finalize() != 0)
		return 1;
	fakeucp_report();
	return 0;
}
