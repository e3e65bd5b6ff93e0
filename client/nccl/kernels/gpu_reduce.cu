// nvcc's translation unit for the CUDA build's reduction kernels (kernels/reduce_kernels.hpp),
// built into a fatbin that the library loads through the driver API, so that it needs no CUDA
// runtime.
#include "reduce_kernels.hpp"
