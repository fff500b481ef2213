"""The emulated cluster: a topology built on this machine for real MPI traffic.

Hosts are network namespaces, switches are bridges of a private userspace Open
vSwitch instance, links are veth pairs shaped with HTB.  :mod:`~sdnmpi.emu.plan`
turns a topology into a plan (pure data), :mod:`~sdnmpi.emu.runner` executes it
and records what it created in a state file (:mod:`~sdnmpi.emu.state`) so that
``down`` removes exactly that, and :mod:`~sdnmpi.emu.mpi` builds MPI launch lines
that run ranks in the host namespaces.

One fabric at a time per network namespace: the userspace datapath of OVS 3.1
always names its tap device ``ovs-netdev``, so a second netdev-datapath OVS
instance (another fabric, or any other) cannot start beside it; ``up`` says so.
"""
