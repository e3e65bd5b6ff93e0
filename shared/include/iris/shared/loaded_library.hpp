// A vendor runtime's entry-point table loaded once with dlopen (CUDA driver, HIP, HSA), or the
// reason it could not be: each loader fills one of these, and every caller gets the same answer.
#pragma once

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

}  // namespace iris
