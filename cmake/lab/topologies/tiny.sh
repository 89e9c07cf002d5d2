# Lab topology `tiny`: a normal node 0 and a 256 MiB node 1, so per-node budgets (warn 80 %,
# admission closes at 85 %, trip 90 %) and real node exhaustion are reached after allocating
# only a couple of hundred MiB. Budget and reclaim tests live here.
LAB_SUMMARY="node 0 normal, node 1 only 256 MiB"
LAB_SMP="2,sockets=2,cores=1,threads=1"
LAB_NODE_IDS=(0 1)
LAB_NODE_CPUS=("0" "1")
LAB_NODE_MEM_MIB=(768 256)
LAB_DISTANCES=(
  "10 21"
  "21 10"
)
