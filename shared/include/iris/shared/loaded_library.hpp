// A run-time library's entry-point table loaded once with dlopen, or the reason it could not be.
// Every loader (cuda_library, hip_library, engines/hsa/hsa_library, scaleout/ucx_library; as
// NCCL's *wrap.cc) fills one of these with resolve_all() over its X-macro list of entry points,
// and every caller gets the same answer.
#pragma once

#include <dlfcn.h>

#include <initializer_list>
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

// One entry point of a table: its name in the library and the table's slot for it.
struct Symbol {
  const char* name;
  void** slot;
};

#define IRIS_LIBRARY_STRINGIFY2(x) #x
#define IRIS_LIBRARY_STRINGIFY(x) IRIS_LIBRARY_STRINGIFY2(x)
// `table`'s slot for entry point `name` as a Symbol. `name` is expanded first, so a versioned
// API's macros (cuda.h's cuMemHostRegister -> cuMemHostRegister_v2) name the symbol and the slot.
#define IRIS_LIBRARY_SYMBOL(table, name) \
  ::iris::Symbol { IRIS_LIBRARY_STRINGIFY(name), reinterpret_cast<void**>(&(table).name) }

// Looks every symbol up in `lib` into its slot (null where `lib` lacks it): the name of the first
// one missing, or nullptr when none is.
inline const char* resolve_all(void* lib, std::initializer_list<Symbol> symbols) {
  const char* missing = nullptr;
  for (const Symbol& s : symbols) {
    *s.slot = ::dlsym(lib, s.name);
    if (*s.slot == nullptr && missing == nullptr) missing = s.name;
  }
  return missing;
}

}  // namespace iris
