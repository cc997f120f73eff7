"""Two import-time shims that let the released Nabla run on a stable Modular.

nabla-ml 26.2251344 (PyPI) declares `modular>=26.2.0.dev2026021705` and
refuses, at import, any `modular` whose version has no `.dev` (a nightly);
the registries serve no nightly. With the stable `modular` 26.3.0 (and
`max` 26.3.0, which it names) two things stand in the way, and this module
mends exactly those two, without editing site-packages:

1. The version check. `nabla/__init__.py` calls
   `importlib.metadata.version("modular")` once and raises
   `RuntimeError("Nabla requires Modular nightly builds ...")` unless the
   answer contains ".dev". While `nabla` is imported, that one call answers
   the installed version with "+shim.dev" appended; every other call, and
   every call after the import, is untouched.
2. A renamed pass. `nabla/core/graph/engine.py` lowers its graph with
   `builtin.passes.RemoveDeadValues()`; in max 26.3.0 the same pass is
   `builtin.passes.RemoveDeadValuesPass` (same signature, `canonicalize=True`
   by default). The old name is bound to the new one; nothing else changes.

Use: `import nabla_shims; nabla = nabla_shims.import_nabla()` (peers/ on
sys.path). Nothing of Nabla's sharding, propagation or ops is touched: the
recording shows the released library's own behaviour.
"""

import importlib
import importlib.metadata as _metadata

SHIMS = [
    "importlib.metadata.version('modular') answers '<installed>+shim.dev' while "
    "`import nabla` runs (nabla/__init__.py refuses a modular without '.dev')",
    "max._core.dialects.builtin.passes.RemoveDeadValues = RemoveDeadValuesPass "
    "(the pass nabla/core/graph/engine.py calls was renamed in max 26.3.0)",
]


def _alias_pass():
    from max._core.dialects import builtin

    passes = builtin.passes
    if not hasattr(passes, "RemoveDeadValues"):
        passes.RemoveDeadValues = passes.RemoveDeadValuesPass


def import_nabla():
    """Import nabla with the two shims; return the module."""
    _alias_pass()
    real = _metadata.version

    def version(name):
        v = real(name)
        if name == "modular" and ".dev" not in v:
            return v + "+shim.dev"
        return v

    _metadata.version = version
    try:
        return importlib.import_module("nabla")
    finally:
        _metadata.version = real


def versions():
    """The versions the recording ran with (the real ones, not the shimmed)."""
    return {
        name: _metadata.version(name)
        for name in ("nabla-ml", "modular", "max", "max-core", "numpy")
    }
