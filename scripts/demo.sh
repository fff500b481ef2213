#!/usr/bin/env bash
# The main end-to-end job that exists so far: topologies and communication patterns
# from bundled and real data, through the sdnmpi CLI.  Later issues replace this with
# the emulated cluster and real MPI ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin
out=${SDNMPI_DEMO_OUT:-out/demo}
shared=${SHARED:-../shared}
trace="$shared/workloads/pfsim-traces/cg-c-128.tar.gz"
mkdir -p "$out"

step() { printf '\n\033[1m== %s ==\033[0m\n' "$*"; }

step "The seed cluster 'milk' (bundled GraphML): hosts, switches, bisection"
$bin/sdnmpi topology show milk

step "NetSA's testbed: bandwidth-class spine uplinks and a latency-class ToR link"
$bin/sdnmpi topology show netsa --links

step "MPICH's default MPI_Allreduce for 16 ranks and 1 MiB, expanded step by step"
$bin/sdnmpi pattern show allreduce:nprocs=16,bytes=1048576,type_bytes=8 --top 5

if [ -f "$trace" ]; then
    step "Real NPB CG class C trace, 128 ranks, aggregated to milk's hosts as recorded"
    $bin/sdnmpi pattern show "$trace" --topology milk --placement recorded --top 8 \
        --plot "$out/cg-c-128-hosts.png"
    $bin/sdnmpi pattern convert "$trace" "$out/cg-c-128-hosts.xml" --topology milk \
        --placement recorded --classify
else
    step "NPB CG class C model, 128 ranks (trace not found at $trace)"
    $bin/sdnmpi pattern show cg:nprocs=128,klass=C --topology milk --top 8 \
        --plot "$out/cg-c-128-hosts.png"
fi

if [ -f "$trace" ]; then
    step "Routing the CG trace on milk: D-mod-K, ECMP, ours, against the LP lower bound"
    $bin/sdnmpi evaluate --topology milk --workload "$trace" --placement recorded \
        --routers single,ecmp,dmodk,minhop,ours --plot "$out/evaluate"
fi

step "MPI_Allreduce (1 MiB, 28 ranks) on the seed's 28-host fat-tree, every router"
$bin/sdnmpi evaluate --topology allreduce28 --workload allreduce:nprocs=28,bytes=1048576 \
    --routers single,ecmp,dmodk,minhop,allreduce,greedy,netsa,ours

if [ "$(id -u)" -eq 0 ]; then
    step "Real MPI on an emulated leaf-spine: D-mod-K defaults vs 'ours' job routes"
    $bin/python scripts/demo_fabric.py --out "$out" --json "$out/demo-fabric.json"
else
    step "Emulated fabric demo skipped: needs root (run: sudo make demo)"
fi

step "Done"
echo "heat map: $out/cg-c-128-hosts.png"
ls "$out"
