# Lab topology `cxl-torch`: `cxl` (two CPU sockets plus a CPU-less, HMAT-slow memory node) with
# room for libtorch: the VM of tests/torch/torch_lab.cpp carries Debian's libtorch_cpu and the
# ~300 libraries it needs (~470 MB) in its initramfs, which the kernel unpacks into memory that
# `cxl`'s 640 MiB nodes then lack. Only the torch lab test runs here. Everything but the CPU
# nodes' memory is cxl.sh's.
source "$(dirname "${BASH_SOURCE[0]}")/cxl.sh"
LAB_SUMMARY="cxl with 1.5 GiB CPU nodes (room for libtorch in the initramfs)"
LAB_NODE_MEM_MIB=(1536 1536 512)
