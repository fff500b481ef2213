/* A stand-in for UCX's libucp in tests: ucp_worker_progress() returns the
 * number its "worker" points to, so a test controls whether a pass found
 * events, and sees that libsdnmpi_idle passes the worker through. */
unsigned ucp_worker_progress(void *worker);

unsigned ucp_worker_progress(void *worker)
{
	return *(const unsigned *)worker;
}
