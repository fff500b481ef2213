"""The interconnect manager (issue 6): many jobs on one fabric.

* :mod:`~sdnmpi.manager.service`: the pure core (job state machine, routing with
  the other jobs' load, authorization, reconcile); :mod:`~sdnmpi.manager.planning`
  turns a pattern and a placement into host-pair routes.
* Stores: :mod:`~sdnmpi.manager.store` (the interface), ``memory``, ``sqlite``
  (default), ``postgres``.
* Adapters: :mod:`~sdnmpi.manager.controller_client` (the controller's JSON-lines API),
  :mod:`~sdnmpi.manager.grpcapi` (the servicer), :mod:`~sdnmpi.manager.peercred`
  (SO_PEERCRED proxy), :mod:`~sdnmpi.manager.server`, :mod:`~sdnmpi.manager.client`.
* :mod:`~sdnmpi.manager.fake`: a fake controller for tests.

See docs/manager.md.
"""
