// The override library's std::ios_base::Init: nothing to initialise.
//
// absl/status/status.h (Debian's Abseil) includes <iostream>, so every file of numarena that
// uses Status runs std::ios_base::Init::Init() at load: with libstdc++ linked into this
// library (cmake/NumarenaPreload.cmake) that constructs the copy's eight standard streams and
// its classic locale (~70 KiB of code and libc's wide-character functions), in every process
// under `numarena run`, for streams nothing in the library writes to (its messages go out with
// write(2)). The link sends the constructor and the destructor here (--wrap), so the copy's
// ios_init.o is not linked at all, and neither are std::cout and the others: were any code in
// the library to name one, it would be linked unconstructed, so the preload test "start-up
// functions share a few fault-around windows" checks that the library defines none of them.
// /bin/true under the override: 3.2 -> 3.05 MiB of peak RSS.
//
// This is GCC 12's libstdc++ (Debian 12): from GCC 13 on, <iostream> no longer puts an Init
// object in each file, and libstdc++'s own ios_init.o builds the streams from a constructor
// that this wrap does not reach; the start-up test would then fail, and the wrap should go.

extern "C" void __wrap__ZNSt8ios_base4InitC1Ev(void* /*init*/) {}
extern "C" void __wrap__ZNSt8ios_base4InitD1Ev(void* /*init*/) {}
