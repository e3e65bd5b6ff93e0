// A spin-wait hint: lets the sibling hyperthread run and saves power while polling.
#pragma once

namespace iris {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace iris
