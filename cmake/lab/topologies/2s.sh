# Lab topology `2s`: a two-socket server, one CPU per socket, SLIT distance 21 between them.
# The simplest real NUMA machine: every placement test's first proof.
# (Format: see cmake/lab/README.md, "Adding a topology". Sourced by run.sh, which turns these
# values into QEMU's -numa options AND into /lab/topology.txt for the tests, so what QEMU is
# given and what the tests expect cannot drift apart.)
LAB_SUMMARY="two sockets, one CPU each, distance 21"
LAB_SMP="2,sockets=2,cores=1,threads=1"
LAB_NODE_IDS=(0 1)
LAB_NODE_CPUS=("0" "1")
LAB_NODE_MEM_MIB=(768 768)
LAB_DISTANCES=(
  "10 21"
  "21 10"
)
