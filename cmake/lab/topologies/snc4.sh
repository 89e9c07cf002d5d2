# Lab topology `snc4`: the seed's AMD EPYC 9654 pair with sub-NUMA clustering, scaled down to
# one CPU per domain. Nodes 0,1 are the two SNC domains of socket 0, nodes 2,3 those of
# socket 1: distance 10 local, 12 to the other domain of the same socket, 32 across sockets.
# This is where "nearest node" fallback order and same-socket interleave are tested.
LAB_SUMMARY="EPYC 9654 SNC: 2 sockets x 2 domains, one CPU each, distances 10/12/32"
LAB_SMP="4,sockets=2,cores=2,threads=1"
LAB_NODE_IDS=(0 1 2 3)
LAB_NODE_CPUS=("0" "1" "2" "3")
LAB_NODE_MEM_MIB=(512 512 512 512)
LAB_DISTANCES=(
  "10 12 32 32"
  "12 10 32 32"
  "32 32 10 12"
  "32 32 12 10"
)
