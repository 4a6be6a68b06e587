// Placeholder until this part of the core is written: registers nothing.
#include "core.h"

namespace sluice {
void register_audio(py::module_& m) { (void)m; }
}  // namespace sluice
