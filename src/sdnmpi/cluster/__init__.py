"""A cluster's job stream, simulated: jobs (:mod:`~sdnmpi.cluster.jobs`, from an SWF
log or a synthetic generator), the fabric shared by the running jobs
(:mod:`~sdnmpi.cluster.sharing`), the event-driven replay with the manager's planning
in the loop (:mod:`~sdnmpi.cluster.replay`) and its summary
(:mod:`~sdnmpi.cluster.summary`).  Pure: the clock that times routing is passed in."""
