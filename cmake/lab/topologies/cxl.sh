# Lab topology `cxl`: two CPU sockets plus a CPU-less memory node standing in for a CXL memory
# expander attached to socket 0. The firmware's HMAT (QEMU -machine hmat=on) says node 2 is the
# slow tier: 4x the latency and a fraction of the bandwidth of local DRAM. Tiering and "memory-
# only node" handling are tested here.
LAB_SUMMARY="two CPU nodes + CPU-less CXL-like node 2 (HMAT: slow tier)"
LAB_SMP="2,sockets=2,cores=1,threads=1"
LAB_NODE_IDS=(0 1 2)
LAB_NODE_CPUS=("0" "1" "")
LAB_NODE_MEM_MIB=(640 640 512)
LAB_DISTANCES=(
  "10 21 24"
  "21 10 34"
  "24 34 10"
)
# HMAT. Every node names its attached initiator (a node with CPUs); the kernel then reports
# /sys/devices/system/node/nodeN/access0/initiators/ from exactly that initiator's entry.
LAB_HMAT_INITIATOR=(0 1 0)
# "initiator target latency_ns bandwidth_MBps" for every initiator/target pair (QEMU wants all).
LAB_HMAT_LB=(
  "0 0 100 20000"
  "0 1 180 10000"
  "0 2 400 5000"
  "1 0 180 10000"
  "1 1 100 20000"
  "1 2 520 3000"
)
