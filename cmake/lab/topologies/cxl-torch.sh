# Lab topology `cxl-torch`: `cxl` (two CPU sockets plus a CPU-less, HMAT-slow memory node)
# with room for libtorch: the VM of tests/torch/torch_lab.cpp carries Debian's libtorch_cpu and
# the ~300 libraries it needs (~470 MB) in its initramfs, which the kernel unpacks into memory
# that `cxl`'s 640 MiB nodes then lack. Only the torch lab test runs here.
LAB_SUMMARY="cxl with 1.5 GiB CPU nodes (room for libtorch in the initramfs)"
LAB_SMP="2,sockets=2,cores=1,threads=1"
LAB_NODE_IDS=(0 1 2)
LAB_NODE_CPUS=("0" "1" "")
LAB_NODE_MEM_MIB=(1536 1536 512)
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
