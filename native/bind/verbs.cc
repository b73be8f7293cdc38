// Bindings for the verbs layer (gdrlab.verbs). Filled in by the verbs module.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void bind_verbs(nb::module_& m) { (void)m; }
