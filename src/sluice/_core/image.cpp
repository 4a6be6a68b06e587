// Placeholder until this part of the core is written: registers nothing.
#include "core.h"

namespace sluice {
void register_image(py::module_& m) { (void)m; }
}  // namespace sluice
