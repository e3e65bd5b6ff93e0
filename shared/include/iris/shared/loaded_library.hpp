// A run-time library's entry-point table loaded once with dlopen, or the reason it could not be.
// Every loader (cuda_library, hip_library, engines/hsa/hsa_library, scaleout/ucx_library; as
// NCCL's *wrap.cc) fills one of these with resolve(), and every caller gets the same answer.
#pragma once

#include <dlfcn.h>

#include <string>

namespace iris {

template <class Table>
struct LoadedLibrary {
  Table table;
  std::string why_not;  // empty once the table is complete and the runtime initialised

  // The table, or nullptr with `why` set to the reason.
  const Table* get(std::string& why) const {
    if (!why_not.empty()) {
      why = why_not;
      return nullptr;
    }
    return &table;
  }
};

// Looks `name` up in `lib` into the table's `slot`: false when the library lacks it.
template <class Fn>
bool resolve(void* lib, const char* name, Fn& slot) {
  slot = reinterpret_cast<Fn>(::dlsym(lib, name));
  return slot != nullptr;
}

}  // namespace iris
